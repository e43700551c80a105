"""Only the eigen-information a report needs, at long contexts (issue 13).

The stress of the rank-r MDS encoding is an eigenvalue tail,
``sqrt(sum_{k>r} l_k^2 / sum_k l_k^2)``, and ``sum_k l_k^2 = ||B||_F^2`` needs no eigenvalue at
all. So the tail after the top ``K`` eigenvalues is ``||B||_F^2 - sum_{k<=K} l_k^2`` exactly, and a
report needs only the top eigenpairs (coordinates, the effective ranks of the tolerances asked
for), found by a partial solver:

- ``n <= FULL_EIGH_MAX``: the full ``eigh`` (exact, every eigenvalue; what small inputs always did).
- larger ``n``: block subspace iteration with Rayleigh-Ritz (one pass over ``B`` per iteration,
  a BLAS-3 product; a warm start from previous eigenvectors makes bootstrap replicates cheap),
  grown (the block doubles) until every requested tolerance is reached, or the positive
  eigenvalues are exhausted (the tolerance is then shown unreachable: the remaining tail, made
  of negative eigenvalues, is the stress floor), or ``max_rank`` is hit.

Accuracy: iteration stops when every wanted Ritz pair has residual
``||B u - theta u|| <= tol * ||B||_F``; for a symmetric matrix each such ``theta`` is within the
residual of an eigenvalue (and within ``residual^2 / gap`` of its own), so with the default
``tol = 1e-7`` every computed eigenvalue is within ``1e-7 ||B||_F`` of the truth (in practice
~1e-13, the square), and so is each stress-by-rank value relative to 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, eigsh

from ._validate import check_int

__all__ = [
    "EIGVALSH_MAX",
    "FULL_EIGH_MAX",
    "PartialSpectrum",
    "partial_spectrum",
    "smallest_eigenvalue",
    "top_eigenpairs",
    "top_vectors",
]

# Up to this n a full eigh costs about as much as the partial solver with its growth steps.
FULL_EIGH_MAX = 1024
# Up to this n every eigenvalue is computed (eigvalsh, no vectors: 2 s at n = 2,048 but 45 s at
# n = 4,096 under load, growing as n^3), beyond it only the top ones: the bottom of an estimated
# B_H is a dense cluster that Lanczos resolves slowly (1,000-5,000 products at n = 2,048).
EIGVALSH_MAX = 2048
# Eigenpairs computed at first (the default set needs mds-1..3; tolerances often need more).
START_RANK = 16
# Growth stops here: past ~100 pairs a partial solver on a slowly decaying (noise) spectrum costs
# more than it saves; effective ranks beyond are reported as "> k" (measured: at n = 2,048 the
# plug-in spectrum needs ~1,500 ranks for stress 0.1, and growing to 512 took > 10 min under load).
DEFAULT_MAX_RANK = 128
DEFAULT_TOL = 1e-7


@dataclass(frozen=True)
class PartialSpectrum:
    """The top of the spectrum of a symmetric ``B`` with its exact total.

    Attributes
    ----------
    eigenvalues : ndarray of shape (k,)
        The ``k`` largest eigenvalues, descending (all ``n`` when ``complete``).
    vectors : ndarray of shape (n, k)
        Matching unit eigenvectors (columns).
    total : float
        ``||B||_F^2 = sum of all l_k^2``.
    complete : bool
        True when every eigenvalue was computed (full ``eigh``).
    exhausted : bool
        True when every positive eigenvalue is among ``eigenvalues`` (the smallest computed is
        <= 0, or the spectrum is complete): the tail after them is the stress floor.
    residual : float
        Largest ``||B u - theta u|| / ||B||_F`` of the computed pairs (0 for ``eigh``).
    iterations : int
        Passes over ``B`` the partial solver made (0 for ``eigh``).
    """

    eigenvalues: np.ndarray
    vectors: np.ndarray
    total: float
    complete: bool
    exhausted: bool
    residual: float
    iterations: int

    @property
    def n(self) -> int:
        return int(self.vectors.shape[0])

    def stress_by_rank(self) -> np.ndarray:
        """Stress of the rank-r MDS encoding for r = 1..k (r <= n-1), from the exact total.

        Ranks past the positive eigenvalues keep the stress floor (MDS coordinates use positive
        eigenvalues only, so a negative eigenvalue never leaves the tail).
        """
        lam = self.eigenvalues[: self.n - 1]
        kept = np.clip(lam, 0.0, None) ** 2
        tail = self.total - np.cumsum(kept)
        if self.complete:
            # The exact tail of the full spectrum: a reversed cumulative sum keeps tiny tails
            # accurate where total - cumsum would cancel.
            sq = np.where(self.eigenvalues > 0, self.eigenvalues, 0.0) ** 2
            neg = float(np.sum(np.where(self.eigenvalues < 0, self.eigenvalues, 0.0) ** 2))
            tail = np.cumsum(sq[::-1])[::-1][1:] + neg
            tail = tail[: lam.size]
        if self.total <= 0:
            return np.zeros(lam.size)
        return np.sqrt(np.clip(tail / self.total, 0.0, 1.0))

    def effective_rank(self, eps: float) -> int | None:
        """Smallest computed rank with stress <= ``eps``; None when not among the computed."""
        hits = np.flatnonzero(self.stress_by_rank() <= eps)
        return int(hits[0] + 1) if hits.size else None

    def floor(self) -> float | None:
        """The stress no rank can go below (negative eigenvalues); None if not yet known."""
        if not self.exhausted:
            return None
        pos = np.clip(self.eigenvalues, 0.0, None)
        return float(np.sqrt(max(0.0, self.total - float(pos @ pos)) / self.total))


def _orthonormal(m: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the columns of ``m`` (n, p) by Cholesky QR, twice (CholeskyQR2).

    Two BLAS-3 products instead of Householder QR: LAPACK's QR ran 60x slower than this on the
    loaded 2-core machine (1.3 s for 2,048 x 96, its level-2 steps fighting for the cores).
    The Ritz vectors times ``B`` are nearly orthogonal already, so the Gram matrix is well
    conditioned; Householder QR remains the fallback for a singular one.
    """
    m = m / np.maximum(np.linalg.norm(m, axis=0), np.finfo(float).tiny)[None, :]
    try:
        for _ in range(2):
            chol = np.linalg.cholesky(m.T @ m)
            m = scipy.linalg.solve_triangular(chol, m.T, lower=True).T
    except np.linalg.LinAlgError:
        m, _ = np.linalg.qr(m)
    return np.ascontiguousarray(m)


def top_eigenpairs(
    b: np.ndarray,
    k: int,
    *,
    tol: float = DEFAULT_TOL,
    start: np.ndarray | None = None,
    seed: int = 0,
    max_iter: int = 500,
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """The ``k`` algebraically largest eigenpairs of symmetric ``b`` by block subspace iteration.

    Parameters
    ----------
    b : ndarray of shape (n, n)
        Symmetric.
    k : int
        Pairs wanted, ``1 <= k <= n``.
    tol : float
        Stop when every wanted pair has ``||b u - theta u|| <= tol * ||b||_F``.
    start : ndarray of shape (n, m), optional
        Warm start (e.g. the eigenvectors of a nearby matrix); completed with seeded noise.
    max_iter : int
        Passes over ``b`` at most (the accuracy reached is returned either way).

    Returns
    -------
    (ndarray (k,), ndarray (n, k), float, int)
        Eigenvalues descending, vectors, the largest relative residual, passes made.
    """
    n = b.shape[0]
    k = check_int("k", k, 1, n)
    fro = float(np.linalg.norm(b))
    if fro == 0.0:
        return np.zeros(k), np.eye(n, k), 0.0, 0
    # Oversampling: the block converges at rate |l_{p+1} / l_k| per pass.
    p = min(n, k + max(8, k // 2))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, p))
    if start is not None:
        m = min(start.shape[1], p)
        q[:, :m] = start[:, :m]
    q = _orthonormal(q)
    theta = np.zeros(k)
    u = q[:, :k]
    worst = np.inf
    passes = 0
    for passes in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        z = b @ q
        h = q.T @ z
        w, s = np.linalg.eigh((h + h.T) / 2.0)
        order = np.argsort(w)[::-1]
        w, s = w[order], s[:, order]
        u_all = q @ s
        bu = z @ s
        theta, u = w[:k], u_all[:, :k]
        res = np.linalg.norm(bu[:, :k] - u * theta[None, :], axis=0) / fro
        worst = float(res.max())
        if worst <= tol or p == n:
            break
        q = _orthonormal(bu)
    if p == n:
        worst = 0.0 if worst <= tol else worst
    return theta, u, worst, passes


def _lanczos(
    b: np.ndarray, k: int, tol: float, start: np.ndarray | None, seed: int
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """``k`` largest eigenpairs by ARPACK's Lanczos (``scipy.sparse.linalg.eigsh``).

    Each product is one pass over ``B``; Lanczos needs far fewer passes than subspace iteration
    from a cold start on a slowly decaying spectrum (n = 2,048, k = 64: 3 s against 13 s).
    """
    v0 = (
        start[:, 0]
        if start is not None
        else np.random.default_rng(seed).standard_normal(b.shape[0])
    )
    op = LinearOperator(b.shape, matvec=lambda x: b @ x, dtype=np.float64)
    count = [0]

    def matvec(x: np.ndarray) -> np.ndarray:
        count[0] += 1
        return np.asarray(op.matvec(x))

    lam, u = eigsh(
        LinearOperator(b.shape, matvec=matvec, dtype=np.float64),
        k=k,
        which="LA",
        v0=v0,
        tol=tol * 1e-3,
    )
    order = np.argsort(lam)[::-1]
    lam, u = lam[order], u[:, order]
    fro = float(np.linalg.norm(b))
    res = np.linalg.norm(b @ u - u * lam[None, :], axis=0) / fro if fro > 0 else np.zeros(k)
    return lam, u, float(res.max()), count[0]


def top_vectors(b: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """The unit eigenvectors of the ``k`` largest eigenvalues of symmetric ``b`` (Lanczos),
    columns in descending order of eigenvalue; shape (n, k)."""
    n = b.shape[0]
    k = check_int("k", k, 1, n - 1)
    if n <= 2 * k + 1:
        lam, u = np.linalg.eigh(b)
        return np.ascontiguousarray(u[:, np.argsort(lam)[::-1][:k]])
    return _lanczos(b, k, DEFAULT_TOL, None, seed)[1]


def partial_spectrum(
    b: np.ndarray,
    tolerances: Sequence[float] = (),
    *,
    min_rank: int = 3,
    max_rank: int | None = None,
    tol: float = DEFAULT_TOL,
    start: np.ndarray | None = None,
    full_max: int = FULL_EIGH_MAX,
    seed: int = 0,
    until_below: float | None = None,
) -> PartialSpectrum:
    """Top eigenpairs of ``b``, grown until every stress tolerance is reached or unreachable.

    Parameters
    ----------
    b : ndarray of shape (n, n)
        Symmetric (a double-centred Gram matrix).
    tolerances : sequence of float
        Stress levels whose effective rank must be resolved.
    min_rank : int
        Eigenpairs needed whatever the tolerances (MDS coordinates).
    max_rank : int, optional
        Largest number of eigenpairs the partial solver grows to (:data:`DEFAULT_MAX_RANK`).
    start : ndarray of shape (n, m), optional
        Warm start vectors.
    full_max : int
        Up to this ``n`` the full ``eigh`` is used.
    until_below : float, optional
        Also grow until the smallest computed eigenvalue is below this value (the magnitude of
        the most negative eigenvalue: then every eigenvalue above it, the signal rank, is known).
    """
    b = np.asarray(b, dtype=np.float64)
    n = b.shape[0]
    total = float(np.vdot(b, b))
    if n <= full_max:
        lam, u = np.linalg.eigh(b)
        order = np.argsort(lam)[::-1]
        return PartialSpectrum(lam[order], u[:, order], total, True, True, 0.0, 0)
    k = min(n - 1, max(START_RANK, min_rank))
    cap = min(n - 1, max(DEFAULT_MAX_RANK if max_rank is None else max_rank, min_rank))
    passes = 0
    while True:
        if start is not None and start.shape[1] >= k:
            # Warm start holding the whole wanted block (bootstrap replicates): a few passes.
            lam, u, res, it = top_eigenpairs(b, k, tol=tol, start=start, seed=seed)
        else:
            lam, u, res, it = _lanczos(b, k, tol, start, seed)
        passes += it
        spec = PartialSpectrum(lam, u, total, False, bool(lam[-1] <= 0), res, passes)
        floor = spec.floor()
        missing = [
            eps
            for eps in tolerances
            if spec.effective_rank(eps) is None and (floor is None or floor <= eps)
        ]
        short = until_below is not None and bool(lam[-1] >= until_below)
        if (not missing and not short) or spec.exhausted or k >= cap:
            return spec
        start, k = u, min(cap, 2 * k)


def smallest_eigenvalue(b: np.ndarray, tol: float = 1e-8, seed: int = 0) -> float:
    """The algebraically smallest eigenvalue of symmetric ``b``, within ``tol * ||b||_F``.

    Lanczos on ``c I - b`` with ``c = ||b||_F`` (>= every eigenvalue): its largest eigenvalue is
    ``c - l_min``, and ARPACK's relative tolerance on that becomes an absolute one on ``l_min``.
    Asking ARPACK for ``which="SA"`` directly applies its relative tolerance to an eigenvalue
    near 0 (every double-centred ``B`` has one), which it missed by 8e-4 in a test.
    """
    n = b.shape[0]
    c = float(np.linalg.norm(b))
    if c == 0.0:
        return 0.0
    v0 = np.random.default_rng(seed).standard_normal(n)
    op = LinearOperator((n, n), matvec=lambda x: c * x - b @ x, dtype=np.float64)
    top = eigsh(op, k=1, which="LA", v0=v0, tol=tol, return_eigenvectors=False)
    return float(c - top[0])
