"""Hellinger geometry of positions, classical MDS and stress measures (docs/geometry.md
sections 2-4), on the ``n_eff`` supported positions, never densifying the ``n x V`` counts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._util.lazy import stats
from .._util.validate import check_float, check_int
from ..errors import PosdiagWarning
from ._gram import sqrt_rows, symmetric_product
from ._square import symmetrize

__all__ = [
    "MDS",
    "Separation",
    "ShiftFit",
    "StressMeasures",
    "classical_mds",
    "mds_of_gram",
    "compare",
    "effective_rank",
    "gram_from_distances",
    "gram_from_vectors",
    "hellinger_distances",
    "mds_coordinates",
    "mds_from_gram",
    "pairwise_distances",
    "parameter_saving",
    "positional_information",
    "reached_rank",
    "significant_negative",
    "stress",
    "separation",
    "shift_equivariance",
    "smoothness",
    "stress_by_rank",
    "stress_floor",
    "supported_prefix",
    "violation_rate",
]

# Relative size below which a negative eigenvalue is rounding noise (docs/geometry.md section 3).
NEGATIVE_EIGENVALUE_TOL = 1e-10


def significant_negative(eigenvalues: np.ndarray) -> float | None:
    """The most negative eigenvalue when it is below ``-1e-10 * l_1`` (docs/geometry.md section 3).

    None when every negative eigenvalue is rounding noise; ``eigenvalues`` descending.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    if lam.size == 0:
        return None
    if lam[-1] < -NEGATIVE_EIGENVALUE_TOL * max(float(lam[0]), 0.0):
        return float(lam[-1])
    return None


def supported_prefix(supports: np.ndarray, min_count: int) -> int:
    """Length ``n_eff`` of the prefix of positions whose support is at least ``min_count``.

    Parameters
    ----------
    supports : ndarray of shape (n_positions,)
        ``N_i``, the number of sequences that have a token at position ``i``.
    min_count : int
        Smallest support a position needs to be analysed.
    """
    below = np.flatnonzero(np.asarray(supports) < min_count)
    return int(below[0]) if below.size else len(supports)


def hellinger_distances(counts: sp.spmatrix | sp.sparray | np.ndarray) -> np.ndarray:
    """Hellinger distances ``sqrt(1 - BC)`` between the rows of a count matrix, ``BC = S S^T`` with
    ``S = sqrt(C / N)`` kept sparse.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
        Non-negative counts; every row must have a positive sum.

    Returns
    -------
    ndarray of shape (n_positions, n_positions)
        Symmetric, zero diagonal, values in [0, 1].
    """
    c = sp.csr_matrix(counts, dtype=np.float64)
    supports = np.asarray(c.sum(axis=1)).ravel()
    if np.any(supports <= 0):
        raise ValueError("every row of the count matrix needs a positive sum")
    s = sqrt_rows(c)
    # Float64: the headline eigenvalues must agree with a dense float64 pipeline to 1e-6.
    d = symmetric_product(s, dtype=np.float64)
    np.subtract(1.0, d, out=d)
    np.clip(d, 0.0, 1.0, out=d)
    np.sqrt(d, out=d)
    np.fill_diagonal(d, 0.0)
    return d


def gram_from_distances(delta: np.ndarray) -> np.ndarray:
    """Torgerson Gram matrix ``B = -1/2 J (delta o delta) J``.

    Parameters
    ----------
    delta : ndarray of shape (n, n)
        A symmetric dissimilarity matrix with zero diagonal.

    Returns
    -------
    ndarray of shape (n, n)
    """
    delta = np.asarray(delta, dtype=np.float64)
    b = delta * delta
    # In place: one n x n array instead of four temporaries.
    col, row, grand = b.mean(axis=0), b.mean(axis=1), b.mean()
    b -= col[None, :]
    b -= row[:, None]
    b += grand
    b *= -0.5
    return symmetrize(b)


def gram_from_vectors(p: np.ndarray) -> np.ndarray:
    """``B = (JP)(JP)^T`` for position vectors ``P`` of shape (n, d); the Gram of distances."""
    p = np.asarray(p, dtype=np.float64)
    jp = p - p.mean(axis=0, keepdims=True)
    return jp @ jp.T


def pairwise_distances(p: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``P`` (n, d), as an (n, n) array."""
    p = np.asarray(p, dtype=np.float64)
    sq = np.einsum("ij,ij->i", p, p)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (p @ p.T)
    d = np.sqrt(np.clip(d2, 0.0, None))
    np.fill_diagonal(d, 0.0)
    return (d + d.T) / 2.0


@dataclass(frozen=True)
class MDS:
    """Classical (Torgerson) MDS of a distance matrix.

    Attributes
    ----------
    eigenvalues : ndarray of shape (n,)
        Eigenvalues of ``B = -1/2 J D^2 J``, descending; may hold rounding-size negatives.
    vectors : ndarray of shape (n, m)
        Matching unit eigenvectors of the top ``m`` eigenvalues (``m = n`` below
        :data:`~posdiag.geometry.spectral.PARTIAL_FROM`), each column's largest entry positive.
    gram : ndarray of shape (n, n)
        ``B`` itself.
    total : float or None
        ``||B||_F^2`` when ``eigenvalues`` holds only the top ``k``, else None.
    bottom : float or None
        The smallest eigenvalue of a partial spectrum (NaN: not computed).
    """

    eigenvalues: np.ndarray
    vectors: np.ndarray
    gram: np.ndarray
    total: float | None = None
    bottom: float | None = None

    @property
    def n(self) -> int:
        return int(self.gram.shape[0])

    @property
    def min_eigenvalue(self) -> float:
        return float(self.eigenvalues[-1]) if self.bottom is None else self.bottom

    def stress_by_rank(self) -> np.ndarray:
        """:func:`stress_by_rank` for the ranks whose eigenvalue is known (all, or ``k``)."""
        return stress_by_rank(self.eigenvalues, total=self.total)

    def coordinates(self, rank: int) -> np.ndarray:
        """Rank-``rank`` MDS encoding ``X_r = U_r diag(sqrt(l_1..l_r))``, of shape (n, rank);
        eigenvectors not kept are computed from ``gram`` (Lanczos)."""
        top = min(self.n - 1, self.eigenvalues.shape[0])
        rank = check_int("rank", rank, 1, top, hi_label="n-1")
        lam = np.clip(self.eigenvalues[:rank], 0.0, None)
        vectors = self.vectors
        if vectors.shape[1] < rank:
            from .spectral import top_vectors

            vectors = _fix_signs(top_vectors(self.gram, rank))
        return mds_coordinates(lam, vectors, rank)


def mds_coordinates(eigenvalues: np.ndarray, vectors: np.ndarray, rank: int) -> np.ndarray:
    """``X_r = U_r diag(sqrt(max(l_k, 0)))`` of the top ``rank`` eigenpairs (``eigenvalues``
    descending, ``vectors`` (n, >= rank) their unit columns); shape (n, rank)."""
    lam = np.clip(np.asarray(eigenvalues)[:rank], 0.0, None)
    return vectors[:, :rank] * np.sqrt(lam)[None, :]


def _fix_signs(u: np.ndarray) -> np.ndarray:
    idx = np.argmax(np.abs(u), axis=0)
    signs = np.sign(u[idx, np.arange(u.shape[1])])
    signs[signs == 0] = 1.0
    return u * signs[None, :]


def classical_mds(distances: np.ndarray) -> MDS:
    """Classical MDS of a symmetric distance matrix (docs/geometry.md section 3).

    Parameters
    ----------
    distances : ndarray of shape (n, n)

    Returns
    -------
    MDS
        Warns with :class:`PosdiagWarning` when the most negative eigenvalue is below
        ``-1e-10 * l_1`` (the configuration is then not exactly Euclidean).
    """
    mds = mds_from_gram(gram_from_distances(distances))
    lam = mds.eigenvalues
    top = float(lam[0]) if lam.size else 0.0
    if significant_negative(lam) is not None:
        warnings.warn(
            f"classical MDS: most negative eigenvalue {lam[-1]:.3e} is below "
            f"-1e-10 * l_1 = {-NEGATIVE_EIGENVALUE_TOL * top:.3e} (l_1 = {top:.3e}); "
            "the distances are not exactly Euclidean",
            PosdiagWarning,
            stacklevel=2,
        )
    return mds


def mds_from_gram(gram: np.ndarray) -> MDS:
    """Eigen-decomposition of a symmetric Gram matrix ``B`` as an :class:`MDS` (no warning: an
    estimated ``B_H`` has negative eigenvalues by design).

    Parameters
    ----------
    gram : ndarray of shape (n, n)
    """
    b = np.asarray(gram, dtype=np.float64)
    lam, u = np.linalg.eigh(b)
    order = np.argsort(lam)[::-1]
    return MDS(eigenvalues=lam[order], vectors=_fix_signs(u[:, order]), gram=b)


def mds_of_gram(
    b: np.ndarray,
    *,
    tolerances: Sequence[float] = (),
    full_max: int | None = None,
    eigvalsh_max: int | None = None,
    bottom: bool = True,
    start_rank: int | None = None,
) -> MDS:
    """Classical MDS of a Gram matrix ``B`` (n, n): every eigenpair, or the top ones at long
    contexts. No warning.

    Up to ``full_max`` positions (default below :data:`~posdiag.geometry.spectral.PARTIAL_FROM`)
    the full ``eigh``; up to ``eigvalsh_max`` (default
    :data:`~posdiag.geometry.spectral.EIGVALSH_MAX` without ``full_max``, else ``full_max``) every
    eigenvalue with the top ``start_rank`` eigenvectors; beyond,
    :func:`~posdiag.geometry.spectral.partial_spectrum` grown for ``tolerances``, with the exact
    ``total`` and the smallest eigenvalue by Lanczos when ``bottom`` (else NaN).
    """
    from .spectral import (
        EIGVALSH_MAX,
        PARTIAL_FROM,
        START_RANK,
        partial_spectrum,
        smallest_eigenvalue,
        top_vectors,
    )

    limit = PARTIAL_FROM - 1 if full_max is None else full_max
    first = START_RANK if start_rank is None else start_rank
    if eigvalsh_max is None:
        eigvalsh_max = EIGVALSH_MAX if full_max is None else limit
    n = b.shape[0]
    if n <= limit:
        return mds_from_gram(b)
    if n <= eigvalsh_max:
        # Every eigenvalue without the vectors (several times cheaper than eigh) keeps the tail,
        # floor and ranks exact; Lanczos resolves the dense bottom cluster of B_H slowly.
        lam = np.linalg.eigvalsh(b)[::-1]
        vectors = _fix_signs(top_vectors(b, min(n - 1, first)))
        return MDS(eigenvalues=lam, vectors=vectors, gram=b)
    # The smallest eigenvalue first, so the top pairs can grow past its magnitude (the signal
    # rank); NaN when not asked for.
    low = smallest_eigenvalue(b) if bottom else math.nan
    spec = partial_spectrum(
        b,
        tolerances,
        full_max=limit,
        until_below=abs(low) if low < 0 else None,
        start_rank=first,
    )
    return MDS(
        eigenvalues=spec.eigenvalues,
        vectors=_fix_signs(spec.vectors),
        gram=b,
        total=spec.total,
        bottom=low,
    )


def stress(b_h: np.ndarray, b_e: np.ndarray) -> float:
    """Scale-fitted stress ``min_{c>=0} ||B_H - c B_E||_F / ||B_H||_F``, in [0, 1].

    ``B_E = 0`` (no positional signal) gives exactly 1.
    """
    nh = float(np.linalg.norm(b_h))
    ne = float(np.linalg.norm(b_e))
    if nh == 0.0:
        raise ValueError("the corpus Gram matrix is zero: all positions are identical")
    if ne == 0.0:
        return 1.0
    cos = max(0.0, float(np.vdot(b_h, b_e))) / (nh * ne)
    return float(np.sqrt(max(0.0, 1.0 - cos * cos)))


def stress_by_rank(eigenvalues: np.ndarray, total: float | None = None) -> np.ndarray:
    """Stress of the rank-r MDS encoding for r = 1..n-1 (Eckart-Young eigenvalue tail).

    ``stress(MDS_r) = sqrt(sum_{k>r} l_k^2 / sum_k l_k^2)``; element ``r-1`` is rank ``r``.
    Negative eigenvalues (an estimated ``B_H``) stay in every tail, so stress levels off at
    :func:`stress_floor` from the last positive rank on.

    Parameters
    ----------
    eigenvalues : ndarray of shape (n,)
        Descending eigenvalues of ``B_H``.

    Returns
    -------
    ndarray of shape (n-1,)
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    sq = lam**2
    if total is not None:
        # A partial spectrum: the tail is total minus the positive squares kept, exactly.
        if total <= 0:
            return np.zeros(sq.size)
        kept = np.cumsum(np.where(lam > 0, sq, 0.0))
        return np.sqrt(np.clip((total - kept) / total, 0.0, 1.0))
    total = sq.sum()
    fitted = np.where(lam > 0, sq, 0.0)
    # tail[r] = sum_{k>=r} sq[k] + (negatives before r); reversed cumsum keeps tiny tails accurate.
    tail = np.cumsum(fitted[::-1])[::-1] + np.sum(sq[lam <= 0])
    return np.sqrt(np.clip(tail[1:] / total, 0.0, 1.0))


def stress_floor(eigenvalues: np.ndarray) -> float:
    """Lowest stress any MDS rank reaches: the share of the negative eigenvalues.

    ``sqrt(sum_{l_k<0} l_k^2 / sum_k l_k^2)``; 0 when there are none.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    total = float(np.sum(lam**2))
    if total == 0.0:
        return 0.0
    return float(np.sqrt(np.sum(lam[lam < 0] ** 2) / total))


def reached_rank(eigenvalues: np.ndarray, eps: float) -> int | None:
    """Smallest rank r with ``stress(MDS_r) <= eps``, or None when no rank reaches it.

    Unlike :func:`effective_rank` there is no fallback to ``n-1``: a tolerance below the
    :func:`stress_floor` is "not reached".
    """
    eps = check_float("eps", eps, 0.0, 1.0)
    hits = np.flatnonzero(stress_by_rank(eigenvalues) <= eps)
    return int(hits[0] + 1) if hits.size else None


def effective_rank(eigenvalues: np.ndarray, eps: float) -> int:
    """Smallest rank r with ``stress(MDS_r) <= eps``, else ``n-1``."""
    rank = reached_rank(eigenvalues, eps)
    return len(stress_by_rank(eigenvalues)) if rank is None else rank


@dataclass(frozen=True)
class StressMeasures:
    """The four measures of docs/geometry.md section 4 for one encoding.

    ``spearman`` is NaN when either set of distances is constant (e.g. ``nope``).
    """

    stress: float
    raw: float
    kruskal: float
    spearman: float


def compare(
    d_h: np.ndarray, b_h: np.ndarray, delta_e: np.ndarray, b_e: np.ndarray
) -> StressMeasures:
    """All measures of an encoding against the corpus geometry.

    Parameters
    ----------
    d_h, b_h : ndarray of shape (n, n)
        Corpus Hellinger distances and their Gram matrix.
    delta_e, b_e : ndarray of shape (n, n)
        The encoding's dissimilarities and their Gram matrix.
    """
    nh = float(np.linalg.norm(b_h))
    raw = float(np.linalg.norm(b_h - b_e)) / nh
    iu = np.triu_indices(d_h.shape[0], k=1)
    dh, de = d_h[iu], delta_e[iu]
    denom = float(de @ de)
    c = float(dh @ de) / denom if denom > 0 else 0.0
    total = float(np.sum(dh * dh))
    # All distances 0 happens with a cross-fitted estimate on a thin corpus (clipped at 0).
    kruskal = float(np.sqrt(np.sum((dh - c * de) ** 2) / total)) if total > 0 else float("nan")
    if np.ptp(dh) == 0 or np.ptp(de) == 0:
        rho = float("nan")
    else:
        rho = float(stats.spearmanr(dh, de).statistic)
    return StressMeasures(stress=stress(b_h, b_e), raw=raw, kruskal=kruskal, spearman=rho)


def positional_information(
    counts: sp.spmatrix | sp.sparray | np.ndarray,
) -> tuple[float, np.ndarray]:
    """Mutual information ``I(position; token)`` in bits (docs/geometry.md section 8).

    ``I = sum_i (N_i/N) KL(mu_i || mu_bar)`` with ``mu_bar`` the pooled distribution.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
        Rows with zero support are ignored.

    Returns
    -------
    (float, ndarray of shape (n_positions,))
        The total in bits, and each position's ``KL(mu_i || mu_bar)`` in bits (0 where
        ``N_i = 0``).
    """
    c = sp.csr_matrix(counts, dtype=np.float64)
    supports = np.asarray(c.sum(axis=1)).ravel()
    total = supports.sum()
    if total <= 0:
        raise ValueError("the count matrix is empty")
    pooled = np.asarray(c.sum(axis=0)).ravel() / total
    coo = c.tocoo()
    mu = coo.data / supports[coo.row]
    # Every stored entry has count > 0, so mu > 0 and pooled > 0 there: no 0 log 0 cases.
    terms = mu * np.log2(mu / pooled[coo.col])
    kl = np.bincount(coo.row, weights=terms, minlength=c.shape[0])
    kl = np.clip(kl, 0.0, None)
    return float(np.sum(supports / total * kl)), kl


def _upper(m: np.ndarray) -> np.ndarray:
    """The entries ``m[i, j]``, ``i < j``, in row-major order."""
    return np.asarray(m)[np.triu_indices(np.asarray(m).shape[0], k=1)]


@dataclass(frozen=True)
class ShiftFit:
    """How well a function of ``|i - j|`` alone reproduces a distance matrix.

    Attributes
    ----------
    r2 : float
        ``1 - SS_res / SS_tot`` over pairs ``i < j``; 1 for a Toeplitz matrix. NaN when all
        distances are equal (nothing to explain).
    profile : ndarray of shape (n-1,)
        ``g(lag)``, the least-squares fit: the mean distance at each lag ``1..n-1``.
    """

    r2: float
    profile: np.ndarray


def shift_equivariance(distances: np.ndarray) -> ShiftFit:
    """Best approximation of ``D`` by a function of ``|i - j|`` (docs/geometry.md section 8).

    The least-squares ``g`` averages ``D`` along each diagonal; ``R^2`` compares its residual with
    the spread of all distances, pairs ``i < j``.

    Parameters
    ----------
    distances : ndarray of shape (n, n), n >= 2
    """
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    profile = np.array([np.diagonal(d, lag).mean() for lag in range(1, n)])
    iu = np.triu_indices(n, k=1)
    values = d[iu]
    fitted = profile[iu[1] - iu[0] - 1]
    ss_tot = float(np.sum((values - values.mean()) ** 2))
    ss_res = float(np.sum((values - fitted) ** 2))
    # Relative tolerance: a Toeplitz matrix leaves only rounding in ss_res.
    if ss_tot <= 1e-24 * max(1.0, float(np.sum(values**2))):
        return ShiftFit(float("nan"), profile)
    return ShiftFit(1.0 - ss_res / ss_tot, profile)


def smoothness(distances: np.ndarray) -> float:
    """Mean distance of neighbouring positions ``(i, i+1)`` over the mean of all pairs ``i < j``.

    Well below 1: a smooth drift; near 1: neighbours as far apart as any two positions. NaN
    when every distance is 0.
    """
    d = np.asarray(distances, dtype=np.float64)
    all_mean = float(_upper(d).mean())
    if all_mean == 0.0:
        return float("nan")
    return float(np.diagonal(d, 1).mean()) / all_mean


def violation_rate(d_h: np.ndarray, delta: np.ndarray) -> float:
    """Monotonicity violation rate ``(1 - tau) / 2`` over ``i < j`` (docs/geometry.md section 8).

    ``tau`` is Kendall's tau-b of ``{d_H(i, j)}`` against ``{delta(i, j)}`` (the fraction of
    pairs of pairs ordered differently, without ties). NaN when either set is constant.

    Parameters
    ----------
    d_h, delta : ndarray of shape (n, n)
    """
    a, b = _upper(d_h), _upper(delta)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    tau = float(stats.kendalltau(a, b).statistic)
    return (1.0 - tau) / 2.0


@dataclass(frozen=True)
class Separation:
    """How well an encoding table keeps positions apart (Positional Separation Theorem).

    Attributes
    ----------
    min_distance, median_distance : float
        Smallest and median ``||p_i - p_j||`` over ``i < j``.
    ratio : float
        ``min_distance / median_distance`` (0: two positions coincide; NaN if the median is 0).
    collapsed : tuple of (int, int, float)
        Pairs ``(i, j, distance)`` with ``distance <= tol * median``, closest first.
    tol : float
        The relative threshold used for ``collapsed``.
    """

    min_distance: float
    median_distance: float
    ratio: float
    collapsed: tuple[tuple[int, int, float], ...]
    tol: float


def separation(p: np.ndarray, tol: float = 0.01) -> Separation:
    """Separation of the rows of ``P`` (n, d), n >= 2; pairs within ``tol * median`` collapse."""
    tol = check_float("tol", tol, 0.0)
    d = pairwise_distances(p)
    iu = np.triu_indices(d.shape[0], k=1)
    values = d[iu]
    med = float(np.median(values))
    lo = float(values.min())
    hit = np.flatnonzero(values <= tol * med)
    hit = hit[np.argsort(values[hit], kind="stable")]
    pairs = tuple((int(iu[0][k]), int(iu[1][k]), float(values[k])) for k in hit)
    ratio = lo / med if med > 0 else float("nan")
    return Separation(lo, med, ratio, pairs, tol)


def parameter_saving(rank: int, n: int, d: int) -> float:
    """Fraction of parameters ``1 - r(n+d) / (n d)`` the rank-r factorisation saves (Remark 8)."""
    return 1.0 - rank * (n + d) / (n * d)
