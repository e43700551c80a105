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
from posdiag.geometry.estimator import (
    crossfit_bc,
    expected_thinning_bc,
    gram_from_bc,
    implied_distances,
)
from posdiag.scoring import scores
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
    assert geom.total_var == 0.0 and geom.total_se == 0.0
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
