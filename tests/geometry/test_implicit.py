"""The implicit long-context geometry (issue 35) against the dense path, numpy brute force.

Every exact quantity (products, row means, lag sums, entries, the exact norm, the eigenpairs,
Toeplitz and table scores with the exact norm) is checked to ~1e-12 against the dense ``BC`` of
:func:`posdiag.geometry.estimator.expected_thinning_bc` / :func:`crossfit_bc` on small ``n``;
the sampled norm against its truth over seeds (unbiased, and its standard error honest).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.encodings import make_encoding
from posdiag.errors import PosdiagError
from posdiag.geometry import implicit
from posdiag.geometry._gram import sqrt_rows
from posdiag.geometry.core import hellinger_distances
from posdiag.geometry.estimator import (
    crossfit_bc,
    expected_thinning_bc,
    gram_from_bc,
    implied_distances,
)
from posdiag.geometry.heldout import _outer_splits
from posdiag.scoring import scores
from posdiag.uncertainty.bootstrap import noise_floor
from tests import _data


def counts(n: int, v: int = 600, seed: int = 0) -> sp.csr_matrix:
    return _data.zipf_counts(n, v, 120, seed, step=3, dtype=np.int64)


def diag_sums(m: np.ndarray) -> np.ndarray:
    return np.array([np.trace(m, offset=lag) for lag in range(m.shape[0])])


@pytest.fixture(scope="module")
def thin() -> tuple[implicit.ImplicitBC, np.ndarray, np.ndarray]:
    c = counts(160)
    ref = expected_thinning_bc(c, 160)
    return implicit.from_thinning(c, 160), ref, gram_from_bc(ref.copy())


def test_products_means_entries_against_dense(thin) -> None:
    bc, ref, b = thin
    x = np.random.default_rng(0).standard_normal((160, 5))
    np.testing.assert_allclose(implicit.bc_matmat(bc, x), ref @ x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(implicit.bc_matmat(bc, x[:, 0]), ref @ x[:, 0], atol=1e-12)
    np.testing.assert_allclose(implicit.gram_matmat(bc, x), b @ x, rtol=0, atol=1e-12)
    means = implicit.bc_row_means(bc)
    np.testing.assert_allclose(means, ref.mean(axis=1), rtol=0, atol=1e-14)
    rows, cols = np.divmod(np.arange(160 * 160), 160)
    np.testing.assert_allclose(implicit.bc_entries(bc, rows, cols), ref.ravel(), atol=1e-14)
    got = implicit.gram_entries(bc, means, rows, cols)
    np.testing.assert_allclose(got, b.ravel(), rtol=0, atol=1e-14)


@pytest.mark.parametrize("fft", [0.0, 8.0, np.inf])
def test_lag_sums_every_route(thin, monkeypatch: pytest.MonkeyPatch, fft: float) -> None:
    """All tokens by FFT, the default split, all by pair lists: the same exact sums."""
    bc, ref, b = thin
    monkeypatch.setattr(implicit, "FFT_PAIRS_PER_POINT", fft)
    np.testing.assert_allclose(implicit.bc_lag_sums(bc), diag_sums(ref), rtol=0, atol=1e-11)
    np.testing.assert_allclose(implicit.gram_lag_sums(bc), diag_sums(b), rtol=0, atol=1e-11)


def test_shard_halves_match_crossfit_bc() -> None:
    """Several splits with their own patterns (halves of shards): crossfit_bc's numbers."""
    rng = np.random.default_rng(3)
    c = counts(90, seed=2)
    halves = []
    for _ in range(3):
        a = c.copy()
        a.data = rng.binomial(c.data, 0.5)
        a.eliminate_zeros()
        halves.append((a, c - a))
    ref = crossfit_bc(halves)
    bc = implicit.from_halves(halves)
    b = gram_from_bc(ref.copy())
    x = rng.standard_normal((90, 4))
    np.testing.assert_allclose(implicit.bc_matmat(bc, x), ref @ x, atol=1e-12)
    np.testing.assert_allclose(implicit.gram_lag_sums(bc), diag_sums(b), atol=1e-11)
    assert implicit.gram_frobenius_exact(bc) == pytest.approx(float(np.vdot(b, b)), rel=1e-12)


def test_exact_norm_by_row_blocks(thin, monkeypatch: pytest.MonkeyPatch) -> None:
    bc, _, b = thin
    want = float(np.vdot(b, b))
    assert implicit.gram_frobenius_exact(bc) == pytest.approx(want, rel=1e-12)
    monkeypatch.setattr(implicit, "EXACT_BLOCK_BYTES", 8 * 160 * 7)  # 7-row blocks
    assert implicit.gram_frobenius_exact(bc) == pytest.approx(want, rel=1e-12)


def test_spectrum_and_scores_exact_norm(thin) -> None:
    """With the exact norm every stress equals the dense scorer's to 1e-9."""
    bc, ref, b = thin
    geom = implicit.implicit_geometry(bc, exact_total=True, min_rank=16)
    lam = np.sort(np.linalg.eigvalsh(b))[::-1]
    k = geom.spectrum.eigenvalues.size
    np.testing.assert_allclose(geom.spectrum.eigenvalues, lam[:k], rtol=0, atol=1e-9)
    assert geom.total == pytest.approx(float(lam @ lam), rel=1e-12)
    assert geom.exact and geom.total_se == 0.0
    side = scores.corpus_side(implied_distances(ref.copy()), b)
    for name in ("sinusoidal", "rope", "alibi", "t5", "alibi-kernel", "learned-random"):
        enc = make_encoding(name, 160)
        want = scores.score_encoding(side, side.d_h, b, enc).stress
        if enc.profile is not None:
            got = implicit.score_profile(geom, enc.profile)
        else:
            got = implicit.score_vectors(geom, enc.vectors)
        assert got.stress == pytest.approx(want, abs=1e-9), name
    for r in (1, 2, 3, 10):
        tail = np.sqrt(np.sum(lam[r:] ** 2) / np.sum(lam**2))
        assert implicit.mds_stress(geom, r).stress == pytest.approx(tail, abs=1e-9)


def test_sampled_norm_unbiased_and_its_error_honest() -> None:
    """n = 384, 3,000 pairs (most strata sampled): over 40 seeds the estimates of ||B_H||^2
    average to the truth within 3 standard errors of their mean, their spread matches the
    stated standard error within 30%, and each stress lies within 4 stated errors of the
    exact one."""
    n = 384
    c = counts(n, v=900, seed=5)
    bc = implicit.from_thinning(c, n)
    b = gram_from_bc(expected_thinning_bc(c, n))
    truth = float(np.vdot(b, b))
    g = make_encoding("sinusoidal", n).profile
    exact = implicit.implicit_geometry(bc, exact_total=True, min_rank=4, max_rank=4, tolerances=())
    want = implicit.score_profile(exact, g).stress
    est, ses = [], []
    for seed in range(40):
        geom = implicit.implicit_geometry(bc, pairs=3000, seed=seed, spectrum=exact.spectrum)
        assert geom.pairs.sizes.size >= 4  # strata really sampled
        est.append(geom.total)
        ses.append(geom.total_se)
        s = implicit.score_profile(geom, g)
        assert abs(s.stress - want) <= 4 * s.se + 1e-12
    est_a, se_mean = np.array(est), float(np.mean(ses))
    assert abs(est_a.mean() - truth) <= 3 * est_a.std(ddof=1) / np.sqrt(40)
    assert 0.7 < est_a.std(ddof=1) / se_mean < 1.3


def test_sampled_vectors_within_error() -> None:
    n = 300
    c = counts(n, v=800, seed=7)
    bc = implicit.from_thinning(c, n)
    exact = implicit.implicit_geometry(bc, exact_total=True, min_rank=8, max_rank=8, tolerances=())
    p = make_encoding("learned-random", n).vectors
    want = implicit.score_vectors(exact, p).stress
    geom = implicit.implicit_geometry(bc, pairs=4000, seed=1, min_rank=8, max_rank=8, tolerances=())
    got = implicit.score_vectors(geom, p)
    assert got.se > 0
    assert abs(got.stress - want) <= 4 * got.se


def test_sample_pairs_enumerates_small_and_weights_sum() -> None:
    s = implicit.sample_pairs(50, m=10**6)
    assert s.sizes.size == 0 and s.rows.size == 50 * 50 - 50 * 49 // 2
    # Weights estimate the number of ordered pairs exactly (y = 1 everywhere).
    s = implicit.sample_pairs(1000, m=500, seed=4)
    assert s.total(np.ones(s.rows.size)) == pytest.approx(1000.0 * 1000.0)
    assert np.all(s.rows <= s.cols) and np.all(s.cols < 1000)
    again = implicit.sample_pairs(1000, m=500, seed=4)
    assert np.array_equal(s.rows, again.rows) and np.array_equal(s.cols, again.cols)


def test_thinning_needs_two_tokens() -> None:
    c = sp.csr_matrix(np.array([[3, 1], [1, 0]]))
    want = r"^cross-fit: position 1 has 1 tokens; thinning needs >= 2$"
    with pytest.raises(PosdiagError, match=want):
        implicit.from_thinning(c, 2)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(2, 40),
    st.integers(1, 30),
    st.floats(0.05, 0.9),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.0, np.inf]),
)
def test_lag_sums_property(n: int, v: int, density: float, seed: int, fft: float) -> None:
    """Random sparse halves, any density: the lag sums are the dense diagonal sums."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, v, density=density, random_state=rng, format="csr") * 5
    b = sp.random(n, v, density=density, random_state=rng, format="csr") * 5
    a.data = np.ceil(a.data)
    b.data = np.ceil(b.data)
    a = a + sp.csr_matrix((np.ones(n), (np.arange(n), np.zeros(n, dtype=int))), shape=(n, v))
    b = b + sp.csr_matrix((np.ones(n), (np.arange(n), np.zeros(n, dtype=int))), shape=(n, v))
    bc = implicit.from_halves([(a, b)])
    ref = crossfit_bc([(a, b)])
    old = implicit.FFT_PAIRS_PER_POINT
    implicit.FFT_PAIRS_PER_POINT = fft
    try:
        got = implicit.bc_lag_sums(bc)
    finally:
        implicit.FFT_PAIRS_PER_POINT = old
    np.testing.assert_allclose(got, diag_sums(ref), rtol=0, atol=1e-11)
    # Double centring: B_H's lag sums, counted twice off the diagonal, add up to 0.
    lags = implicit.gram_lag_sums(bc)
    assert abs(lags[0] + 2 * lags[1:].sum()) <= 1e-10 * max(1.0, float(np.abs(lags).sum()))


@pytest.mark.parametrize("per_row", [120, 121])
def test_even_and_odd_supports(per_row: int) -> None:
    """Even supports make the thinning's halves one matrix (one product); odd ones keep two:
    both give the dense numbers."""
    c = _data.zipf_counts(70, 300, per_row, 9, step=3, dtype=np.int64)
    bc = implicit.from_thinning(c, 70)
    assert bc.same == (per_row % 2 == 0,)
    ref = expected_thinning_bc(c, 70)
    b = gram_from_bc(ref.copy())
    x = np.random.default_rng(1).standard_normal((70, 3))
    np.testing.assert_allclose(implicit.gram_matmat(bc, x), b @ x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(implicit.bc_lag_sums(bc), diag_sums(ref), rtol=0, atol=1e-11)
    rows, cols = np.divmod(np.arange(70 * 70), 70)
    np.testing.assert_allclose(implicit.bc_entries(bc, rows, cols), ref.ravel(), atol=1e-14)
    assert implicit.gram_frobenius_exact(bc) == pytest.approx(float(np.vdot(b, b)), rel=1e-12)


def _shift_truth(d: np.ndarray) -> tuple[float, np.ndarray, float, float]:
    """Brute force: R^2 of D against its lag means, the lag means, neighbour and all means."""
    n = d.shape[0]
    i, j = np.triu_indices(n, k=1)
    lag = j - i
    vals = d[i, j]
    prof = np.bincount(lag - 1, weights=vals) / np.bincount(lag - 1)
    ss_tot = float(np.sum((vals - vals.mean()) ** 2))
    r2 = 1.0 - float(np.sum((vals - prof[lag - 1]) ** 2)) / ss_tot
    return r2, prof, float(prof[0]), float(vals.mean())


def test_shift_estimate_exact_when_every_lag_is_enumerated(thin) -> None:
    bc, ref, _ = thin
    geom = implicit.implicit_geometry(bc, min_rank=4, max_rank=4, tolerances=())
    got = implicit.shift_estimate(geom, bc, pairs=160 * 160)
    r2, prof, neigh, mean = _shift_truth(implied_distances(ref))
    assert got.r2 == pytest.approx(r2, abs=1e-12) and got.r2_se == 0.0
    np.testing.assert_allclose(got.profile, prof, rtol=0, atol=1e-12)
    assert got.neighbour_mean == pytest.approx(neigh, abs=1e-12)
    assert got.all_mean == pytest.approx(mean, abs=1e-12)
    assert got.smoothness == pytest.approx(neigh / mean, abs=1e-12)
    assert got.pairs == 160 * 159 // 2


def drifting_counts(
    n: int, v: int = 600, per_row: int = 400, seed: int = 0, block: int = 1
) -> sp.csr_matrix:
    """Two Zipf laws on disjoint halves of the vocabulary mixed with a weight that drifts with
    the position (1.5 cosine cycles; constant over runs of ``block`` positions, which then share
    one distribution): distances depend partly, not only, on the lag."""
    rng = np.random.default_rng(seed)
    half = v // 2
    z = np.arange(1, half + 1, dtype=np.float64) ** -1.1
    z /= z.sum()
    w = 0.5 + 0.4 * np.cos(3 * np.pi * (np.arange(n) // block * block) / n)
    p = np.concatenate([w[:, None] * z[None, :], (1 - w)[:, None] * z[None, :]], axis=1)
    return sp.csr_matrix(np.array([rng.multinomial(per_row, row) for row in p], dtype=np.int64))


def test_shift_estimate_sampled_unbiased_and_its_error_honest() -> None:
    """n = 400, 2 pairs a lag: over 30 seeds R^2 and the mean distance average to the brute
    force within 3 standard errors of their mean, the neighbours' mean is exact, and the stated
    standard error of R^2 is within a factor 2 of the observed spread."""
    n = 400
    c = drifting_counts(n, seed=11)
    bc = implicit.from_thinning(c, n)
    r2, _, neigh, mean = _shift_truth(implied_distances(expected_thinning_bc(c, n)))
    geom = implicit.implicit_geometry(bc, min_rank=4, max_rank=4, tolerances=())
    got = [implicit.shift_estimate(geom, bc, pairs=800, seed=s) for s in range(30)]
    est = np.array([g.r2 for g in got])
    means = np.array([g.all_mean for g in got])
    assert all(g.neighbour_mean == pytest.approx(neigh, abs=1e-12) for g in got)
    assert all(g.pairs == (n - 1) + sum(min(n - lag, 2) for lag in range(2, n)) for g in got)
    assert 0.1 < r2 < 0.99  # a geometry with something to explain and something left
    assert abs(est.mean() - r2) <= 3 * est.std(ddof=1) / np.sqrt(30)
    assert abs(means.mean() - mean) <= 3 * means.std(ddof=1) / np.sqrt(30)
    assert 0.5 < est.std(ddof=1) / np.mean([g.r2_se for g in got]) < 2.0


def _noise_truth(
    b: np.ndarray, halves: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[int, float, list[tuple[int, int]]]:
    """Brute force of split_half_summary's rule on whole matrices: pairs i < j whose squared
    distance is within the rms of |D2_P - D2_Q| / 2, and the energy sum (P - Q)^2 / 4."""
    s = 4.0 * len(halves)
    err = np.zeros_like(b)
    energy = np.zeros_like(b)
    for p, q in halves:
        dd = np.diag(p) - np.diag(q)
        err += ((dd[:, None] + dd[None, :]) - 2.0 * (p - q)) ** 2
        energy += (p - q) ** 2
    d2 = np.diag(b)[:, None] + np.diag(b)[None, :] - 2.0 * b
    hit = np.triu(d2 <= np.sqrt(err / s), k=1)
    i, j = np.nonzero(hit)
    return int(hit.sum()), float(energy.sum() / s), list(zip(i.tolist(), j.tolist(), strict=True))


def dense_halves(c: sp.csr_matrix, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The outer splits' half grams in float64 from the dense path's draws (the report's own
    are float32): the oracle of :func:`implicit.split_entries`."""
    out = []
    for sources in _outer_splits(c, n, (), 4, seed, None):
        (_, a), (_, b) = sources
        out.append(
            (gram_from_bc(expected_thinning_bc(a, n)), gram_from_bc(expected_thinning_bc(b, n)))
        )
    return out


def test_split_entries_are_the_half_grams() -> None:
    n = 60
    c = counts(n, v=500, seed=6)
    rows, cols = np.divmod(np.arange(n * n), n)
    got = implicit.split_entries(c, n, rows, cols, seed=5)
    want = dense_halves(c, n, 5)
    assert len(got) == len(want) == 4
    for (p, q), (gp, gq) in zip(got, want, strict=True):
        np.testing.assert_allclose(p, gp.ravel(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(q, gq.ravel(), rtol=0, atol=1e-13)


def test_split_noise_exact_when_every_pair_is_sampled() -> None:
    n = 120
    c = counts(n, v=700, seed=3)
    bc = implicit.from_thinning(c, n)
    geom = implicit.implicit_geometry(bc, pairs=n * n, min_rank=4, max_rank=4, tolerances=())
    dense = dense_halves(c, n, 2)
    b = gram_from_bc(expected_thinning_bc(c, n))
    within, energy, pairs = _noise_truth(b, dense)
    entries = implicit.split_entries(c, n, geom.pairs.rows, geom.pairs.cols, seed=2)
    got = implicit.split_noise(geom, entries, max_pairs=7)
    assert len(entries) == 4  # n < 512: four outer splits, as the dense report
    assert 0 < within < n * (n - 1) // 2
    assert got.within == within and got.within_se == 0.0
    assert got.examples == tuple(pairs[:7])
    assert got.energy == pytest.approx(energy, rel=1e-12) and got.energy_se == 0.0
    assert got.share == pytest.approx(energy / float(np.vdot(b, b)), rel=1e-12)
    assert got.share_se == 0.0


def test_split_noise_sampled_within_its_error() -> None:
    """n = 300, 3,000 pairs: over 100 seeds the sampled count of pairs within the noise and the
    energy (sums over pairs: unbiased) average to the brute force within 3 standard errors of
    their mean; the noise share, a ratio of two sampled sums (bias O(1/m)), within half of its
    stated standard error; every stated standard error within 30% of the observed spread."""
    n = 300
    c = counts(n, v=800, seed=4)
    bc = implicit.from_thinning(c, n)
    b = gram_from_bc(expected_thinning_bc(c, n))
    within, energy, _ = _noise_truth(b, dense_halves(c, n, 0))
    share = energy / float(np.vdot(b, b))
    exact = implicit.implicit_geometry(bc, min_rank=8, max_rank=8, tolerances=())
    got = []
    for seed in range(100):
        geom = implicit.implicit_geometry(bc, pairs=3000, seed=seed, spectrum=exact.spectrum)
        entries = implicit.split_entries(c, n, geom.pairs.rows, geom.pairs.cols, seed=0)
        got.append(implicit.split_noise(geom, entries))
    for name, truth in (("within", within), ("energy", energy), ("share", share)):
        est = np.array([getattr(g, name) for g in got])
        stated = np.array([getattr(g, f"{name}_se") for g in got])
        assert np.all(stated > 0), name
        if name == "share":
            assert abs(est.mean() - truth) <= 0.5 * stated.mean()
        else:
            assert abs(est.mean() - truth) <= 3 * est.std(ddof=1) / np.sqrt(100), name
        assert 0.7 < est.std(ddof=1) / stated.mean() < 1.3, name


def test_floor_noise_against_pair_floor() -> None:
    n = 100
    c = drifting_counts(n, seed=8, block=10)
    s = implicit.from_rows(sqrt_rows(c[:n]))
    geom = implicit.implicit_geometry(s, pairs=n * n, min_rank=4, max_rank=4, tolerances=())
    floor = 1.3 * noise_floor(c[:n], seed=1)  # wide enough that some pairs are within
    floor[5] = np.nan  # as a position with < 2 tokens: never within
    d = hellinger_distances(c[:n])
    f2 = floor**2
    hit = np.triu(d <= np.sqrt(f2[:, None] + f2[None, :]) / 2.0, k=1)
    got = implicit.floor_noise(geom, floor, max_pairs=5)
    i, j = np.nonzero(hit)
    assert got.within == hit.sum() > 0 and got.within_se == 0.0
    assert got.examples == tuple(zip(i[:5].tolist(), j[:5].tolist(), strict=True))
    b = gram_from_bc(np.asarray((sqrt_rows(c[:n]) @ sqrt_rows(c[:n]).T).todense()))
    e = np.nan_to_num(f2) / 4.0
    jm = np.eye(n) - 1.0 / n
    assert got.share == pytest.approx(np.trace(jm @ np.diag(e) @ jm) / np.trace(b), rel=1e-12)
    assert 5 not in {k for pair in got.examples for k in pair}
