"""Exact Spearman sums of posdiag.scoring.scores (numpy and compiled paths) against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.spatial.distance import pdist, squareform

from posdiag.geometry.core import compare, gram_from_distances
from posdiag.scoring import _ranks as _fastrank
from posdiag.scoring import scores as fastscore
from posdiag.scoring._sort import _mac
from posdiag.scoring.scores import (
    SortLayout,
    corpus_side,
    score_profile,
    score_vectors,
    upper_distances,
)
from tests._data import toeplitz


def upper(a: np.ndarray) -> np.ndarray:
    return a[np.triu_indices(a.shape[0], k=1)]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(stats.spearmanr(x, y).statistic)


def same(a: float, b: float, tol: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


levels = st.integers(0, 4)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 60),
    st.integers(0, 4),
    st.integers(0, 4),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_spearman_of_tied_vectors_equals_scipy_on_both_paths(
    n: int, top_d: int, top_p: int, seed: int, compiled: bool
) -> None:
    # Levels drawn from a seed (hypothesis drawing n^2 list items one by one took seconds);
    # a top level of 0 makes every distance (or every coordinate) equal.
    rng = np.random.default_rng(seed)
    dvals = rng.integers(0, top_d + 1, n * n)
    pvals = rng.integers(0, top_p + 1, 2 * n)
    # Integer levels: many ties among d_H (zeros, all-equal when every level is the same)
    # and among the encoding's distances (coordinates on a grid).
    a = np.array(dvals, dtype=float).reshape(n, n)
    d = np.triu(a, 1) + np.triu(a, 1).T
    assume(d.any())  # B_H = 0 has no stress (a division by ||B_H||), whatever the path
    b = gram_from_distances(d)
    p = np.array(pvals, dtype=float).reshape(n, 2)
    got = score_vectors(corpus_side(d, b, compiled=compiled), b, p)
    delta = squareform(pdist(p))
    want = compare(d, b, delta, gram_from_distances(delta))
    assert same(got.spearman, spearman(upper(d), upper(delta)), 1e-12)
    # Kruskal from sums: its square (the residual fraction) is exact to rounding; a perfect
    # fit leaves ~1e-16 whose square root is ~1e-8.
    assert same(got.kruskal**2, want.kruskal**2, 1e-12)
    assert got.stress == pytest.approx(want.stress, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 50),
    st.lists(levels, min_size=50, max_size=50),
    st.integers(0, 1000),
    st.booleans(),
)
def test_profile_spearman_equals_scipy_on_both_paths(
    n: int, prof: list[int], seed: int, compiled: bool
) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, (n, n)).astype(float)
    d = np.triu(a, 1) + np.triu(a, 1).T
    assume(d.any())  # B_H = 0 has no stress (a division by ||B_H||), whatever the path
    g = np.concatenate(([0.0], np.array(prof[: n - 1], dtype=float)))
    delta = toeplitz(lambda lag: g[lag.astype(int)], n)
    b = gram_from_distances(d)
    got = score_profile(corpus_side(d, b, compiled=compiled), g)
    assert same(got.spearman, spearman(upper(d), upper(delta)), 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.5, -2.0, 1e-300, 3.0, 7.25]), max_size=300))
def test_corpus_ranks_equal_rankdata(values: list[float]) -> None:
    # d_H from the values (upper triangle, row-major), -0.0 tied with 0.0 as floats compare.
    m = len(values)
    n = 2
    while n * (n - 1) // 2 < m:
        n += 1
    x = np.array(values + [0.0] * (n * (n - 1) // 2 - m))
    d = np.zeros((n, n))
    d[np.triu_indices(n, k=1)] = x
    for compiled in (False, True):
        side = corpus_side(d, np.zeros((n, n)), compiled=compiled)
        twice = 2 * stats.rankdata(x) if x.size else x
        np.testing.assert_array_equal(np.asarray(side.rank2, dtype=float), twice)
        centred = twice - (x.size + 1)
        assert side.rank_ss2 == round(float(centred @ centred))
        lags = np.subtract(*np.triu_indices(n, k=1)[::-1])
        want = np.bincount(lags, weights=centred, minlength=n)
        np.testing.assert_array_equal(side.rank_lags, want)


def kernel_ranks(
    x: np.ndarray, buckets: int, threads: int, bits: int, cap: int
) -> tuple[np.ndarray, int, int]:
    """Twice the average ranks of ``x`` by the compiled scatter and bucket sort (flat source),
    ``sum t^3 - t`` of its ties, and the NaN count."""
    hist = np.zeros((threads, buckets), np.int64)
    nan = int(np.isnan(x).sum())
    if nan:
        return np.zeros(0), 0, nan
    vmin, vmax = float(x.min()), float(x.max())
    scale = fastscore._scale(buckets, vmin, vmax)
    _fastrank.flat_hist(x, vmin, scale, hist)
    starts = _fastrank.bucket_offsets(hist)
    keys = np.empty(x.size)
    idx = np.empty(x.size, np.uint32)
    _fastrank.flat_scatter(x, np.empty(0, np.uint32), vmin, scale, hist, keys, idx)
    assert np.array_equal(np.sort(idx), np.arange(x.size))  # a permutation of the pairs
    rank2 = np.zeros(x.size, np.uint32)
    out = _fastrank.sort_buckets(keys, idx, starts, rank2, True, threads, bits, cap)
    ties = sum(fastscore._from_limbs(h, lo) for h, lo in out[:, 2:4])
    return rank2, ties, 0


def tie_sum(x: np.ndarray) -> int:
    _, counts = np.unique(x + 0.0, return_counts=True)
    return int(sum(int(t) ** 3 - int(t) for t in counts))


def awkward_values(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate(
        [
            rng.standard_normal(3000) * np.exp(rng.uniform(-30, 30, 3000)),  # wide exponents
            rng.integers(-3, 4, 2000).astype(float),  # ties, crowded buckets
            [0.0, -0.0] * 50,
            rng.uniform(1.0, 1.0 + 1e-12, 300),  # keys differing in the last bits only
            rng.uniform(5.0, 6.0, 3000),  # smooth: the insertion pass
        ]
    )
    rng.shuffle(x)
    return x


@pytest.mark.parametrize("buckets", [1, 7, 256, 4096])
@pytest.mark.parametrize("bits", [3, 8])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("cap", [1, 64, 1 << 20])
def test_bucket_ranks_equal_rankdata(buckets: int, bits: int, threads: int, cap: int) -> None:
    # cap: the buffer of each thread; buckets above it get their own (every one when cap = 1).
    x = awkward_values(bits * 10 + threads)
    rank2, ties, nan = kernel_ranks(x, buckets, threads, bits, cap)
    assert nan == 0
    np.testing.assert_array_equal(rank2, 2 * stats.rankdata(x))  # -0.0 ties with 0.0
    assert ties == tie_sum(x)


@pytest.mark.parametrize(
    "special", [[np.inf], [-np.inf, np.inf], [5.0] * 10, [1e308, -1e308], [5e-324, 0.0]]
)
def test_bucket_ranks_infinite_huge_and_constant(special: list[float]) -> None:
    x = np.concatenate([np.linspace(-1, 1, 50), special, np.full(40, 0.25)])
    for buckets in (1, 64):
        rank2, ties, nan = kernel_ranks(x, buckets, 2, 8, 1 << 10)
        assert nan == 0
        np.testing.assert_array_equal(rank2, 2 * stats.rankdata(x))
        assert ties == tie_sum(x)


def test_an_outlier_crowds_one_bucket_sorted_in_place() -> None:
    # Equal widths in value put all but the outlier in bucket 0, above the buffer size: that
    # bucket is sorted where it lies (radix by cycles), with no buffer of its size.
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.uniform(0.0, 1.0, 20000), rng.integers(0, 9, 3000) / 8, [1e12]])
    rng.shuffle(x)
    rank2, ties, _ = kernel_ranks(x, 256, 2, 8, 1024)
    np.testing.assert_array_equal(rank2, 2 * stats.rankdata(x))
    assert ties == tie_sum(x)


def test_bucket_ranks_of_all_equal_values() -> None:
    x = np.full(5000, 0.5)
    rank2, ties, _ = kernel_ranks(x, 16, 2, 8, 64)
    np.testing.assert_array_equal(rank2, np.full(5000, 5001))
    assert ties == 5000**3 - 5000


def test_bucket_ranks_count_nan() -> None:
    assert kernel_ranks(np.array([1.0, np.nan, 2.0, np.nan]), 4, 2, 8, 16)[2] == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_bucket_cross_sums_equal_brute_force(threads: int) -> None:
    # The walk without ranks: payloads are doubled corpus ranks, summed per tie group of x.
    x = awkward_values(5)
    m = x.size
    corpus = 2 * stats.rankdata(np.random.default_rng(1).integers(0, 50, m))
    hist = np.zeros((threads, 300), np.int64)
    vmin, vmax = float(x.min()), float(x.max())
    scale = fastscore._scale(300, vmin, vmax)
    _fastrank.flat_hist(x, vmin, scale, hist)
    starts = _fastrank.bucket_offsets(hist)
    keys = np.empty(m)
    vals = np.empty(m, np.uint32)
    _fastrank.flat_scatter(x, corpus.astype(np.uint32), vmin, scale, hist, keys, vals)
    out = _fastrank.sort_buckets(keys, vals, starts, np.empty(0, np.uint32), False, threads, 8, 64)
    cross = sum(fastscore._from_limbs(h, lo) for h, lo in out[:, 0:2])
    c_e = (2 * stats.rankdata(x) - (m + 1)).astype(np.int64)
    c_h = (corpus - (m + 1)).astype(np.int64)
    assert cross == int(c_e @ c_h)
    assert sum(fastscore._from_limbs(h, lo) for h, lo in out[:, 2:4]) == tie_sum(x)


def test_two_limb_sums_are_exact() -> None:
    from numba import njit

    @njit(cache=False)
    def total(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
        hi, lo = 0, 0
        for q in range(a.size):
            hi, lo = _mac(hi, lo, a[q], b[q])
        return hi, lo

    rng = np.random.default_rng(0)
    # Terms up to 2^80 and two at the extremes (2^92): a total far beyond int64, within the
    # 2^93 the limbs hold (the kernels' sums stay below m^3 < 2^90).
    a = np.concatenate(([2**30 - 1, -(2**30) + 1], rng.integers(-(2**30) + 1, 2**30, 5000)))
    b = np.concatenate(([2**62 - 1, 2**62 - 1], rng.integers(-(2**50), 2**50, 5000)))
    hi, lo = total(a, b)
    assert (int(hi) << _fastrank.LIMB_BITS) + int(lo) == sum(
        int(x) * int(y) for x, y in zip(a, b, strict=True)
    )


def test_nan_distances_give_nan_rho_on_both_paths() -> None:
    n = 12
    rng = np.random.default_rng(1)
    d = squareform(pdist(rng.standard_normal((n, 3))))
    p = rng.standard_normal((n, 2))
    p[3, 0] = np.nan
    wide = rng.standard_normal((n, fastscore.DIRECT_MAX_DIM + 4))  # distances from BLAS blocks
    wide[7, 2] = np.nan
    b = gram_from_distances(d)
    both = []
    for compiled in (False, True):
        side = corpus_side(d, b, compiled=compiled)
        assert math.isnan(score_vectors(side, b, p).spearman)
        both.append(score_vectors(side, b, wide))
        assert math.isnan(both[-1].spearman)
        dn = d.copy()
        dn[2, 5] = dn[5, 2] = np.nan
        assert math.isnan(
            score_vectors(corpus_side(dn, b, compiled=compiled), b, p[:, :1] * 0 + 1).spearman
        )
    for field in ("stress", "raw", "kruskal", "spearman"):  # the same figures on both paths
        assert same(getattr(both[0], field), getattr(both[1], field), 0.0), field


@pytest.fixture(scope="module")
def medium() -> tuple[np.ndarray, np.ndarray]:
    """n = 600 (179,700 pairs, above COMPILED_FROM_PAIRS) with rounded, tied distances."""
    x = np.random.default_rng(7).standard_normal((600, 4))
    d = np.round(squareform(pdist(x)), 2)
    return d, gram_from_distances(d)


def test_medium_input_takes_the_compiled_path_and_agrees(
    medium: tuple[np.ndarray, np.ndarray],
) -> None:
    d, b = medium
    assert d.shape[0] * (d.shape[0] - 1) // 2 >= fastscore.COMPILED_FROM_PAIRS
    side = corpus_side(d, b)
    assert side.compiled and side.rank2.dtype == np.uint32  # numpy's ranks are int64
    rng = np.random.default_rng(3)
    for p in (np.round(rng.standard_normal((600, 3)), 1), rng.standard_normal((600, 20))):
        got = score_vectors(side, b, p)
        delta = squareform(pdist(p)) if p.shape[1] <= fastscore.DIRECT_MAX_DIM else None
        de = upper(delta) if delta is not None else upper_distances(p)
        assert got.spearman == pytest.approx(spearman(upper(d), de), abs=1e-12)
        if delta is not None:
            want = compare(d, b, delta, gram_from_distances(delta))
            assert got.kruskal == pytest.approx(want.kruskal, abs=1e-12)
            assert got.stress == pytest.approx(want.stress, abs=1e-12)


def test_paths_and_block_sizes_give_identical_results(
    medium: tuple[np.ndarray, np.ndarray],
) -> None:
    d, b = medium
    rng = np.random.default_rng(5)
    vectors = [np.round(rng.standard_normal((600, 2)), 1), rng.standard_normal((600, 24))]
    profile = np.minimum(np.arange(600), 40).astype(float)
    results = []
    for compiled, block_bytes in ((False, 1 << 26), (True, 1 << 26), (True, 8 * 600 * 7)):
        side = corpus_side(d, b, compiled=compiled, layout=SortLayout(block_bytes=block_bytes))
        rows = [score_vectors(side, b, p) for p in vectors]
        rows.append(score_profile(side, profile))
        results.append(rows)
    for rows in results[1:]:
        for got, want in zip(rows, results[0], strict=True):
            # Ranks are exact integers: rho is the same float on every path. The float sums
            # are added in another order, and the compiled path takes <B_H, B_E> as
            # -sum B_H d_E^2 from its distance kernel instead of sum((B_H JP) o JP).
            assert got.spearman == want.spearman
            assert got.stress == pytest.approx(want.stress, rel=1e-12)
            assert got.kruskal == pytest.approx(want.kruskal, rel=1e-13)


@pytest.mark.parametrize(
    ("bucket_size", "max_buckets", "buffer"), [(64, 1 << 20, 4), (1 << 20, 256, 1 << 16)]
)
def test_bucket_layout_does_not_change_scores(
    medium: tuple[np.ndarray, np.ndarray],
    bucket_size: int,
    max_buckets: int,
    buffer: int,
) -> None:
    # Many small buckets with tiny thread buffers (every bucket gets its own), or one crowded
    # bucket range: the same exact integers, so the same floats.
    d, b = medium
    rng = np.random.default_rng(9)
    vectors = [np.round(rng.standard_normal((600, 3)), 1), rng.standard_normal((600, 20))]
    side = corpus_side(d, b)
    want = [score_vectors(side, b, p) for p in vectors]
    layout = SortLayout(bucket_size, max_buckets, bucket_size, max_buckets, buffer)
    other = corpus_side(d, b, layout=layout)
    np.testing.assert_array_equal(other.rank2, side.rank2)
    assert other.rank_ss2 == side.rank_ss2
    for p, w in zip(vectors, want, strict=True):
        assert score_vectors(other, b, p) == w


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 40).flatmap(
        lambda n: st.lists(
            st.lists(
                st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False),
                min_size=n,
                max_size=n,
            ),
            min_size=1,
            max_size=40,
        )
    )
)
def test_diameter_bound_is_above_every_distance(rows: list[list[float]]) -> None:
    p = np.array(rows)
    bound = fastscore._diameter_bound(p)
    # Up to rounding: a distance a few ulps above the bound only lands in the top bucket.
    assert pdist(p).max(initial=0.0) <= bound * (1 + 1e-12) + 1e-300
