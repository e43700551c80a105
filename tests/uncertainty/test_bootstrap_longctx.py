"""The cheaper bootstrap replicate (hybrid product, one diagonal-sum pass shared by the Toeplitz
encodings) gives the intervals of the straightforward dense replicate: calibration is unchanged
because the replicate statistics are the same to < 1e-6."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import Counts, count_texts
from posdiag.encodings import DEFAULT_SET, make_encoding, parse_encoding
from posdiag.geometry.core import gram_from_distances, stress_by_rank
from posdiag.reports.analysis import corpus_geometry
from posdiag.scoring import scores as fastscore
from posdiag.uncertainty import bootstrap as uncertainty
from posdiag.uncertainty.bootstrap import bootstrap_stress
from tests._data import drift_distributions, sample_texts


def dense_hellinger(c: np.ndarray) -> np.ndarray:
    s = np.sqrt(c / c.sum(axis=1, keepdims=True))
    d2 = np.clip(1.0 - s @ s.T, 0.0, 1.0)
    d = np.sqrt(d2)
    np.fill_diagonal(d, 0.0)
    return d


def reference_bootstrap(
    sharded: Counts, n: int, encs: list, estimates: list[float], reps: int, seed: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The replicate loop as it was: dense distances, full eigh, n x n Gram per encoding."""
    k = len(sharded.shards)
    h = k // 2
    rng = np.random.default_rng(seed)
    assert k % 2 == 0
    weights = np.zeros((reps, k))
    for j, row in enumerate(weights):
        if j % 2:
            row[:] = 1.0 - weights[j - 1]  # complementary pairs (even k: the complement)
        else:
            row[rng.choice(k, size=h, replace=False)] = 1.0
    shards = [sp.csr_matrix(s)[:n].toarray().astype(float) for s in sharded.shards]
    enc_s: list[list[float]] = [[] for _ in encs]
    rank_s = []
    for w in weights:
        c = sum(wi * s for wi, s in zip(w, shards, strict=True))
        if np.any(c.sum(axis=1) <= 0):
            continue
        b = gram_from_distances(dense_hellinger(c))
        lam = np.sort(np.linalg.eigvalsh(b))[::-1]
        tail = stress_by_rank(lam)
        rank_s.append(tail)
        for i, e in enumerate(encs):
            r = uncertainty._mds_rank(e)
            if r is not None:
                enc_s[i].append(float(tail[r - 1]))
            else:
                g = e.gram()
                norms = np.linalg.norm(b) * np.linalg.norm(g)
                cos = max(0.0, float(np.vdot(b, g))) / norms if norms else 0.0  # nope: stress 1
                enc_s[i].append(float(np.sqrt(max(0.0, 1.0 - cos * cos))))
    full = stress_by_rank(
        np.sort(
            np.linalg.eigvalsh(
                gram_from_distances(dense_hellinger(sharded.matrix[:n].toarray().astype(float)))
            )
        )[::-1]
    )
    ranks = np.array(rank_s)
    encodings = [
        uncertainty._interval(est, np.array(s), 0.95)
        for est, s in zip(estimates, enc_s, strict=True)
    ]
    by_rank = [uncertainty._interval(full[r], ranks[:, r], 0.95) for r in range(n - 1)]
    return encodings, by_rank


@pytest.fixture(scope="module")
def sharded() -> Counts:
    mu = drift_distributions(30, 80, rank=3, seed=2)
    return count_texts(
        sample_texts(mu, 600, seed=3), load_tokenizer(), shards=8, shard_seed=1, max_len=30
    )


def _encodings(n: int, sharded: Counts) -> list:
    geo = corpus_geometry(sharded, min_count=1)
    return [make_encoding(nm, n, p, mds=geo.mds) for nm, p in map(parse_encoding, DEFAULT_SET)]


def test_fast_replicates_reproduce_the_dense_intervals(
    sharded: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 30
    encs = _encodings(n, sharded)
    estimates = [0.5] * len(encs)
    calls: list[int] = []
    real = fastscore.GramScorer.stress

    def spy(self: fastscore.GramScorer, *args: object) -> float:
        calls.append(1)
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(fastscore.GramScorer, "stress", spy)
    iv = bootstrap_stress(sharded, n, encs, estimates, replicates=40, seed=5)
    assert len(calls) == 40 * 7  # 7 fixed encodings scored through the shared path
    ref_enc, ref_rank = reference_bootstrap(sharded, n, encs, estimates, 40, 5)
    np.testing.assert_allclose(np.array(iv.encodings), np.array(ref_enc), atol=1e-6)
    np.testing.assert_allclose(np.array(iv.stress_by_rank), np.array(ref_rank), atol=1e-6)


def test_the_bootstrap_reserves_each_tables_dense_gram(sharded: Counts) -> None:
    """A table's scorer may keep its dense B_E (fastscore.DENSE_TABLE_MAX): the bootstrap's
    memory estimate counts one n x n float64 array per table, and none for a lag profile."""
    from posdiag._util.memory import set_max_memory
    from posdiag.errors import PosdiagError

    n, reps = 12, 20
    k, profile, table = (
        len(sharded.shards),
        make_encoding("alibi", n),
        make_encoding("learned-random", n),
    )
    base = 8 * reps * (k + 1 + n) + 8 * 8 * n * n
    set_max_memory(base + 8 * n * n // 2)  # room for the replicates, not for a table's B_E
    try:
        bootstrap_stress(sharded, n, [profile], [0.5], replicates=reps, seed=1)
        with pytest.raises(PosdiagError, match=r"^20 bootstrap replicates \(--replicates\) of 1 "):
            bootstrap_stress(sharded, n, [table], [0.5], replicates=reps, seed=1)
    finally:
        set_max_memory(None)
