"""Only the eigen-information a report needs, at long contexts.

The stress of the rank-r MDS encoding is ``sqrt(sum_{k>r} l_k^2 / ||B||_F^2)``, so the tail after
the top ``K`` eigenvalues is ``||B||_F^2 - sum_{k<=K} l_k^2`` exactly and a report needs only the
top eigenpairs: the full ``eigh`` below :data:`PARTIAL_FROM`, else block Lanczos with full
reorthogonalisation (:class:`_BlockLanczos`, one BLAS-3 pass ``Q B`` per block of :data:`BLOCK`
vectors), whose basis only grows as the pairs grow (16, 32, 64, ...) until every requested
tolerance is reached, shown unreachable (the positive eigenvalues are exhausted: the tail is the
stress floor) or ``max_rank`` is hit. Bootstrap replicates use block subspace iteration
warm-started from the previous eigenvectors (:func:`top_eigenpairs`).

Every returned Ritz pair has residual ``||B u - theta u|| <= tol * ||B||_F``, so each eigenvalue
and each stress-by-rank value (relative to 1) is within ``tol`` (default 1e-7) of the truth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, eigsh

from .._util.threads import one_blas_thread
from .._util.validate import check_int

__all__ = [
    "EIGVALSH_MAX",
    "GramOperator",
    "PARTIAL_FROM",
    "PartialSpectrum",
    "operator_spectrum",
    "partial_spectrum",
    "smallest_eigenvalue",
    "top_eigenpairs",
    "top_pairs",
    "top_vectors",
]

# From this n no full eigh: fits that use only their top eigenpairs (held-out mds-r, bootstrap
# replicates) compute only those by block Lanczos, the headline every eigenvalue without vectors
# (docs/performance.md).
PARTIAL_FROM = 512
# Up to this n the headline computes every eigenvalue (eigvalsh, growing as n^3), beyond it only
# the top ones: the bottom of an estimated B_H is a dense cluster that Lanczos resolves slowly.
EIGVALSH_MAX = 2048
# Eigenpairs computed at first (the default set needs mds-1..3; tolerances often need more).
START_RANK = 16
# Growth stops here: past ~100 pairs a partial solver on a slowly decaying (noise) spectrum costs
# more than it saves; effective ranks beyond are reported as "> k".
DEFAULT_MAX_RANK = 128
DEFAULT_TOL = 1e-7
# Eigenvectors used as coordinates err by the residual over the eigengap: converge them further.
VECTOR_TOL = 1e-10
# Vectors per block: a pass B Q reads B once whatever the block (benchmarks/NOTES.md).
BLOCK = 32
# Passes at most (a guard against a pathological cluster); what was reached is returned.
MAX_PASSES = 1000


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

    BLAS-3 products instead of Householder QR, which stays the fallback for a singular Gram.
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


def _lower_inverse(g: np.ndarray) -> np.ndarray:
    """Inverse of a small lower-triangular matrix (LAPACK ``trtri``)."""
    inverse, info = scipy.linalg.lapack.dtrtri(g, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular triangular factor")
    return np.asarray(inverse)


def _next_block(
    r: np.ndarray, basis: np.ndarray, size: int, scale: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal rows ``q`` (size, n), orthogonal to ``basis``, whose span holds the rows of
    ``r`` (j, n), and ``c`` (size, j) with ``r = c^T q`` up to ``1e-13 scale``.

    Cholesky QR twice when every singular value of ``r`` exceeds ``1e-6 scale``; otherwise
    (an invariant subspace, low rank, or a basis about to span everything) the SVD directions
    of ``r`` above ``1e-13 scale``, completed by random rows orthogonal to ``basis``.
    """
    j = r.shape[0]
    if size == j:
        try:
            g1 = np.linalg.cholesky(r @ r.T)
            # Its singular values are r's (resolved to ~1e-8 of the largest).
            if float(scipy.linalg.svdvals(g1)[-1]) > 1e-6 * scale:
                # Triangular inverses times r: a GEMM each, cheaper than solve_triangular.
                q = _lower_inverse(g1) @ r
                g2 = np.linalg.cholesky(q @ q.T)
                q = _lower_inverse(g2) @ q
                return q, (g1 @ g2).T
        except np.linalg.LinAlgError:
            pass
    _, sv, rows = np.linalg.svd(r, full_matrices=False)
    keep = min(size, int(np.sum(sv > 1e-13 * scale)))
    q = rng.standard_normal((size, r.shape[1]))
    q[:keep] = rows[:keep]
    for _ in range(2):
        q -= (q @ basis.T) @ basis
    # Householder QR keeps the span of the leading rows, r's directions, in order.
    q = np.ascontiguousarray(np.linalg.qr(q.T)[0].T)
    return q, q @ r.T


class _BlockLanczos:
    """Block Lanczos with full reorthogonalisation and thick restarts.

    The basis is kept as rows ``v`` (m, n) with their images ``w = v B``; the projection
    ``h = v B v^T`` is computed explicitly, so Rayleigh-Ritz is exact for the basis held. The
    newest block's residual is ``r = c^T q`` along the next block ``q`` (the Krylov property), so a
    Ritz pair's residual is ``||c s_last||`` without touching ``B``. Past ``max_basis`` rows it
    restarts from its best Ritz vectors. Memory: ``v`` and ``w``, each ``max_basis x n`` float64.
    """

    def __init__(
        self,
        b: np.ndarray,
        block: int,
        max_basis: int,
        start: np.ndarray | None = None,
        seed: int = 0,
        fro: float | None = None,
    ) -> None:
        n = b.shape[0]
        self.b = b
        self.fro = float(np.linalg.norm(b)) if fro is None else fro
        self.scale = self.fro if self.fro > 0 else 1.0
        self.rng = np.random.default_rng(seed)
        # Every block has the first one's size: the next must span the newest one's residual.
        first = min(n, max(block, 1, 0 if start is None else start.shape[1]))
        self.block = first
        self.max_basis = min(n, max(max_basis, 3 * first))
        q = self.rng.standard_normal((first, n))
        if start is not None:
            q[: start.shape[1]] = start[:, :first].T
        self.v = np.empty((self.max_basis, n))
        self.w = np.empty((self.max_basis, n))
        self.h = np.zeros((self.max_basis, self.max_basis))
        self.m = 0
        self.last = 0  # rows of the newest block in the basis
        self.q, self.c = _next_block(q, self.v[:0], first, self.scale, self.rng)
        self.passes = 0
        self.columns = 0  # vectors multiplied by B in all (restarts do not reset it)
        self.keep = 0  # Ritz vectors a restart keeps at least (the pairs wanted)
        self.theta = np.zeros(0)
        self.s = np.zeros((0, 0))
        self.estimate = np.zeros(0)

    @property
    def full(self) -> bool:
        """True when the next block does not fit: the next step restarts."""
        return self.m + self.q.shape[0] > self.max_basis

    @property
    def spanned(self) -> bool:
        """True when the basis spans everything (Rayleigh-Ritz is then exact)."""
        return self.q.shape[0] == 0

    def step(self) -> None:
        """One pass over ``B`` (the newest block times ``B``) and the next block."""
        if self.spanned:
            return
        if self.full:
            self._restart()
        q, m = self.q, self.m
        j = q.shape[0]
        # B q^T (B symmetric): one pass over B, all BLAS threads.
        z = np.ascontiguousarray((self.b @ q.T).T)
        self.passes += 1
        self.columns += j
        # Everything else one thread (the skinny products contend with two).
        with one_blas_thread():
            self.v[m : m + j] = q
            self.w[m : m + j] = z
            basis = self.v[: m + j]
            # Gram-Schmidt twice: against the newest two blocks (the Lanczos recurrence), then
            # the whole basis; the projection column v z^T is the sum of both coefficient sets.
            lo = max(0, m - self.last)
            local = basis[lo:]
            coef = z @ local.T
            r = z - coef @ local
            again = r @ basis.T
            r -= again @ basis
            again[:, lo:] += coef
            self.h[: m + j, m : m + j] = again.T
            self.h[m : m + j, :m] = again[:, :m]
            self.last = j
            self.m = m + j
            size = min(self.block, self.b.shape[0] - self.m)
            if size > 0:
                self.q, self.c = _next_block(r, basis, size, self.scale, self.rng)
            else:
                self.q, self.c = np.zeros((0, self.b.shape[0])), np.zeros((0, j))

    def _restart(self) -> None:
        """Keep the best Ritz vectors: half the free room past the pairs wanted."""
        self.ritz()
        with one_blas_thread():
            self._shrink()

    def _shrink(self) -> None:
        room = self.max_basis - self.q.shape[0]
        keep = min(room, self.keep + max(0, room - self.keep) // 2)
        s = self.s[:, :keep]
        m = self.m
        self.v[:keep] = s.T @ self.v[:m]
        self.w[:keep] = s.T @ self.w[:m]
        self.h[:keep, :keep] = np.diag(self.theta[:keep])
        j = self.c.shape[1]
        self.c = self.c @ self.s[m - j : m, :keep]
        self.m = keep
        self.last = keep  # every kept vector's image has a part along the next block

    def ritz(self) -> None:
        """Ritz values (descending), their coefficients and residual estimates / ``||B||_F``."""
        m = self.m
        h = self.h[:m, :m]
        with one_blas_thread():
            theta, s = np.linalg.eigh((h + h.T) / 2.0)
        self.theta, self.s = theta[::-1], s[:, ::-1]
        j = self.c.shape[1]
        self.estimate = np.linalg.norm(self.c @ self.s[m - j : m], axis=0) / self.scale

    def converged(self, tol: float) -> int:
        """Leading Ritz pairs whose estimated residual is within ``tol`` (after :meth:`ritz`)."""
        bad = np.flatnonzero(self.estimate > tol)
        return int(bad[0]) if bad.size else int(self.estimate.size)

    def pairs(self, k: int) -> tuple[np.ndarray, np.ndarray, float]:
        """The top ``k`` Ritz pairs (after :meth:`ritz`): values, vectors (n, k) and their largest
        relative residual ``||B u - theta u|| / ||B||_F``, computed from the stored images."""
        s = np.ascontiguousarray(self.s[:, :k].T)
        u = s @ self.v[: self.m]
        bu = s @ self.w[: self.m]
        bu -= u * self.theta[:k, None]
        worst = float(np.linalg.norm(bu, axis=1).max()) / self.scale if k else 0.0
        return self.theta[:k].copy(), np.ascontiguousarray(u.T), worst


def _basis_limit(n: int, k: int, block: int) -> int:
    """Rows of the Krylov basis before a restart: 4 per pair wanted plus 8 blocks, at least 24
    blocks (the default blocks converge on B_H without a restart)."""
    return min(n, max(4 * k + 8 * block, 24 * block))


class _Schedule:
    """When to do the next Rayleigh-Ritz check (an ``eigh`` costing the basis size cubed):
    70% of the way the worst residual's geometric decay over the last two checks predicts, at
    most half the vectors so far ahead."""

    def __init__(self, block: int) -> None:
        self.block = block
        self.last: tuple[int, float] | None = None

    def reset(self) -> None:
        self.last = None

    def next(self, m: int, worst: float, tol: float) -> int:
        gap = self.block
        if self.last is not None and 0 < worst < self.last[1] and m > self.last[0]:
            rate = (np.log(self.last[1]) - np.log(worst)) / (m - self.last[0])
            gap = max(gap, min(int(0.7 * np.log(worst / tol) / rate), m // 2))
        self.last = (m, worst)
        return m + gap


def _solve(
    b: np.ndarray,
    k: int,
    cap: int,
    tol: float,
    finished: Callable[[PartialSpectrum], bool],
    *,
    total: float,
    block: int = BLOCK,
    start: np.ndarray | None = None,
    seed: int = 0,
    max_passes: int = MAX_PASSES,
) -> PartialSpectrum:
    """The top ``k`` pairs, then ``2k``, ... (at most ``cap``) of one growing Krylov basis, until
    ``finished`` accepts them (it sees eigenvalues only); every returned residual is within
    ``tol * ||b||_F`` unless the basis spans everything or ``max_passes`` ran out.
    """
    n = b.shape[0]
    limit = _basis_limit(n, cap, block)
    solver = _BlockLanczos(b, block, limit, start, seed, fro=float(np.sqrt(total)))
    schedule = _Schedule(solver.block)
    check_at = k
    while True:
        solver.keep = k
        solver.step()
        final = solver.spanned or solver.passes >= max_passes
        # Check when scheduled, and before a restart would discard the basis.
        if solver.columns < check_at and not final and not solver.full:
            continue
        solver.ritz()
        while solver.converged(tol) >= k or final:
            lam = solver.theta[:k]
            sketch = PartialSpectrum(
                lam, np.broadcast_to(0.0, (n, k)), total, False, bool(lam[-1] <= 0), tol, 0
            )
            if k < cap and not finished(sketch):
                k = min(cap, 2 * k)
                solver.keep = k
                schedule.reset()
                continue
            lam, u, res = solver.pairs(k)
            if res <= tol or final:
                return PartialSpectrum(lam, u, total, False, bool(lam[-1] <= 0), res, solver.passes)
            break  # the estimate was optimistic (rounding): iterate on
        check_at = max(k, schedule.next(solver.columns, float(solver.estimate[:k].max()), tol))


def top_pairs(
    b: np.ndarray,
    k: int,
    *,
    tol: float = VECTOR_TOL,
    start: np.ndarray | None = None,
    seed: int = 0,
    block: int = BLOCK,
) -> PartialSpectrum:
    """The ``k`` largest eigenpairs of symmetric ``b``: block Lanczos with every residual within
    ``tol * ||b||_F``, or the full ``eigh`` when ``n <= 2k + 1``.

    Parameters
    ----------
    b : ndarray of shape (n, n)
    k : int
        Pairs wanted, ``1 <= k <= n - 1``.
    start : ndarray of shape (n, m), optional
        Warm start: the first block of the Krylov basis, completed with seeded noise.

    Returns
    -------
    PartialSpectrum
        Exactly ``k`` pairs (``complete`` is False), with ``total = ||b||_F^2``.
    """
    b = np.asarray(b, dtype=np.float64)
    n = b.shape[0]
    k = check_int("k", k, 1, n - 1)
    total = float(np.vdot(b, b))
    if n <= 2 * k + 1:
        lam, u = np.linalg.eigh(b)
        order = np.argsort(lam)[::-1][:k]
        lam, u = lam[order], np.ascontiguousarray(u[:, order])
        return PartialSpectrum(lam, u, total, False, bool(lam[-1] <= 0), 0.0, 0)
    return _solve(b, k, k, tol, lambda _: True, total=total, block=block, start=start, seed=seed)


def top_vectors(b: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """The unit eigenvectors of the ``k`` largest eigenvalues of symmetric ``b``
    (:func:`top_pairs`), columns in descending order of eigenvalue; shape (n, k)."""
    return top_pairs(b, k, seed=seed).vectors


def _settled(spec: PartialSpectrum, tolerances: Sequence[float]) -> bool:
    """Whether every tolerance's effective rank is reached by the computed pairs, or shown
    unreachable (the floor of the computed tail is above it)."""
    floor = spec.floor()
    return all(
        spec.effective_rank(eps) is not None or (floor is not None and floor > eps)
        for eps in tolerances
    )


def partial_spectrum(
    b: np.ndarray,
    tolerances: Sequence[float] = (),
    *,
    min_rank: int = 3,
    max_rank: int | None = None,
    tol: float = DEFAULT_TOL,
    start: np.ndarray | None = None,
    full_max: int = PARTIAL_FROM - 1,
    seed: int = 0,
    until_below: float | None = None,
    start_rank: int = START_RANK,
) -> PartialSpectrum:
    """Top eigenpairs of ``b``, grown (16, 32, 64, ... pairs of one Krylov basis) until every stress
    tolerance is reached or unreachable.

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
    tol : float
        Every returned pair has ``||b u - theta u|| <= tol * ||b||_F``.
    start : ndarray of shape (n, m), optional
        Warm start vectors (the first block of the Krylov basis).
    full_max : int
        Up to this ``n`` the full ``eigh`` is used.
    until_below : float, optional
        Also grow until the smallest computed eigenvalue is below this value.
    start_rank : int
        Eigenpairs computed at first (:data:`START_RANK`).
    """
    b = np.asarray(b, dtype=np.float64)
    n = b.shape[0]
    total = float(np.vdot(b, b))
    if n <= full_max:
        lam, u = np.linalg.eigh(b)
        order = np.argsort(lam)[::-1]
        return PartialSpectrum(lam[order], u[:, order], total, True, True, 0.0, 0)
    k = min(n - 1, max(start_rank, min_rank))
    cap = min(n - 1, max(DEFAULT_MAX_RANK if max_rank is None else max_rank, min_rank))

    def finished(spec: PartialSpectrum) -> bool:
        short = until_below is not None and float(spec.eigenvalues[-1]) >= until_below
        return (_settled(spec, tolerances) and not short) or spec.exhausted

    return _solve(b, k, cap, tol, finished, total=total, start=start, seed=seed)


def smallest_eigenvalue(b: np.ndarray, tol: float = 1e-8, seed: int = 0) -> float:
    """The algebraically smallest eigenvalue of symmetric ``b``, within ``tol * ||b||_F``.

    Lanczos on ``c I - b`` with ``c = ||b||_F``: its largest eigenvalue is ``c - l_min``, so
    ARPACK's relative tolerance becomes an absolute one on ``l_min`` (``which="SA"`` applies it
    to an eigenvalue near 0, which every double-centred ``B`` has).
    """
    n = b.shape[0]
    c = float(np.linalg.norm(b))
    if c == 0.0:
        return 0.0
    v0 = np.random.default_rng(seed).standard_normal(n)
    op = LinearOperator((n, n), matvec=lambda x: c * x - b @ x, dtype=np.float64)
    top = eigsh(op, k=1, which="LA", v0=v0, tol=tol, return_eigenvectors=False)
    return float(c - top[0])


class GramOperator:
    """A symmetric ``n x n`` matrix known only by its products, for the partial solver.

    ``op @ x`` for ``x`` of shape (n, k) returns ``B x`` (n, k).
    """

    def __init__(self, n: int, matmat: Callable[[np.ndarray], np.ndarray]) -> None:
        self.shape = (n, n)
        self._matmat = matmat

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        return self._matmat(np.ascontiguousarray(x, dtype=np.float64))


def operator_spectrum(
    op: GramOperator,
    total: float,
    tolerances: Sequence[float] = (),
    *,
    min_rank: int = 3,
    max_rank: int | None = None,
    tol: float = DEFAULT_TOL,
    seed: int = 0,
) -> PartialSpectrum:
    """:func:`partial_spectrum` of a matrix given as an operator (one product ``B Q`` a pass).

    Parameters
    ----------
    op : GramOperator
        ``B`` (n, n), symmetric, by its products.
    total : float
        ``||B||_F^2`` (exact or an estimate: it scales the residual tolerance and the tail).
    """
    n = op.shape[0]
    k = min(n - 1, max(START_RANK, min_rank))
    cap = min(n - 1, max(DEFAULT_MAX_RANK if max_rank is None else max_rank, min_rank))

    def finished(spec: PartialSpectrum) -> bool:
        return _settled(spec, tolerances) or spec.exhausted

    return _solve(op, k, cap, tol, finished, total=total, seed=seed)  # type: ignore[arg-type]
