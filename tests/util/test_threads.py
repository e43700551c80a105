"""posdiag._util.threads: small dense work runs on one BLAS thread, large work keeps the
library's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_info, threadpool_limits

from posdiag._util import threads as _threads
from posdiag.counts.core import Counts
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.scores import score_encodings
from tests._data import sample_sharded_counts, zipf_drift_distributions


def _blas_threads() -> set[int]:
    return {int(p["num_threads"]) for p in threadpool_info() if p["user_api"] == "blas"}


@pytest.fixture
def two_threads():
    if not _blas_threads():
        pytest.skip("no BLAS library seen by threadpoolctl")
    with threadpool_limits(limits=2, user_api="blas"):
        yield


def test_small_work_runs_on_one_thread_and_large_work_keeps_its_own(two_threads):
    assert _blas_threads() == {2}
    with _threads.small_blas(_threads.BLAS_THREADS_FROM - 1):
        assert _blas_threads() == {1}
    assert _blas_threads() == {2}  # restored on leaving
    with _threads.small_blas(_threads.BLAS_THREADS_FROM):
        assert _blas_threads() == {2}


def test_the_report_scores_small_geometries_on_one_thread(two_threads, monkeypatch):
    seen: list[set[int]] = []
    import posdiag.reports.scores as scores_module

    real = scores_module.score_encoding

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(scores_module, "score_encoding", spy)
    total, shards = sample_sharded_counts(zipf_drift_distributions(24, 500), 400, seed=1)
    counts = Counts(
        sp.csr_matrix(total), {"source": "synthetic"}, None, tuple(map(sp.csr_matrix, shards))
    )
    geo = corpus_geometry(counts, min_count=1)
    scores = score_encodings(geo, ["sinusoidal", "alibi"])
    assert seen and all(s == {1} for s in seen)
    assert _blas_threads() == {2}
    assert all(np.isfinite(s.stress) for s in scores)
