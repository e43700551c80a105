"""posdiag.scoring.scores.score_vectors_many: the mds-r family scored in one pass, bit for bit the
figures of score_vectors one table at a time (small inputs, forced compiled, and n = 600)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import pdist, squareform

from posdiag.geometry.core import gram_from_distances
from posdiag.scoring import _ranks as _fastrank
from posdiag.scoring import scores as fastscore
from posdiag.scoring.scores import corpus_side, score_vectors, score_vectors_many


@contextmanager
def path(compiled: bool) -> Iterator[None]:
    """Force the compiled kernels (threshold 0) or numpy (threshold above any test size)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fastscore, "COMPILED_FROM_PAIRS", 0 if compiled else 1 << 40)
        yield


def corpus(n: int, seed: int, decimals: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Rounded (tied) distances of random points and their double-centred Gram."""
    x = np.random.default_rng(seed).standard_normal((n, 4))
    d = np.round(squareform(pdist(x)), decimals)
    return d, gram_from_distances(d)


def family(n: int, seed: int, width: int = 3) -> list[np.ndarray]:
    """mds-1 .. mds-`width` as the pipeline builds them: leading columns of one table
    (rounded, so the encodings' distances tie too)."""
    top = np.round(np.random.default_rng(seed).standard_normal((n, width)), 1)
    return [np.ascontiguousarray(top[:, :r]) for r in range(1, width + 1)]


def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the calls of the one-table and the nested scan kernels."""
    calls = {"vector_scan": 0, "nested_scan": 0}
    for name in calls:
        kernel = getattr(_fastrank, name)

        def wrapper(*args: object, _k: object = kernel, _n: str = name) -> object:
            calls[_n] += 1
            return _k(*args)  # type: ignore[operator]

        monkeypatch.setattr(_fastrank, name, wrapper)
    return calls


@pytest.mark.parametrize(("n", "compiled"), [(30, False), (30, True), (600, True)])
def test_family_together_equals_one_at_a_time(
    n: int, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, b = corpus(n, seed=1)
    # The family, a wide table and a narrow table that is no prefix of the family's, mixed.
    rng = np.random.default_rng(2)
    tables = family(n, seed=3)
    tables.insert(1, rng.standard_normal((n, 20)))
    tables.append(np.round(rng.standard_normal((n, 2)), 1))
    want = [score_vectors(corpus_side(d, b, compiled=compiled), b, p) for p in tables]
    calls = counted(monkeypatch)
    got = score_vectors_many(corpus_side(d, b, compiled=compiled), b, tables)
    assert [repr(g) for g in got] == [repr(w) for w in want]
    # Compiled: one nested pass for mds-1..3, one own pass for the other narrow table.
    assert calls == ({"vector_scan": 1, "nested_scan": 1} if compiled else dict.fromkeys(calls, 0))


@pytest.mark.parametrize("width", [2, 4, 7])
def test_family_of_any_size_is_scored_exactly(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two tables: one slot of the three repeated; four: a nested pass and one alone; seven:
    # two nested passes and one alone.
    d, b = corpus(600, seed=4)
    tables = family(600, seed=5, width=width)[::-1]  # any order in, results in that order
    want = [score_vectors(corpus_side(d, b), b, p) for p in tables]
    calls = counted(monkeypatch)
    got = score_vectors_many(corpus_side(d, b), b, tables)
    assert [repr(g) for g in got] == [repr(w) for w in want]
    assert calls == {"nested_scan": width // 3 + (width == 2), "vector_scan": width % 3 == 1}


def test_nested_kernel_fills_what_one_table_passes_fill() -> None:
    d, b = corpus(200, seed=6)
    tables = family(200, seed=7)
    n = 200
    start_hist = np.zeros((2, 64), dtype=np.int64)
    scales = np.array([3.0, 2.5, 2.0])
    rows = np.zeros((3, 3, n))
    hist = np.zeros((3,) + start_hist.shape, dtype=np.int64)
    dims = np.array([1, 2, 3])
    nans = _fastrank.nested_scan(tables[-1], dims, d, b, rows, scales, hist)
    for e, p in enumerate(tables):
        one_rows = np.zeros((3, n))
        one_hist = np.zeros_like(start_hist)
        nan = _fastrank.vector_scan(p, d, b, one_rows, float(scales[e]), one_hist)
        assert nans[e] == nan == 0
        assert rows[e].tobytes() == one_rows.tobytes()
        np.testing.assert_array_equal(hist[e], one_hist)
        assert hist[e].sum() == n * (n - 1) // 2


def test_nan_coordinate_spoils_only_the_tables_that_hold_it() -> None:
    d, b = corpus(600, seed=8)
    tables = family(600, seed=9)
    top = tables[-1].copy()
    top[5, 2] = np.nan  # in mds-3 only
    tables = [np.ascontiguousarray(top[:, :r]) for r in (1, 2, 3)]
    want = [score_vectors(corpus_side(d, b), b, p) for p in tables]
    got = score_vectors_many(corpus_side(d, b), b, tables)
    assert [repr(g) for g in got] == [repr(w) for w in want]
    assert np.isnan(got[2].spearman) and not np.isnan(got[1].spearman)


@settings(max_examples=25, deadline=None)
@given(st.integers(8, 40), st.integers(0, 10_000), st.integers(1, 4), st.booleans())
def test_random_families_equal_one_at_a_time(n: int, seed: int, width: int, negate: bool) -> None:
    d, b = corpus(n, seed, decimals=1)
    tables = family(n, seed + 1, width)
    if negate:
        # -0.0 and 0.0 differ in bits: a table with them is no prefix of the others (and
        # is scored on its own), with the same figures either way.
        tables[0] = np.where(tables[0] == 0.0, -0.0, tables[0])
    want = [score_vectors(corpus_side(d, b, compiled=True), b, p) for p in tables]
    got = score_vectors_many(corpus_side(d, b, compiled=True), b, tables)
    assert [repr(g) for g in got] == [repr(w) for w in want]


def test_score_encodings_scores_the_mds_family_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from posdiag.corpus.tokenizers import load_tokenizer
    from posdiag.counts.core import count_texts
    from posdiag.reports import scores as scores_module
    from posdiag.reports.analysis import corpus_geometry
    from posdiag.reports.scores import score_encodings
    from tests._data import drift_distributions, sample_texts

    mu = drift_distributions(40, 60, rank=3, seed=4)
    counts = count_texts(sample_texts(mu, 400, seed=5), load_tokenizer(), max_len=40)
    geo = corpus_geometry(counts, min_count=1)
    with path(True):
        calls = counted(monkeypatch)
        got = score_encodings(geo)
        assert calls == {"nested_scan": 1, "vector_scan": 0}  # mds-1..3 together

        def one_at_a_time(side: object, b: np.ndarray, ps: list[np.ndarray]) -> list[object]:
            return [score_vectors(side, b, p) for p in ps]  # type: ignore[arg-type]

        monkeypatch.setattr(scores_module, "score_vectors_many", one_at_a_time)
        want = score_encodings(geo)
    assert {s.name for s in got} >= {"mds-1", "mds-2", "mds-3"}
    assert [repr(s) for s in got] == [repr(s) for s in want]
    assert calls["vector_scan"] == 3  # the second run: one pass each
