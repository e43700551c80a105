"""Partial spectra (posdiag.geometry.spectral) against the full eigendecomposition."""

from __future__ import annotations

import numpy as np
import pytest

from posdiag.geometry.spectral import partial_spectrum, top_eigenpairs


def gram_with_spectrum(lam: np.ndarray, seed: int) -> np.ndarray:
    """A symmetric matrix with eigenvalues ``lam`` and random eigenvectors."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((lam.size, lam.size)))
    return (q * lam[None, :]) @ q.T


def brute_stress_by_rank(b: np.ndarray) -> np.ndarray:
    """Stress of rank-r MDS, r = 1..n-1: positive eigenvalues kept, the rest is tail."""
    lam = np.sort(np.linalg.eigvalsh(b))[::-1]
    total = float(np.sum(lam**2))
    kept = np.cumsum(np.clip(lam, 0, None) ** 2)[:-1]
    return np.sqrt(np.clip((total - kept) / total, 0, 1))


@pytest.fixture(scope="module")
def noisy() -> np.ndarray:
    """n = 400: a decaying signal, a flat noise tail and negative eigenvalues (a cross-fit)."""
    rng = np.random.default_rng(0)
    lam = np.concatenate(
        [10.0 * 0.8 ** np.arange(40), rng.uniform(0.0, 0.05, 300), -rng.uniform(0, 0.04, 60)]
    )
    return gram_with_spectrum(lam, seed=1)


def test_partial_tail_matches_full_eigh(noisy: np.ndarray) -> None:
    spec = partial_spectrum(noisy, (0.2, 0.1, 0.05), full_max=0)
    assert not spec.complete  # the partial solver ran
    k = spec.eigenvalues.size
    assert 16 <= k < 399  # grown past the start, far from everything
    full = np.sort(np.linalg.eigvalsh(noisy))[::-1]
    fro = np.linalg.norm(noisy)
    assert np.abs(spec.eigenvalues - full[:k]).max() <= 1e-7 * fro
    assert spec.residual <= 1e-7
    np.testing.assert_allclose(spec.stress_by_rank(), brute_stress_by_rank(noisy)[:k], atol=1e-7)
    assert spec.total == pytest.approx(float(np.sum(full**2)), rel=1e-12)
    brute = brute_stress_by_rank(noisy)
    for eps in (0.2, 0.1, 0.05):
        assert spec.effective_rank(eps) == int(np.flatnonzero(brute <= eps)[0] + 1)


def test_unreachable_tolerance_is_shown_by_the_floor() -> None:
    # Three positive eigenvalues, then negatives: the floor is their share of ||B||^2.
    lam = np.concatenate([[5.0, 3.0, 2.0], -np.linspace(0.5, 0.1, 297)])
    b = gram_with_spectrum(lam, seed=2)
    spec = partial_spectrum(b, (0.01,), full_max=0)
    assert not spec.complete and spec.exhausted
    floor = np.sqrt(np.sum(lam[3:] ** 2) / np.sum(lam**2))
    assert spec.floor() == pytest.approx(floor, rel=1e-9)
    assert spec.floor() > 0.01
    assert spec.effective_rank(0.01) is None
    assert spec.stress_by_rank()[5] == pytest.approx(floor, rel=1e-9)  # no rank beats the floor


def test_growth_stops_at_max_rank_without_claiming_unreachable(noisy: np.ndarray) -> None:
    spec = partial_spectrum(noisy, (1e-4,), full_max=0, max_rank=32)
    assert spec.eigenvalues.size == 32
    assert not spec.exhausted and spec.floor() is None
    assert spec.effective_rank(1e-4) is None


def test_small_inputs_take_full_eigh(noisy: np.ndarray) -> None:
    spec = partial_spectrum(noisy, (0.1,))
    assert spec.complete and spec.eigenvalues.size == 400
    np.testing.assert_allclose(spec.stress_by_rank(), brute_stress_by_rank(noisy), atol=1e-12)


def test_warm_start_converges_in_fewer_passes(noisy: np.ndarray) -> None:
    lam, u, res, cold = top_eigenpairs(noisy, 10)
    full = np.sort(np.linalg.eigvalsh(noisy))[::-1]
    assert np.abs(lam - full[:10]).max() <= 1e-7 * np.linalg.norm(noisy)
    rng = np.random.default_rng(5)
    nudged = noisy + 1e-3 * gram_with_spectrum(rng.standard_normal(400), seed=6)
    lam2, _, res2, warm = top_eigenpairs(nudged, 10, start=u)
    _, _, _, again_cold = top_eigenpairs(nudged, 10)
    assert res2 <= 1e-7
    assert warm < again_cold
    want = np.sort(np.linalg.eigvalsh(nudged))[::-1][:10]
    assert np.abs(lam2 - want).max() <= 1e-7 * np.linalg.norm(nudged)


def test_top_pairs_asks_for_one_to_n_minus_one_pairs() -> None:
    """k in [1, n-1], refused outside with the usual message; k = n - 1 gives every pair but the
    last, largest first, as eigh does."""
    from posdiag.errors import PosdiagError
    from posdiag.geometry.spectral import top_pairs

    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 5))
    b = x + x.T
    for bad in (0, 5):
        with pytest.raises(PosdiagError, match=rf"^'k' must be an int in \[1, 4\]; got {bad}$"):
            top_pairs(b, bad)
    got = top_pairs(b, 4)
    want = np.linalg.eigvalsh(b)[::-1][:4]
    np.testing.assert_allclose(got.eigenvalues, want, rtol=0, atol=1e-12)
    assert got.vectors.shape == (5, 4)


def _residual(b: np.ndarray, lam: np.ndarray, u: np.ndarray) -> float:
    """Largest ``||b u - lam u|| / ||b||_F`` over the columns."""
    return float(np.linalg.norm(b @ u - u * lam[None, :], axis=0).max() / np.linalg.norm(b))


def test_top_eigenpairs_bounds_zero_matrix_and_unit_norm() -> None:
    from posdiag.errors import PosdiagError

    b = gram_with_spectrum(np.linspace(3.0, -1.0, 12), seed=3)
    for bad in (0, 13):
        with pytest.raises(PosdiagError, match=rf"^'k' must be an int in \[1, 12\]; got {bad}$"):
            top_eigenpairs(b, bad)
    lam, u, res, passes = top_eigenpairs(np.zeros((6, 6)), 2)
    np.testing.assert_array_equal(lam, np.zeros(2))
    np.testing.assert_array_equal(u, np.eye(6, 2))
    assert (res, passes) == (0.0, 0) and isinstance(passes, int)
    # ||b||_F = 1 exactly is an ordinary matrix.
    unit = np.diag([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    lam, u, _, _ = top_eigenpairs(unit, 1)
    assert lam[0] == pytest.approx(1.0, abs=1e-12) and abs(u[0, 0]) == pytest.approx(1.0)


def test_top_eigenpairs_reports_its_residual_and_passes() -> None:
    """The residual returned is the largest column residual of the pairs returned; with
    ``tol = 0`` the iteration runs exactly ``max_iter`` passes (500 by default)."""
    b = gram_with_spectrum(np.concatenate([[5.0, 4.0, 3.9], np.linspace(1.0, -1.0, 47)]), seed=4)
    for max_iter in (1, 3):
        lam, u, res, passes = top_eigenpairs(b, 2, tol=0.0, max_iter=max_iter)
        assert passes == max_iter and lam.shape == (2,) and u.shape == (50, 2)
        assert res > 1e-6
        assert res == pytest.approx(_residual(b, lam, u), rel=1e-6)
    lam, u, res, passes = top_eigenpairs(b, 1, tol=0.0)
    assert passes == 500
    # No pass at all: the (orthonormal) start, no eigenvalue, an infinite residual.
    lam, u, res, passes = top_eigenpairs(b, 2, max_iter=0)
    np.testing.assert_array_equal(lam, np.zeros(2))
    np.testing.assert_allclose(u.T @ u, np.eye(2), atol=1e-12)
    assert res == np.inf and passes == 0


def test_top_eigenpairs_whole_space_is_one_exact_pass() -> None:
    """``k + max(8, k // 2) >= n``: the block spans everything, one pass is exact (residual
    reported 0 when within tol, the measured one when tol = 0)."""
    lam_true = np.linspace(6.0, -2.0, 30)
    b = gram_with_spectrum(lam_true, seed=5)
    lam, u, res, passes = top_eigenpairs(b, 20)  # 20 + 10 = 30 = n
    assert (res, passes) == (0.0, 1)
    np.testing.assert_allclose(lam, lam_true[:20], atol=1e-12)
    lam, u, res, passes = top_eigenpairs(b, 20, tol=0.0)
    assert passes == 1 and 0.0 < res < 1e-13


def test_top_eigenpairs_is_deterministic_and_seeded() -> None:
    b = gram_with_spectrum(np.concatenate([[5.0, 4.0], np.linspace(1.0, -1.0, 48)]), seed=6)
    first = top_eigenpairs(b, 2)
    again = top_eigenpairs(b, 2, seed=0)
    other = top_eigenpairs(b, 2, seed=1)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[1], other[1])
    np.testing.assert_allclose(first[0], other[0], atol=1e-6)


def test_top_eigenpairs_oversamples_wide_blocks() -> None:
    """k = 20 on n = 60 (oversampling k // 2 = 10 > 8): the right pairs."""
    lam_true = np.concatenate([np.linspace(10.0, 5.0, 25), np.linspace(1.0, -1.0, 35)])
    b = gram_with_spectrum(lam_true, seed=7)
    lam, u, res, _ = top_eigenpairs(b, 20)
    assert res <= 1e-7
    np.testing.assert_allclose(lam, lam_true[:20], atol=1e-6)


def test_top_eigenpairs_of_a_rank_one_matrix() -> None:
    """Rank one: the block's images are parallel (a singular Gram: the QR fallback)."""
    x = np.random.default_rng(8).standard_normal(20)
    b = np.outer(x, x)
    lam, u, res, _ = top_eigenpairs(b, 1)
    assert lam[0] == pytest.approx(float(x @ x), rel=1e-12)
    assert abs(float(u[:, 0] @ x)) == pytest.approx(float(np.linalg.norm(x)), rel=1e-12)


def test_top_eigenpairs_degenerate_warm_start() -> None:
    """A warm start with repeated columns (a singular block: Householder QR instead of
    Cholesky) still gives the right pairs."""
    lam_true = np.concatenate([[6.0, 5.0], np.linspace(1.0, -1.0, 38)])
    b = gram_with_spectrum(lam_true, seed=9)
    lam, _, res, _ = top_eigenpairs(b, 2, start=np.ones((40, 2)))
    assert res <= 1e-7
    np.testing.assert_allclose(lam, lam_true[:2], atol=1e-6)
    # The same for block Lanczos: a first block of 40 equal rows is completed at random.
    from posdiag.geometry.spectral import top_pairs

    spec = top_pairs(b, 2, start=np.ones((40, 40)), block=4)
    assert spec.residual <= 1e-10
    np.testing.assert_allclose(spec.eigenvalues, lam_true[:2], atol=1e-9)


def test_top_pairs_eigh_branch_fields_and_its_size_limit() -> None:
    """``n <= 2k + 1``: eigh, with the exact total, residual 0, no pass, ``complete`` False and
    ``exhausted`` when the smallest returned eigenvalue is <= 0; ``n = 2k + 2``: Lanczos."""
    from posdiag.geometry.spectral import top_pairs

    b = np.diag([4.0, 2.0, 0.5, 0.0, -1.0])
    spec = top_pairs(b, 2)  # 5 <= 5: eigh
    np.testing.assert_array_equal(spec.eigenvalues, [4.0, 2.0])
    assert spec.total == 21.25 and spec.residual == 0.0 and spec.iterations == 0
    assert spec.complete is False and spec.exhausted is False
    assert top_pairs(b, 3).exhausted is False  # smallest returned 0.5 > 0
    assert top_pairs(b, 4).exhausted is True  # smallest returned 0.0
    assert top_pairs(np.diag([4.0, -2.0, -3.0]), 2).exhausted is True  # 4, -2
    b6 = np.diag([4.0, 3.0, 2.0, 1.0, 0.5, 0.25])
    lanczos = top_pairs(b6, 2)  # 6 = 2k + 2
    assert lanczos.iterations > 0
    np.testing.assert_allclose(lanczos.eigenvalues, [4.0, 3.0], atol=1e-9)


def test_top_pairs_float32_input_and_seeds() -> None:
    """float32 input is solved in float64; the default seed is 0, another seed another start."""
    from posdiag.geometry.spectral import top_pairs, top_vectors

    b = gram_with_spectrum(np.concatenate([[5.0, 4.0], np.linspace(1.0, -1.0, 58)]), seed=10)
    b32 = b.astype(np.float32)
    got = top_pairs(b32, 2)
    want = top_pairs(b32.astype(np.float64), 2)
    np.testing.assert_array_equal(got.eigenvalues, want.eigenvalues)
    assert got.total == want.total and got.vectors.dtype == np.float64
    np.testing.assert_array_equal(top_pairs(b, 2).vectors, top_pairs(b, 2, seed=0).vectors)
    one = top_pairs(b, 2, seed=1)
    assert not np.array_equal(one.vectors, top_pairs(b, 2).vectors)
    np.testing.assert_allclose(one.eigenvalues, [5.0, 4.0], atol=1e-9)
    np.testing.assert_array_equal(top_vectors(b, 2), top_pairs(b, 2, seed=0).vectors)
    np.testing.assert_array_equal(top_vectors(b, 2, seed=1), one.vectors)


def test_top_pairs_block_size_sets_the_passes() -> None:
    """A block of 2 vectors needs more passes over ``b`` than the default 32 for 10 pairs."""
    from posdiag.geometry.spectral import top_pairs

    lam_true = np.concatenate([np.linspace(10.0, 5.0, 12), np.linspace(1.0, -1.0, 88)])
    b = gram_with_spectrum(lam_true, seed=11)
    wide, thin = top_pairs(b, 10), top_pairs(b, 10, block=2)
    assert thin.iterations > wide.iterations
    np.testing.assert_allclose(thin.eigenvalues, lam_true[:10], atol=1e-8)


def test_partial_spectrum_full_branch_fields() -> None:
    """Up to ``full_max`` (included) every eigenpair, descending, exact fields."""
    lam_true = np.linspace(3.0, -1.0, 9)
    b = gram_with_spectrum(lam_true, seed=12)
    spec = partial_spectrum(b, full_max=9)
    assert spec.eigenvalues.shape == (9,) and spec.vectors.shape == (9, 9)
    np.testing.assert_allclose(spec.eigenvalues, lam_true, atol=1e-12)
    np.testing.assert_allclose(b @ spec.vectors, spec.vectors * spec.eigenvalues, atol=1e-12)
    assert (spec.complete, spec.exhausted, spec.residual, spec.iterations) == (True, True, 0.0, 0)
    assert isinstance(spec.iterations, int) and isinstance(spec.residual, float)
    b32 = partial_spectrum(b.astype(np.float32), full_max=0)
    ref = partial_spectrum(b.astype(np.float32).astype(np.float64), full_max=0)
    np.testing.assert_array_equal(b32.eigenvalues, ref.eigenvalues)
    assert b32.total == ref.total


def test_partial_spectrum_sizes_on_few_positions() -> None:
    """n = 10 asks at most n - 1 = 9 pairs, first min(n - 1, max(start_rank, min_rank))."""
    lam_true = np.linspace(5.0, 0.5, 10)  # positive definite: never exhausted
    b = gram_with_spectrum(lam_true, seed=13)
    assert partial_spectrum(b, full_max=0).eigenvalues.size == 9
    assert partial_spectrum(b, (1e-12,), full_max=0).eigenvalues.size == 9
    assert partial_spectrum(b, full_max=0, start_rank=1).eigenvalues.size == 3  # min_rank
    assert partial_spectrum(b, full_max=0, start_rank=1, min_rank=5).eigenvalues.size == 5


def test_partial_spectrum_until_below_reads_the_smallest_computed() -> None:
    """Growth stops once the smallest computed eigenvalue is below ``until_below``."""
    lam_true = np.concatenate([[10.0, 8.0, 6.0, 4.0, 3.5, 3.0, 2.5, 2.0], np.full(52, 0.1)])
    b = gram_with_spectrum(lam_true, seed=14)
    spec = partial_spectrum(b, full_max=0, start_rank=4, until_below=5.0)
    assert spec.eigenvalues.size == 4  # 4 < 5 already: no growth
    grown = partial_spectrum(b, full_max=0, start_rank=4, until_below=3.2)
    assert grown.eigenvalues.size == 8


def test_partial_spectrum_warm_start_and_seed() -> None:
    lam_true = np.concatenate([np.linspace(10.0, 5.0, 16), np.linspace(1.0, -1.0, 184)])
    b = gram_with_spectrum(lam_true, seed=15)
    cold = partial_spectrum(b, full_max=0)
    warm = partial_spectrum(b, full_max=0, start=cold.vectors)
    assert warm.iterations < cold.iterations
    np.testing.assert_allclose(warm.eigenvalues, cold.eigenvalues, atol=1e-9)
    again = partial_spectrum(b, full_max=0, seed=0)
    np.testing.assert_array_equal(cold.vectors, again.vectors)
    other = partial_spectrum(b, full_max=0, seed=1)
    assert not np.array_equal(cold.vectors, other.vectors)
    np.testing.assert_allclose(other.eigenvalues, cold.eigenvalues, atol=1e-8)


def test_smallest_eigenvalue_edges_and_determinism() -> None:
    from posdiag.geometry.spectral import smallest_eigenvalue

    assert smallest_eigenvalue(np.zeros((5, 5))) == 0.0
    # ||b||_F = 1 exactly.
    assert smallest_eigenvalue(np.diag([0.0, 0.0, 0.0, -1.0])) == pytest.approx(-1.0, abs=1e-8)
    lam_true = np.concatenate([[4.0, 3.0], np.linspace(1.0, -0.7, 58)])
    b = gram_with_spectrum(lam_true, seed=16)
    low = smallest_eigenvalue(b)
    assert low == pytest.approx(-0.7, abs=1e-8 * np.linalg.norm(b))
    assert smallest_eigenvalue(b) == low == smallest_eigenvalue(b, seed=0)


def test_gram_operator_hands_float64_contiguous_blocks() -> None:
    from posdiag.geometry.spectral import GramOperator

    seen: list[np.ndarray] = []
    b = np.arange(9.0).reshape(3, 3)

    def matmat(x: np.ndarray) -> np.ndarray:
        seen.append(x)
        return b @ x

    op = GramOperator(3, matmat)
    assert op.shape == (3, 3)
    x = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(3, 2))
    np.testing.assert_array_equal(op @ x, b @ x.astype(np.float64))
    assert seen[0].dtype == np.float64 and seen[0].flags.c_contiguous


def test_operator_spectrum_equals_partial_spectrum_of_the_matrix() -> None:
    """The operator path is partial_spectrum's solver: the same sizes (n - 1 at most, 16 first,
    grown for the tolerances up to 128 by default) and pairs."""
    from posdiag.geometry.spectral import GramOperator, operator_spectrum

    def spectra(b: np.ndarray, *args: tuple[float, ...], **kw: int) -> tuple:
        op = GramOperator(b.shape[0], lambda x: b @ x)
        got = operator_spectrum(op, float(np.sum(b * b)), *args, **kw)
        return got, partial_spectrum(b, *args, full_max=0, **kw)

    small = gram_with_spectrum(np.linspace(5.0, 0.5, 10), seed=17)
    for args in ((), ((1e-12,),)):
        got, want = spectra(small, *args)
        assert got.eigenvalues.size == want.eigenvalues.size == 9
        np.testing.assert_allclose(got.eigenvalues, np.linspace(5.0, 0.5, 10)[:9], atol=1e-10)
    # n = 20: grown from 16 to the cap n - 1 = 19 for an unreachable tolerance.
    got, want = spectra(gram_with_spectrum(np.linspace(5.0, 0.5, 20), seed=19), (1e-12,))
    assert got.eigenvalues.size == want.eigenvalues.size == 19
    lam_true = np.concatenate([10.0 * 0.9 ** np.arange(60), np.full(140, 1e-3)])
    b = gram_with_spectrum(lam_true, seed=18)
    got, want = spectra(b)
    assert got.eigenvalues.size == want.eigenvalues.size == 16  # nothing asked: the first set
    got, want = spectra(b, (0.05,))
    assert 16 < got.eigenvalues.size == want.eigenvalues.size <= 128
    np.testing.assert_allclose(got.eigenvalues, want.eigenvalues, atol=1e-9)
    one = operator_spectrum(GramOperator(200, lambda x: b @ x), float(np.sum(b * b)), seed=1)
    assert not np.array_equal(one.vectors, spectra(b)[0].vectors)


def test_effective_rank_counts_a_stress_equal_to_the_tolerance() -> None:
    """Stress of rank 1 of eigenvalues (4, 3, 0) is sqrt(9 / 25) = 0.6 exactly: reached."""
    from posdiag.geometry.spectral import PartialSpectrum

    spec = PartialSpectrum(np.array([4.0, 3.0, 0.0]), np.eye(3), 25.0, True, True, 0.0, 0)
    assert spec.stress_by_rank()[0] == 0.6
    assert spec.effective_rank(0.6) == 1


def test_stress_by_rank_stays_in_zero_one_under_rounding() -> None:
    """Rounding puts the tail an ulp outside [0, total]: a negative definite B (seed 9: the
    eigenvalues' squares sum 7e-16 above ||B||_F^2) has stress exactly 1 at every rank, a
    rank-3 one (seed 2: the kept squares 8e-16 above the total) exactly 0 at rank 3."""
    neg = partial_spectrum(gram_with_spectrum(-np.linspace(0.5, 2.0, 30), seed=9))
    assert float(np.sum(neg.eigenvalues**2)) > neg.total  # the rounding this is about
    np.testing.assert_array_equal(neg.stress_by_rank(), np.ones(29))
    lam = np.concatenate([[3.0, 2.0, 1.0], np.zeros(37)])
    low = partial_spectrum(gram_with_spectrum(lam, seed=2), full_max=0, start_rank=3)
    assert not low.complete and low.eigenvalues.size == 3
    got = low.stress_by_rank()
    assert got[2] == 0.0
    np.testing.assert_allclose(got[:2], np.sqrt([5.0 / 14.0, 1.0 / 14.0]), rtol=1e-12)


def test_zero_and_small_matrices() -> None:
    """B = 0: zero pairs, residual 0, zero stresses; a small B (||B||_F < 1) gives the scaled
    figures of a large one: the solver is scale-free (a power of 2 scales every step exactly)."""
    from posdiag.geometry.spectral import PartialSpectrum, top_pairs

    zero = top_pairs(np.zeros((40, 40)), 3)
    np.testing.assert_array_equal(zero.eigenvalues, np.zeros(3))
    assert zero.total == 0.0 and zero.residual == 0.0 and zero.exhausted
    flat = PartialSpectrum(np.zeros(3), np.eye(4, 3), 0.0, False, True, 0.0, 0)
    np.testing.assert_array_equal(flat.stress_by_rank(), np.zeros(3))
    b = gram_with_spectrum(np.concatenate([np.linspace(6.0, 2.0, 10), np.full(90, 0.01)]), 20)
    big = partial_spectrum(b, (0.1,), full_max=0)
    small = partial_spectrum(b * 2.0**-40, (0.1,), full_max=0)
    assert np.linalg.norm(b) > 1.0 > np.linalg.norm(b * 2.0**-40)
    assert small.iterations == big.iterations
    np.testing.assert_array_equal(small.eigenvalues, big.eigenvalues * 2.0**-40)
    np.testing.assert_array_equal(small.stress_by_rank(), big.stress_by_rank())
    # A complete spectrum with total <= 1: the ordinary formula.
    tiny = partial_spectrum(np.diag([0.6, 0.3, -0.2]))
    assert tiny.total < 1.0
    np.testing.assert_allclose(
        tiny.stress_by_rank(), np.sqrt([0.13 / 0.49, 0.04 / 0.49]), rtol=1e-12
    )


def test_block_lanczos_blocks_and_wide_warm_starts() -> None:
    """A block of 0 is a single vector, as 1; a warm start wider than the block is used whole:
    holding the wanted eigenvectors (last of 40 columns), it gives them in one pass."""
    from posdiag.geometry.spectral import top_pairs

    lam_true = np.concatenate([[9.0, 8.0, 7.0], np.linspace(3.0, -3.0, 97)])
    b = gram_with_spectrum(lam_true, seed=21)
    for block in (0, 1):
        np.testing.assert_allclose(top_pairs(b, 3, block=block).eigenvalues, [9, 8, 7], atol=1e-8)
    w, u = np.linalg.eigh(b)
    start = np.ascontiguousarray(u[:, ::-1][:, list(range(10, 47)) + [0, 1, 2]])
    warm = top_pairs(b, 3, start=start, block=4)
    assert warm.iterations == 1
    np.testing.assert_allclose(warm.eigenvalues, [9.0, 8.0, 7.0], atol=1e-12)


def test_block_lanczos_reports_the_residual_of_its_pairs() -> None:
    """top_pairs' residual is the largest ``||b u - theta u|| / ||b||_F`` of the pairs returned
    (measured from the stored images ``B v``, so to rounding)."""
    from posdiag.geometry.spectral import top_pairs

    lam_true = np.concatenate([[9.0, 8.0, 7.0, 6.5], np.linspace(3.0, -3.0, 196)])
    b = gram_with_spectrum(lam_true, seed=22)
    for tol in (1e-4, 1e-10):
        spec = top_pairs(b, 4, tol=tol)
        assert 0.0 < spec.residual <= tol
        want = _residual(b, spec.eigenvalues, spec.vectors)
        assert spec.residual == pytest.approx(want, rel=1e-2)


def test_converged_counts_the_leading_pairs_within_the_tolerance() -> None:
    from posdiag.geometry.spectral import _BlockLanczos

    solver = _BlockLanczos(np.eye(4), 2, 4)
    solver.estimate = np.array([1e-9, 1e-7, 1e-3, 1e-9, 1e-2])
    assert solver.converged(1e-7) == 2  # an estimate equal to tol counts
    assert solver.converged(1e-8) == 1
    assert solver.converged(1.0) == 5


def test_schedule_extrapolates_the_residual_decay_seventy_percent_of_the_way() -> None:
    """The next check: ``m + max(block, min(0.7 ln(worst / tol) / rate, m // 2))`` with
    ``rate`` the log-decay per vector since the last check; ``block`` ahead when there is no
    decay to extrapolate (first check, no decrease)."""
    from posdiag.geometry.spectral import _Schedule

    s = _Schedule(8)
    assert s.next(64, 1e-4, 1e-7) == 72  # first check: one block ahead
    rate = np.log(1e-4 / 1e-6) / (128 - 64)
    assert s.next(128, 1e-6, 1e-7) == 128 + int(0.7 * np.log(10.0) / rate)  # 22 ahead
    assert s.next(201, 1e-6, 1e-7) == 209  # no decrease: one block
    assert s.next(301, 0.999e-6, 1e-7) == 301 + 150  # slow decay: capped at m // 2
    assert s.next(401, 0.0, 1e-7) == 409  # an exact zero: nothing to extrapolate
    s.reset()
    assert s.next(64, 1e-4, 1e-7) == 72


def test_solve_stops_after_max_passes() -> None:
    """A tolerance never met (0): the passes run out at ``max_passes``, the pairs as reached."""
    from posdiag.geometry.spectral import _solve

    lam_true = np.concatenate([[9.0, 8.0, 7.0], np.linspace(3.0, -3.0, 197)])
    b = gram_with_spectrum(lam_true, seed=23)
    spec = _solve(b, 3, 3, 0.0, lambda _: True, total=float(np.sum(b * b)), max_passes=2)
    assert spec.iterations == 2 and spec.eigenvalues.size == 3
    assert spec.residual == pytest.approx(_residual(b, spec.eigenvalues, spec.vectors), rel=1e-2)


def test_exhausted_first_set_stops_the_growth() -> None:
    """15 positive eigenvalues: the first 16 pairs end on a negative one, so every positive
    eigenvalue is known and an unreachable tolerance (0.001, below the floor) needs no more."""
    lam_true = np.concatenate([np.linspace(5.0, 1.0, 15), -np.linspace(0.1, 2.0, 185)])
    spec = partial_spectrum(gram_with_spectrum(lam_true, seed=24), (0.001,), full_max=0)
    assert spec.eigenvalues.size == 16 and spec.exhausted and spec.complete is False
    assert spec.eigenvalues[-2] > 0 > spec.eigenvalues[-1]
    floor = np.sqrt(np.sum(lam_true[15:] ** 2) / np.sum(lam_true**2))
    assert spec.floor() == pytest.approx(floor, rel=1e-9) and floor > 0.001
