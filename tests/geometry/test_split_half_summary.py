"""The split-half summary (held-out mds-r, noise energy, pairs within sampling error) made one
half's gram at a time equals the whole-grams computation; the stashed first half costs no
n x n array and leaves the distances it borrowed bit for bit as they were."""

from __future__ import annotations

import dataclasses
import math
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from posdiag._util.threads import small_blas
from posdiag.counts.core import Counts
from posdiag.geometry import estimator, heldout
from posdiag.geometry.estimator import split_half_summary
from posdiag.reports import analysis, intervals
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from posdiag.uncertainty.bootstrap import NO_SHARDS
from tests._data import drift_distributions, whole_mask, whole_split_half
from tests.geometry._oracles import heldout_mds_stress, noise_energy, split_half_grams


def noisy_counts(n: int, v: int = 60, seed: int = 5) -> sp.csr_matrix:
    """``n`` positions drifting smoothly, 60 + i tokens at position i (noisy enough that some
    pairs are within their sampling error and some are not)."""
    rng = np.random.default_rng(seed)
    p = drift_distributions(n, v, seed=2)
    return sp.csr_matrix(np.stack([rng.multinomial(60 + i, p[i]) for i in range(n)]))


def _geometry(n: int, v: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    counts = noisy_counts(n, v)
    geo = corpus_geometry(Counts(counts, {}), min_count=1, plain=False)
    return counts, geo.mds.gram, geo.distances


@pytest.fixture(scope="module")
def medium() -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """300 positions (the compiled passes of posdiag.geometry._square and ._summary), its B_H
    and D_H."""
    return _geometry(300, 80)


@pytest.fixture(scope="module")
def small() -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """100 positions: below COMPILED_FROM (128), every pass in numpy."""
    return _geometry(100, 60)


@pytest.fixture
def one_outer_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """The long-context path (one outer split, the stash) on a small input."""
    for module in (estimator, heldout):
        monkeypatch.setattr(module, "outer_splits", lambda n: 1)


@pytest.mark.parametrize("size", ["small", "medium"])
@pytest.mark.parametrize("repeats", [1, 2])
@pytest.mark.parametrize("stashed", ["none", "distances", "gram"])
@pytest.mark.parametrize("rows", [1, 7, 10_000])
def test_summary_equals_the_whole_grams(
    repeats: int, stashed: str, rows: int, size: str, request: pytest.FixtureRequest
) -> None:
    # The element-wise passes compiled (posdiag.geometry._summary) or in numpy: the same numbers.
    counts, gram, distances = request.getfixturevalue(size)
    n = gram.shape[0]
    before, gram_before = distances.copy(), gram.copy()
    got = split_half_summary(
        counts,
        n,
        gram,
        repeats=repeats,
        ranks=[1, 2, 3],
        stash={"none": None, "distances": distances, "gram": gram}[stashed],
        block_bytes=8 * n * rows,
    )
    # Borrowed and restored bit for bit.
    np.testing.assert_array_equal(distances, before)
    np.testing.assert_array_equal(gram, gram_before)
    # The reference on the BLAS threads the summary uses (one below 512 positions): OpenBLAS
    # 0.3.31 splits these float32 products across threads, which reorders their additions.
    with small_blas(n):
        half = split_half_grams(counts, n, repeats=repeats)
        want_rows = noise_energy(half).sum(axis=1)
        want = heldout_mds_stress(half, [1, 2, 3])
    np.testing.assert_array_equal(got.energy_rows, want_rows)
    assert set(got.heldout) == {1, 2, 3}
    for r in (1, 2, 3):
        # Only <B_P, B_Q> and B_P X are summed by row blocks.
        assert got.heldout[r] == pytest.approx(want[r], rel=1e-13, abs=0)
    mask = whole_mask(half.grams, gram)
    np.testing.assert_array_equal(got.partners, mask.sum(axis=1))
    upper = np.triu(mask, k=1)
    assert got.within == int(upper.sum())
    assert 0 < got.within < n * (n - 1) // 2  # pairs on both sides of the bound
    first = np.flatnonzero(upper.ravel())[:100]
    assert got.first_pairs == tuple((int(k // n), int(k % n)) for k in first)


def test_summary_by_shards_equals_the_whole_grams() -> None:
    rng = np.random.default_rng(1)
    n, v = 30, 40
    p = drift_distributions(n, v, seed=3)
    shards = [
        sp.csr_matrix(np.stack([rng.multinomial(40, p[i]) for i in range(n)])) for _ in range(6)
    ]
    total = sp.csr_matrix(sum(s.toarray() for s in shards))
    geo = corpus_geometry(Counts(total, {}), min_count=1, plain=False)
    got = split_half_summary(
        total, n, geo.mds.gram, shards=shards, ranks=[2], seed=4, repeats=1, stash=geo.distances
    )
    half = split_half_grams(total, n, shards=shards, seed=4, repeats=1)
    np.testing.assert_array_equal(got.energy_rows, noise_energy(half).sum(axis=1))
    assert got.heldout[2] == pytest.approx(heldout_mds_stress(half, [2])[2], rel=1e-13)
    np.testing.assert_array_equal(got.partners, whole_mask(half.grams, geo.mds.gram).sum(axis=1))


def test_without_ranks_or_noise_only_the_energy() -> None:
    counts = noisy_counts(20)
    geo = corpus_geometry(Counts(counts, {}), min_count=1, plain=False)
    got = split_half_summary(counts, 20, geo.mds.gram, noise=False)
    assert got.heldout == {} and got.partners is None and got.within == 0
    want_rows = noise_energy(split_half_grams(counts, 20)).sum(axis=1)
    np.testing.assert_array_equal(got.energy_rows, want_rows)


def test_a_failure_while_stashed_restores_the_distances(
    medium: tuple[sp.csr_matrix, np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    counts, gram, distances = medium
    before = distances.copy()
    real = heldout._half_gram
    made: list[int] = []

    def second_fails(source: object) -> np.ndarray:
        if made:
            raise MemoryError("no room for B_Q")
        made.append(1)
        return real(source)  # type: ignore[arg-type]

    monkeypatch.setattr(heldout, "_half_gram", second_fails)
    with pytest.raises(MemoryError):
        split_half_summary(counts, 300, gram, repeats=1, ranks=[1], stash=distances)
    assert made == [1]
    np.testing.assert_array_equal(distances, before)


def test_the_stash_saves_an_n_by_n_array(
    medium: tuple[sp.csr_matrix, np.ndarray, np.ndarray],
) -> None:
    counts, gram, distances = medium
    n = gram.shape[0]
    split_half_summary(counts, n, gram, repeats=1, ranks=[1])  # compile outside the trace
    peaks = {}
    # Blocks of 30 rows: the pass's scratch (a few blocks, reused) stays far below the n x n
    # arrays compared, as at long contexts (a single block of all rows would be n x n itself).
    block = 8 * n * 30
    for stashed in (False, True):
        tracemalloc.start()
        split_half_summary(
            counts,
            n,
            gram,
            repeats=1,
            ranks=[1],
            stash=distances if stashed else None,
            block_bytes=block,
        )
        peaks[stashed] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # B_P's n x n array is gone while B_Q is made (its lower triangle sits in the stash).
    assert peaks[False] - peaks[True] >= 0.9 * 8 * n * n


@pytest.mark.usefixtures("one_outer_split")
def test_report_holds_no_split_half_gram_and_prints_the_same_noise() -> None:
    """The report's cross-fit noise diagnostics from the summary equal the whole-mask ones,
    with the long-context path (one outer split, stash) forced on a small input."""
    counts = Counts(noisy_counts(40), {})
    report = stress_report(
        dataclasses.replace(counts, no_intervals=NO_SHARDS),
        analysis=Analysis(min_count=1),
        details=False,
    )
    geo = report.geometry
    assert geo is not None and "split_half" not in geo._cache
    summary = geo._cache["split_half_summary"]
    half = whole_split_half(geo)  # the whole grams, for the reference only
    assert half is not None and len(half.grams) == 1
    mask = whole_mask(half.grams, geo.mds.gram)
    share = intervals._noise_shares(geo, np.zeros(40))[1]
    assert report.uncertainty is not None
    assert report.uncertainty.unstable == intervals._unstable(mask.sum(axis=1), share)
    partners, within, first = intervals._noise_pairs(geo, np.zeros(40))
    assert partners is summary.partners and within == int(np.triu(mask, 1).sum())
    mds = {s.name: s.stress for s in report.encodings if s.name.startswith("mds")}
    want = heldout_mds_stress(half, [1, 2, 3])
    for r in (1, 2, 3):
        assert mds[f"mds-{r}"] == pytest.approx(want[r], rel=1e-13)
    # Asking for another rank recomputes from the same seeded halves, keeping the noise part.
    more = geo.heldout_stress([5])
    assert set(geo._cache["split_half_summary"].heldout) == {1, 2, 3, 5}
    assert geo._cache["split_half_summary"].partners is not None
    assert more[5] == pytest.approx(heldout_mds_stress(half, [1, 2, 3, 5])[5], rel=1e-13)


def test_a_read_only_stash_is_left_alone(
    medium: tuple[sp.csr_matrix, np.ndarray, np.ndarray],
) -> None:
    counts, gram, distances = medium
    frozen = distances.copy()
    frozen.flags.writeable = False
    got = split_half_summary(counts, 300, gram, repeats=1, ranks=[1], stash=frozen)
    want = split_half_summary(counts, 300, gram, repeats=1, ranks=[1])
    np.testing.assert_array_equal(frozen, distances)
    np.testing.assert_array_equal(got.energy_rows, want.energy_rows)
    assert got.heldout == want.heldout and got.within == want.within


def test_packed_upper_triangle_round_trip() -> None:
    rng = np.random.default_rng(0)
    # Both sides of COMPILED_FROM (128): the numpy loop and the tile pass.
    for n in (1, 2, 7, 127, 128, 300):
        m = rng.normal(size=(n, n))
        m = m + m.T
        m[0, 0] = -0.0
        packed = estimator.pack_upper(m)
        assert packed.shape == (n * (n + 1) // 2,)
        rows = [m[i, i:] for i in range(n)]  # row after row, diagonal included
        np.testing.assert_array_equal(packed, np.concatenate(rows) if n else packed)
        back = estimator.unpack_upper(packed, n)
        np.testing.assert_array_equal(back, m)
        assert np.array_equal(np.signbit(back), np.signbit(m))


def test_report_parks_the_distances_while_the_halves_are_made(
    monkeypatch: pytest.MonkeyPatch, one_outer_split: None
) -> None:
    """Long-context path forced on a small input: D_H is dropped from the geometry (packed)
    while the split-half grams exist, and comes back bit for bit; B_H too."""
    counts = Counts(noisy_counts(40), {})
    fresh = corpus_geometry(counts, min_count=1, plain=False)
    seen: list[object] = []
    real = analysis.split_half_summary

    def spy(*args: object, **kw: object) -> object:
        geo = holder[0]
        seen.append(geo.distances)
        assert kw["stash"] is geo.mds.gram
        return real(*args, **kw)  # type: ignore[arg-type]

    holder: list[analysis.CorpusGeometry] = []
    monkeypatch.setattr(analysis, "split_half_summary", spy)
    geo = corpus_geometry(counts, min_count=1, plain=False)
    holder.append(geo)
    got = geo.heldout_stress([1, 2], noise=True)
    assert seen == [None]  # parked while the halves were made
    assert geo.estimate is not None and geo.estimate.distances is geo.distances
    np.testing.assert_array_equal(geo.distances, fresh.distances)
    np.testing.assert_array_equal(geo.mds.gram, fresh.mds.gram)
    want = heldout_mds_stress(split_half_grams(counts.matrix, 40), [1, 2])
    assert got == pytest.approx(want, rel=1e-13)


def test_a_failure_while_parked_puts_the_distances_back(
    monkeypatch: pytest.MonkeyPatch, one_outer_split: None
) -> None:
    counts = Counts(noisy_counts(40), {})
    geo = corpus_geometry(counts, min_count=1, plain=False)
    d, b = geo.distances.copy(), geo.mds.gram.copy()

    def fails(*args: object, **kw: object) -> object:
        raise MemoryError("no room")

    monkeypatch.setattr(heldout, "_half_gram", fails)
    with pytest.raises(MemoryError):
        geo.heldout_stress([1])
    np.testing.assert_array_equal(geo.distances, d)
    np.testing.assert_array_equal(geo.mds.gram, b)
    assert geo.estimate is not None and geo.estimate.distances is geo.distances


@pytest.mark.parametrize("block_bytes", [8, 8 * 13 * 3, 1 << 20])
def test_stashed_and_upper_rows_give_the_gram_rows_bit_for_bit(block_bytes: int) -> None:
    """A gram stashed in another symmetric array's strict lower triangle, and a symmetric array
    read from its upper triangle only, give every row block exactly; the stash's own upper
    triangle is untouched, so mirror_upper restores it."""
    from posdiag.geometry._square import mirror_upper

    rng = np.random.default_rng(3)
    n = 13
    g = rng.normal(size=(n, n))
    g = g + g.T
    buf = rng.normal(size=(n, n))
    buf = buf + buf.T
    before = buf.copy()
    stashed = heldout._StashedRows(g, buf, block_bytes)
    assert not np.array_equal(buf, before)  # the lower triangle now holds g's
    np.testing.assert_array_equal(np.triu(buf), np.triu(before))
    upper = heldout._UpperRows(buf)  # buf read from its upper triangle: the original array
    for lo, hi in [(0, n), (0, 1), (3, 7), (12, 13)]:
        np.testing.assert_array_equal(stashed.block(lo, hi), g[lo:hi])
        np.testing.assert_array_equal(upper.block(lo, hi), before[lo:hi])
        out = np.full((hi - lo, n), np.nan)
        assert stashed.block(lo, hi, out) is out
        np.testing.assert_array_equal(out, g[lo:hi])
    np.testing.assert_array_equal(stashed.diag, np.diag(g))
    np.testing.assert_array_equal(mirror_upper(buf), before)


def test_the_compiled_passes_built_afresh_equal_the_formulas() -> None:
    """posdiag.geometry._summary's kernels, built as in a fresh process, on a 3-row block of
    two halves: each element is numpy's arithmetic in numpy's order (bit for bit)."""
    from posdiag.geometry import _summary

    _summary.kernels.cache_clear()  # the first call of a process builds them (numba's disk cache)
    kern = _summary.kernels()
    assert set(kern) == {"differences", "within"} and _summary.kernels() is kern
    rng = np.random.default_rng(7)
    n, lo, hi, scale = 9, 2, 5, 8.0
    halves = [(rng.normal(size=(3, n)), rng.normal(size=(3, n)), rng.normal(size=n)) for _ in "ab"]
    acc, acc_m = np.full((3, n), np.nan), np.full((3, n), np.nan)
    want, want_m = np.zeros((3, n)), np.zeros((3, n))
    i = np.arange(lo, hi)[:, None]
    for s, (p, q, dd) in enumerate(halves):
        kern["differences"](p, q, dd, lo, s == 0, s == 1, scale, acc, acc_m, True)
        want = want + (p - q) ** 2
        want_m = want_m + ((dd[i] + dd[None, :]) - 2.0 * (p - q)) ** 2
    np.testing.assert_array_equal(acc, want / scale)
    np.testing.assert_array_equal(acc_m, want_m)
    # Without noise acc_m is not touched.
    untouched = np.full((3, n), 5.0)
    kern["differences"](p, q, dd, lo, True, True, scale, acc, untouched, False)
    np.testing.assert_array_equal(untouched, 5.0)
    # within: j != i with (diag_i + diag_j) - 2 h_ij <= sqrt(acc_m / scale).
    diag = rng.uniform(0.5, 1.0, size=n)
    h = rng.uniform(0.0, 0.6, size=(3, n))
    summed = rng.uniform(0.0, 1.5, size=(3, n)) ** 2 * scale
    d2 = (diag[i] + diag[None, :]) - 2.0 * h
    near = (d2 <= np.sqrt(summed / scale)) & (np.arange(n)[None, :] != i)
    upper, partners, above = np.ones((3, n), dtype=bool), np.full(3, -1), np.full(3, -1)
    kern["within"](summed, h, diag, lo, scale, upper, partners, above)
    assert 0 < near.sum() < near.size
    np.testing.assert_array_equal(partners, near.sum(axis=1))
    np.testing.assert_array_equal(upper, near & (np.arange(n)[None, :] > i))
    np.testing.assert_array_equal(above, upper.sum(axis=1))


@pytest.mark.parametrize("kind", ["float32", "fortran", "shape", "writeable"])
def test_a_stash_that_cannot_hold_a_half_is_left_alone(
    kind: str, small: tuple[sp.csr_matrix, np.ndarray, np.ndarray]
) -> None:
    """Only a C-contiguous float64 (n, n) array is borrowed: any other stash is not written
    (the summary as without one), and a usable one is borrowed and restored."""
    counts, gram, distances = small
    n = gram.shape[0]
    stash = {
        "float32": distances.astype(np.float32),
        "fortran": np.asfortranarray(distances),
        "shape": np.ascontiguousarray(distances[: n - 1, : n - 1]),
        "writeable": distances.copy(),
    }[kind]
    assert heldout._usable_stash(stash, n) == (kind == "writeable")
    before = stash.copy(order="K")
    got = split_half_summary(counts, n, gram, repeats=1, ranks=[1, 2], stash=stash)
    want = split_half_summary(counts, n, gram, repeats=1, ranks=[1, 2])
    np.testing.assert_array_equal(stash, before)
    np.testing.assert_array_equal(got.energy_rows, want.energy_rows)
    np.testing.assert_array_equal(got.partners, want.partners)
    assert got.heldout == pytest.approx(want.heldout, rel=1e-13, abs=0)
    assert (got.within, got.first_pairs) == (want.within, want.first_pairs)
    assert not heldout._usable_stash(None, n)


@pytest.mark.parametrize(
    ("n", "block_bytes", "rows"),
    [(10, 8 * 10 * 3, 3), (10, 8 * 10 * 4 - 1, 3), (10, 8 * 10 * 4, 4), (10, 1, 1),
     (10, 1 << 20, 10), (1, 8, 1), (7, 8 * 7 * 7, 7), (5, 8 * 5 * 2, 2)],
)  # fmt: skip
def test_row_blocks_are_as_many_whole_rows_as_fit_in_block_bytes(
    n: int, block_bytes: int, rows: int
) -> None:
    """Blocks of floor(block_bytes / 8n) float64 rows (at least one), in order, the last one
    what is left."""
    spans = heldout._row_spans(n, block_bytes)
    starts = list(range(0, n, rows))
    assert spans == [(lo, min(n, lo + rows)) for lo in starts]
    assert heldout._row_spans(0, 64) == []


def test_heldout_pair_is_the_heldout_stress_of_its_split_and_refuses_unfitted_ranks() -> None:
    """heldout_pair from given fits equals the whole-grams held-out stress of that one split;
    a rank needs coordinates in both halves (the fewer of the two sets the bound)."""
    from posdiag.errors import PosdiagError
    from posdiag.geometry.core import mds_from_gram

    rng = np.random.default_rng(8)
    truth = rng.normal(size=(7, 3))
    halves = []
    for _ in range(2):
        x = truth + 0.3 * rng.normal(size=(7, 3))
        x -= x.mean(axis=0)
        halves.append(x @ x.T)
    g_p, g_q = halves
    x_p, x_q = mds_from_gram(g_p).coordinates(4), mds_from_gram(g_q).coordinates(3)
    got = heldout.heldout_pair(g_p, x_p, g_q, x_q, [1, 3])
    want = heldout_mds_stress(heldout.SplitHalf(((g_p, g_q),)), [1, 3])
    assert list(got) == [1, 3]
    for r in (1, 3):
        assert got[r] == pytest.approx(want[r], rel=1e-12, abs=0)
    assert 0.0 < got[3] < got[1] < 1.0
    for bad in (0, 4):
        with pytest.raises(
            PosdiagError, match=rf"^'rank' must be an int in \[1, fitted ranks=3\]; got {bad}$"
        ):
            heldout.heldout_pair(g_p, x_p, g_q, x_q, [bad])


def test_summary_positions_and_ranks_are_checked_and_two_positions_suffice() -> None:
    from posdiag.errors import PosdiagError

    counts = noisy_counts(5)
    gram = corpus_geometry(Counts(counts, {}), min_count=1, plain=False).mds.gram
    for bad in (1, 6):
        with pytest.raises(
            PosdiagError, match=rf"^'n_eff' must be an int in \[2, n_positions=5\]; got {bad}$"
        ):
            split_half_summary(counts, bad, gram)
    for bad in (0, 4):
        with pytest.raises(
            PosdiagError, match=rf"^'rank' must be an int in \[1, n_eff-1=3\]; got {bad}$"
        ):
            split_half_summary(counts, 4, gram[:4, :4], ranks=[1, bad])
    two = split_half_summary(counts, 2, gram[:2, :2] - gram[:2, :2].mean(), ranks=[1])
    assert set(two.heldout) == {1} and two.energy_rows.shape == (2,)
    assert two.partners is not None and two.partners.dtype == np.int64
    assert two.within in (0, 1) and two.partners.tolist() == [two.within] * 2


def test_from_partial_from_positions_the_fits_are_warm_started_lanczos() -> None:
    """At PARTIAL_FROM positions each half's fit is a block Lanczos started from the previous
    fit's vectors: the held-out stresses equal full-eigh fits of the same halves."""
    from posdiag.geometry.spectral import PARTIAL_FROM

    n = PARTIAL_FROM
    rng = np.random.default_rng(1)
    p = drift_distributions(n, 30, seed=2)
    counts = sp.csr_matrix(np.stack([rng.multinomial(60, p[i]) for i in range(n)]))
    gram = corpus_geometry(Counts(counts, {}), min_count=1, plain=False).mds.gram
    got = split_half_summary(counts, n, gram, repeats=1, ranks=[1, 2], noise=False)
    with small_blas(n):
        half = split_half_grams(counts, n, repeats=1)
    want = heldout_mds_stress(half, [1, 2], partial_from=n + 1)  # full eigh
    for r in (1, 2):
        # Lanczos residuals within HELDOUT_TOL (1e-8) of ||B||: 1.2e-10 apart here.
        assert got.heldout[r] == pytest.approx(want[r], rel=1e-9, abs=0)


def test_a_partial_fit_of_every_pair_equals_the_full_one() -> None:
    """_top_mds past its partial_from: rank n-1 gets all n-1 nontrivial pairs by Lanczos."""
    from posdiag.geometry.core import mds_from_gram

    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 7))
    x -= x.mean(axis=0)
    g = x @ x.T  # rank 7 = n - 1 after centring
    part = heldout._top_mds(g, 7, partial_from=2)
    full = mds_from_gram(g)
    np.testing.assert_allclose(part.eigenvalues[:7], full.eigenvalues[:7], rtol=1e-10)
    got, want = part.coordinates(7), full.coordinates(7)
    np.testing.assert_allclose(got @ got.T, want @ want.T, rtol=0, atol=1e-9)


def test_a_float32_gram_is_compared_in_float64() -> None:
    """B_H given in float32 is read as float64: B_00 + B_11 = 1 + 2^-24 exactly (float32 would
    round it to 1), so a pair whose squared distance sits within 2^-24 above its bound is not
    within its sampling error."""
    n = 6
    counts = noisy_counts(n)
    with small_blas(n):
        ((g_p, g_q),) = split_half_grams(counts, n, repeats=1).grams
    dd = np.diag(g_p) - np.diag(g_q)
    bound = math.sqrt(((dd[0] + dd[1]) - 2.0 * (g_p[0, 1] - g_q[0, 1])) ** 2 / 4.0)
    h = np.float32(np.ceil((1.0 - bound) * 2**24) / 2**25)  # 2h on float32's grid near 1
    gram = np.eye(n, dtype=np.float32)
    gram[1, 1] = 2.0**-24
    gram[0, 1] = gram[1, 0] = h
    assert np.float32(1.0) + gram[1, 1] == 1.0  # the float32 sum
    d2 = (1.0 + 2.0**-24) - 2.0 * float(h)
    assert d2 - 2.0**-24 <= bound < d2  # within the bound only if the sum were rounded
    got = split_half_summary(counts, n, gram, repeats=1)
    assert got.partners is not None and got.partners.tolist() == [0] * n and got.within == 0


def test_below_compiled_from_the_summary_builds_no_kernel(
    small: tuple[sp.csr_matrix, np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below COMPILED_FROM positions (the bundled corpus) the pass is numpy's: numba is never
    asked for, so it is never imported."""
    counts, gram, _ = small

    def no_kernels() -> None:
        raise AssertionError("compiled kernels built below COMPILED_FROM")

    monkeypatch.setattr(heldout, "_summary_kernels", no_kernels)
    got = split_half_summary(counts, gram.shape[0], gram, repeats=1, ranks=[1])
    assert got.partners is not None and got.within > 0


@pytest.mark.parametrize("size", ["small", "medium"])
def test_without_noise_every_row_block_still_gives_energy_and_heldout(
    size: str, request: pytest.FixtureRequest
) -> None:
    """noise=False skips only the pairs: over row blocks of 7 rows the energy rows and the
    held-out stresses are those of the full summary."""
    counts, gram, _ = request.getfixturevalue(size)
    n = gram.shape[0]
    got, full = (
        split_half_summary(
            counts, n, gram, repeats=2, ranks=[1, 2], noise=noise, block_bytes=8 * n * 7
        )
        for noise in (False, True)
    )
    np.testing.assert_array_equal(got.energy_rows, full.energy_rows)
    assert got.heldout == full.heldout
    assert (got.partners, got.within, got.first_pairs) == (None, 0, ())
