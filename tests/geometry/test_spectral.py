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
