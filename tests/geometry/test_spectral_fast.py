"""The block Lanczos partial solver (posdiag.geometry.spectral) against full numpy
eigendecompositions,
and the held-out mds-r scores from low-rank inner products against the n x n formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import posdiag.geometry.spectral as spectral
from posdiag.geometry.estimator import SplitHalf
from posdiag.geometry.spectral import (
    DEFAULT_TOL,
    PARTIAL_FROM,
    VECTOR_TOL,
    _BlockLanczos,
    _next_block,
    partial_spectrum,
    top_pairs,
)
from tests.geometry._oracles import heldout_mds_stress, noise_energy


def low_rank_plus_noise(
    n: int, rank: int, seed: int, negative: float = 0.3, decay: float = 0.85
) -> np.ndarray:
    """A double-centred-like Gram: decaying signal of ``rank`` directions plus a symmetric
    noise matrix (a semicircle of eigenvalues on both sides of 0, like a cross-fit's)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, rank)) * (4.0 * decay ** np.arange(rank))[None, :]
    e = rng.standard_normal((n, n))
    return x @ x.T + negative * (e + e.T) / math.sqrt(2 * n)


def brute(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Descending eigenvalues and the stress of rank r = 1..n-1 from the full eigvalsh."""
    lam = np.sort(np.linalg.eigvalsh(b))[::-1]
    total = float(np.sum(lam**2))
    kept = np.cumsum(np.clip(lam, 0, None) ** 2)[:-1]
    return lam, np.sqrt(np.clip((total - kept) / total, 0, 1))


def first_rank(stress: np.ndarray, eps: float) -> int | None:
    hits = np.flatnonzero(stress <= eps)
    return int(hits[0] + 1) if hits.size else None


def ladder_k(start: int, cap: int, need: int) -> int:
    """The set size the growth 16, 32, 64, ... stops at for a rank ``need`` (or the cap)."""
    k = start
    while k < need and k < cap:
        k = min(cap, 2 * k)
    return k


@pytest.mark.parametrize(("n", "rank", "seed"), [(300, 20, 0), (800, 60, 1), (1500, 40, 2)])
def test_partial_spectrum_matches_eigh(n: int, rank: int, seed: int) -> None:
    b = low_rank_plus_noise(n, rank, seed)
    lam, stress = brute(b)
    assert lam[-1] < -0.1  # negative eigenvalues, as in a cross-fitted B_H
    tolerances = (0.3, 0.15)
    spec = partial_spectrum(b, tolerances, full_max=0)
    assert not spec.complete and spec.iterations > 0  # the partial path was taken
    k = spec.eigenvalues.size
    fro = float(np.linalg.norm(b))
    # The stated accuracy: every eigenvalue within tol * ||B||_F (the residual bound), and
    # the pairs really are eigenpairs to that residual.
    assert np.abs(spec.eigenvalues - lam[:k]).max() <= DEFAULT_TOL * fro
    assert spec.residual <= DEFAULT_TOL
    r = b @ spec.vectors - spec.vectors * spec.eigenvalues[None, :]
    assert np.linalg.norm(r, axis=0).max() <= DEFAULT_TOL * fro
    np.testing.assert_allclose(spec.vectors.T @ spec.vectors, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(spec.stress_by_rank(), stress[:k], atol=1e-9)
    needs = [first_rank(stress, eps) for eps in tolerances]
    for eps, need in zip(tolerances, needs, strict=True):
        assert spec.effective_rank(eps) == need
    # The growth stops where the old one did: the first set 16, 32, 64, ... holding every rank.
    assert k == ladder_k(16, 128, max(x for x in needs if x is not None))


def test_growth_reaches_the_cap_when_the_tolerance_is_beyond_it() -> None:
    b = low_rank_plus_noise(1000, 200, seed=3, negative=0.05, decay=0.995)
    lam, stress = brute(b)
    need = first_rank(stress, 0.01)
    assert need is not None and need > 100
    spec = partial_spectrum(b, (0.01,), full_max=0, max_rank=100)
    assert spec.eigenvalues.size == 100 and not spec.exhausted
    assert spec.effective_rank(0.01) is None
    assert np.abs(spec.eigenvalues - lam[:100]).max() <= DEFAULT_TOL * np.linalg.norm(b)


def test_exactly_low_rank_matrix_is_exhausted() -> None:
    # Rank 5, positive semi-definite: the Krylov space closes after 5 directions (the
    # rank-deficient branch of _next_block) and the 16 pairs show every positive eigenvalue.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((400, 5))
    b = x @ x.T
    lam, _ = brute(b)
    spec = partial_spectrum(b, (1e-9,), full_max=0)
    np.testing.assert_allclose(spec.eigenvalues[:5], lam[:5], rtol=1e-10)
    assert np.abs(spec.eigenvalues[5:]).max() <= 1e-10 * lam[0]
    assert spec.effective_rank(1e-6) == 5
    assert spec.residual <= DEFAULT_TOL


def test_small_n_spans_everything_exactly() -> None:
    # n = 60 with 59 pairs wanted: the basis spans R^n and Rayleigh-Ritz is exact.
    b = low_rank_plus_noise(60, 10, seed=5)
    lam, stress = brute(b)
    spec = partial_spectrum(b, (1e-12,), full_max=0, max_rank=59)
    assert spec.eigenvalues.size == 59
    np.testing.assert_allclose(spec.eigenvalues, lam[:59], atol=1e-12 * np.linalg.norm(b))
    np.testing.assert_allclose(spec.stress_by_rank(), stress[:59], atol=1e-9)


def test_thick_restart_keeps_the_accuracy(monkeypatch: pytest.MonkeyPatch) -> None:
    b = low_rank_plus_noise(900, 80, seed=6)
    lam, _ = brute(b)
    restarts: list[tuple[int, int]] = []
    real = _BlockLanczos._shrink

    def counting(self: _BlockLanczos) -> None:
        real(self)
        restarts.append((self.m, self.keep))

    monkeypatch.setattr(_BlockLanczos, "_shrink", counting)
    # A basis of 120 rows where 64 pairs need ~300: it must restart, and still converge.
    monkeypatch.setattr(spectral, "_basis_limit", lambda n, k, block: 2 * k - 8)
    spec = partial_spectrum(b, (1e-6,), full_max=0, max_rank=64)
    assert restarts
    assert all(kept > wanted for kept, wanted in restarts)  # the wanted pairs and more stay
    assert max(wanted for _, wanted in restarts) == 64
    assert spec.eigenvalues.size == 64
    assert np.abs(spec.eigenvalues - lam[:64]).max() <= DEFAULT_TOL * np.linalg.norm(b)
    assert spec.residual <= DEFAULT_TOL


def test_top_pairs_vectors_match_eigh_up_to_sign() -> None:
    b = low_rank_plus_noise(700, 12, seed=7)
    w, u = np.linalg.eigh(b)
    order = np.argsort(w)[::-1][:3]
    spec = top_pairs(b, 3)
    assert spec.iterations > 0 and spec.eigenvalues.size == 3
    assert spec.residual <= VECTOR_TOL
    fro = np.linalg.norm(b)
    assert np.abs(spec.eigenvalues - w[order]).max() <= VECTOR_TOL * fro
    dots = np.abs(np.sum(spec.vectors * u[:, order], axis=0))
    np.testing.assert_allclose(dots, 1.0, atol=1e-12)
    assert spec.total == pytest.approx(float(np.sum(w**2)), rel=1e-12)


def test_top_pairs_warm_start_takes_fewer_passes() -> None:
    b = low_rank_plus_noise(700, 12, seed=8)
    nudged = b + 0.05 * low_rank_plus_noise(700, 2, seed=9, negative=1.0)
    cold = top_pairs(nudged, 3)
    warm = top_pairs(nudged, 3, start=top_pairs(b, 3).vectors)
    assert warm.iterations < cold.iterations
    np.testing.assert_allclose(warm.eigenvalues, cold.eigenvalues, atol=1e-9)


def test_top_pairs_small_n_takes_eigh() -> None:
    b = low_rank_plus_noise(7, 3, seed=10)
    spec = top_pairs(b, 3)
    assert spec.iterations == 0
    np.testing.assert_allclose(spec.eigenvalues, np.sort(np.linalg.eigvalsh(b))[::-1][:3])


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(120, 320),
    seed=st.integers(0, 2**16),
    decay=st.floats(0.5, 0.97),
    negatives=st.integers(0, 60),
    want=st.sampled_from([(0.5,), (0.2, 0.1), (0.05,)]),
)
def test_partial_spectrum_property(
    n: int, seed: int, decay: float, negatives: int, want: tuple[float, ...]
) -> None:
    """Any spectrum (geometric signal, a cluster of small values, negatives): the computed
    eigenvalues are the top ones of eigvalsh within the stated accuracy, and the effective
    ranks (when reached within the pairs computed) are the brute-force ones."""
    rng = np.random.default_rng(seed)
    pos = n - negatives
    lam = np.concatenate(
        [decay ** np.arange(pos) + rng.uniform(0, 1e-3, pos), -rng.uniform(0, 0.2, negatives)]
    )
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    b = (q * lam[None, :]) @ q.T
    full, stress = brute(b)
    spec = partial_spectrum(b, want, full_max=0, max_rank=64)
    k = spec.eigenvalues.size
    assert np.abs(spec.eigenvalues - full[:k]).max() <= DEFAULT_TOL * np.linalg.norm(b)
    for eps in want:
        need = first_rank(stress, eps)
        got = spec.effective_rank(eps)
        if need is not None and need <= k:
            assert got == need
        else:
            assert got is None


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(30, 200),
    j=st.integers(1, 12),
    rank=st.integers(0, 12),
    seed=st.integers(0, 2**16),
)
def test_next_block_is_orthonormal_and_spans_the_residual(
    n: int, j: int, rank: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((n, 10)))[0].T
    # A residual of rank min(rank, j), orthogonal to the basis (rank 0: an invariant subspace).
    r = rng.standard_normal((j, min(rank, j))) @ rng.standard_normal((min(rank, j), n))
    r -= (r @ basis.T) @ basis
    q, c = _next_block(r, basis, j, 1.0, rng)
    assert q.shape == (j, n) and c.shape == (j, j)
    np.testing.assert_allclose(q @ q.T, np.eye(j), atol=1e-12)
    assert np.abs(q @ basis.T).max() <= 1e-12
    np.testing.assert_allclose(c.T @ q, r, atol=1e-11 * max(1.0, float(np.abs(r).max())))


# --- held-out mds-r from low-rank inner products -----------------------------------------------


def heldout_by_rank_grams(halves: SplitHalf, ranks: list[int]) -> dict[int, float]:
    """The previous formula: the n x n Gram of each fit's rank-r coordinates, from a full
    eigh, scored by <B, G> / (|norm| ||G||_F)."""
    noise = float(noise_energy(halves).sum())
    acc = dict.fromkeys(ranks, 0.0)
    for g_p, g_q in halves.grams:
        signal = float(np.vdot(g_p, g_q))
        norm = math.sqrt(signal + noise) if signal > 0 else 0.0
        for target, fitted_on in ((g_q, g_p), (g_p, g_q)):
            w, u = np.linalg.eigh(fitted_on)
            order = np.argsort(w)[::-1]
            w, u = w[order], u[:, order]
            for r in ranks:
                x = u[:, :r] * np.sqrt(np.clip(w[:r], 0.0, None))[None, :]
                g = x @ x.T
                ng = float(np.linalg.norm(g))
                if norm == 0.0 or ng == 0.0:
                    acc[r] += 1.0
                    continue
                cos = min(1.0, max(0.0, float(np.vdot(target, g))) / (norm * ng))
                acc[r] += math.sqrt(1.0 - cos * cos)
    return {r: v / (2 * len(halves.grams)) for r, v in acc.items()}


@pytest.mark.parametrize("n", [40, PARTIAL_FROM + 88])  # full eigh, then block Lanczos
def test_heldout_stress_equals_the_rank_gram_formula(n: int) -> None:
    truth = low_rank_plus_noise(n, 8, seed=12, negative=0.0)
    grams = []
    for s in range(2):
        p = truth + low_rank_plus_noise(n, 1, seed=20 + s, negative=0.4)
        q = truth + low_rank_plus_noise(n, 1, seed=30 + s, negative=0.4)
        grams.append((p, q))
    halves = SplitHalf(tuple(grams))
    got = heldout_mds_stress(halves, [1, 2, 3])
    want = heldout_by_rank_grams(halves, [1, 2, 3])
    lanczos = heldout_mds_stress(halves, [1, 2, 3], partial_from=1)  # top pairs at any n
    for r in (1, 2, 3):
        assert got[r] == pytest.approx(want[r], abs=1e-10)
        assert lanczos[r] == pytest.approx(want[r], abs=1e-10)
    assert 0.0 < got[3] < got[1] < 1.0
