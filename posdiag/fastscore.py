"""Encoding scores without an ``n x n`` matrix per encoding (issue 13).

Every measure of :func:`posdiag.geometry.compare` is an inner product or a rank correlation
between the corpus side (``B_H``, ``d_H``) and the encoding side (``B_E``, ``delta_E``). The
corpus side is summarised once (:func:`corpus_side`, ``O(n^2)``); then

- a Toeplitz encoding (``delta_E(i, j) = g(|i - j|)``: sinusoidal, RoPE, ALiBi, T5, ...) is scored
  in ``O(n log n)`` from its lag profile ``g`` alone: ``<B_H, B_E> = -1/2 <B_H, G>`` with
  ``G = [g(|i-j|)^2]`` because ``B_H`` is double-centred, and ``<B_H, G>`` is a sum over
  diagonals; ``||J G J||_F^2 = ||G||^2 - 2/n ||G 1||^2 + (1^T G 1)^2 / n^2`` with ``G 1`` from
  prefix sums; Kruskal's stress uses the diagonal sums of ``d_H``; Spearman's rho ranks ``d_H``
  once and the ``n - 1`` distinct lags of ``g`` (average ranks for ties, as
  ``scipy.stats.spearmanr``);
- an encoding given by position vectors ``P`` (learned tables, MDS) uses ``B_E = (JP)(JP)^T``:
  ``<B_H, B_E> = sum((B_H JP) o JP)`` and ``||B_E||_F = ||(JP)^T JP||_F``; its distances are
  formed blockwise for Kruskal and Spearman only.

Results equal :func:`~posdiag.geometry.compare` to rounding (tests/test_fastscore.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .encodings import Encoding
from .geometry import StressMeasures, compare

__all__ = [
    "CorpusSide",
    "GramScorer",
    "corpus_side",
    "average_ranks",
    "diagonal_sums",
    "score_encoding",
    "score_profile",
    "score_vectors",
    "upper_distances",
]


def diagonal_sums(m: np.ndarray) -> np.ndarray:
    """``s[l] = sum_i m[i, i + l]`` for ``l = 0..n-1`` (upper diagonals), of shape (n,).

    Walks rows (contiguous memory) instead of diagonals (a stride of ``n + 1``).
    """
    n = m.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[: n - i] += m[i, i:]
    return out


def _spread(x: np.ndarray) -> float:
    return float(np.ptp(x)) if x.size else 0.0


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..m with ties averaged (``scipy.stats.rankdata(x)``), with one argsort and about
    half of rankdata's temporaries."""
    m = x.size
    if m == 0:
        return np.zeros(0)
    # Any sort order will do: tied values share their average rank whatever their order, and
    # numpy's default (vectorised) sort is several times faster than the stable one on the
    # n^2/2 pairs of long contexts.
    order = np.argsort(x)
    xs = x[order]
    new = np.empty(m, dtype=bool)
    new[0] = True
    np.not_equal(xs[1:], xs[:-1], out=new[1:])
    del xs
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], m)
    avg = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    out = np.empty(m)
    out[order] = np.repeat(avg, ends - starts)
    return out


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two vectors of shape (m,) with nonzero spread
    (``scipy.stats.pearsonr(x, y).statistic``, without importing ``scipy.stats``)."""
    xc = x - x.mean()
    yc = y - y.mean()
    r = float(xc @ yc) / math.sqrt(float(xc @ xc) * float(yc @ yc))
    # Rounding can carry |r| a few ulps past 1, as pearsonr also clips.
    return max(-1.0, min(1.0, r))


def _upper_segments(n: int) -> np.ndarray:
    """Start of row ``i``'s entries ``(i, i+1..n-1)`` in the row-major upper triangle."""
    lengths = np.arange(n - 1, -1, -1)
    return np.concatenate(([0], np.cumsum(lengths)))


def _lag_sums_of_upper(values: np.ndarray, n: int) -> np.ndarray:
    """``s[l] = sum_i values(i, i+l)``, l = 1..n-1, for row-major upper-triangle ``values``."""
    start = _upper_segments(n)
    out = np.zeros(n)
    for i in range(n - 1):
        out[1 : n - i] += values[start[i] : start[i + 1]]
    return out


def upper_distances(p: np.ndarray, block_rows: int = 512) -> np.ndarray:
    """Euclidean distances ``||p_i - p_j||``, ``i < j``, row-major, shape (n(n-1)/2,).

    Uses the Gram expansion with BLAS, one block of rows at a time, so no ``n x n`` array
    exists; the result equals ``scipy.spatial.distance.pdist`` to ~1e-7 relative on distances
    that are not tiny against the vectors' norms.
    """
    p = np.asarray(p, dtype=np.float64)
    n = p.shape[0]
    sq = np.einsum("ij,ij->i", p, p)
    start = _upper_segments(n)
    out = np.empty(int(start[-1]))
    for lo in range(0, n, block_rows):
        hi = min(n, lo + block_rows)
        d2 = sq[lo:hi, None] + sq[None, :] - 2.0 * (p[lo:hi] @ p.T)
        d = np.sqrt(np.clip(d2, 0.0, None))
        for i in range(lo, hi):
            out[start[i] : start[i + 1]] = d[i - lo, i + 1 :]
    return out


@dataclass(frozen=True)
class CorpusSide:
    """What every encoding's score needs from the corpus geometry, computed once.

    Attributes
    ----------
    n : int
    b_norm : float
        ``||B_H||_F``.
    b_lags : ndarray of shape (n,)
        Diagonal sums of ``B_H``: ``sum_i B_H[i, i+l]``.
    d_lags : ndarray of shape (n,)
        Diagonal sums of ``d_H`` (lag 0 is 0).
    d_sq : float
        ``sum_{i<j} d_H(i, j)^2``.
    d_upper : ndarray of shape (n(n-1)/2,)
        ``d_H(i, j)``, ``i < j``, row-major (for encodings given by vectors).
    d_ranks : ndarray of shape (n(n-1)/2,)
        Average ranks of ``d_H(i, j)``, ``i < j``, row-major (needed for non-Toeplitz rho).
    rank_lags : ndarray of shape (n,)
        Diagonal sums of those ranks.
    rank_ss : float
        ``sum (rank - mean)^2``; 0 when ``d_H`` is constant.
    """

    n: int
    b_norm: float
    b_lags: np.ndarray
    d_lags: np.ndarray
    d_sq: float
    d_upper: np.ndarray
    d_ranks: np.ndarray
    rank_lags: np.ndarray
    rank_ss: float


def corpus_side(d_h: np.ndarray, b_h: np.ndarray) -> CorpusSide:
    """Summarise the corpus geometry for :func:`score_profile` and :func:`score_vectors`.

    Parameters
    ----------
    d_h : ndarray of shape (n, n)
        Corpus distances (symmetric).
    b_h : ndarray of shape (n, n)
        Their Gram matrix; must be double-centred (rows and columns sum to 0).
    """
    n = d_h.shape[0]
    start = _upper_segments(n)
    # Row by row: np.triu_indices would hold two int64 index arrays of n^2/2 (2 GB at 16k).
    dh = np.empty(int(start[-1]))
    for i in range(n - 1):
        dh[start[i] : start[i + 1]] = d_h[i, i + 1 :]
    ranks = average_ranks(dh)
    mean = (dh.size + 1) / 2.0
    return CorpusSide(
        n=n,
        b_norm=float(np.linalg.norm(b_h)),
        b_lags=diagonal_sums(b_h),
        d_lags=_lag_sums_of_upper(dh, n),
        d_sq=float(dh @ dh),
        d_upper=dh,
        d_ranks=ranks,
        rank_lags=_lag_sums_of_upper(ranks, n),
        rank_ss=float(np.sum((ranks - mean) ** 2)) if _spread(dh) > 0 else 0.0,
    )


def _stress_from(inner: float, nh: float, ne: float) -> tuple[float, float]:
    """(stress, raw) from ``<B_H, B_E>``, ``||B_H||`` and ``||B_E||``."""
    raw = float(np.sqrt(max(0.0, nh * nh - 2.0 * inner + ne * ne))) / nh
    if ne == 0.0:
        return 1.0, raw
    cos = max(0.0, inner) / (nh * ne)
    return float(np.sqrt(max(0.0, 1.0 - cos * cos))), raw


def _kruskal(side: CorpusSide, s_he: float, s_ee: float) -> float:
    if side.d_sq == 0.0:
        return float("nan")  # every corpus distance is 0, as compare() says
    c = s_he / s_ee if s_ee > 0 else 0.0
    resid = side.d_sq - 2.0 * c * s_he + c * c * s_ee
    return float(np.sqrt(max(0.0, resid) / side.d_sq))


def _lag_average_ranks(g: np.ndarray, n: int) -> np.ndarray:
    """Average rank of each lag's value among all pairs ``i < j`` (lag 1..n-1; index 0 unused)."""
    lags = np.arange(1, n)
    values = g[1:]
    counts = (n - lags).astype(np.float64)
    order = np.argsort(values, kind="stable")
    v_sorted, c_sorted = values[order], counts[order]
    # Group equal values; each group gets the mean of the ranks it spans.
    new = np.concatenate(([True], v_sorted[1:] != v_sorted[:-1]))
    group = np.cumsum(new) - 1
    group_count = np.bincount(group, weights=c_sorted)
    group_end = np.cumsum(group_count)
    group_rank = group_end - (group_count - 1.0) / 2.0
    out = np.zeros(n)
    out[lags[order]] = group_rank[group]
    return out


def score_profile(side: CorpusSide, g: np.ndarray) -> StressMeasures:
    """All measures of a Toeplitz encoding ``delta_E(i, j) = g[|i - j|]`` (``g[0] = 0``).

    Parameters
    ----------
    side : CorpusSide
    g : ndarray of shape (n,)
        The lag profile.
    """
    n = side.n
    g = np.asarray(g, dtype=np.float64)
    g2 = g * g
    lags = np.arange(n)
    mult = np.where(lags == 0, 1.0, 2.0)  # each off-diagonal lag appears twice
    inner = -0.5 * float(np.sum(mult * g2 * side.b_lags))
    count = np.where(lags == 0, n, 2 * (n - lags)).astype(np.float64)
    g_norm2 = float(np.sum(count * g2 * g2))
    prefix = np.cumsum(g2)
    rows = prefix + prefix[::-1] - g2[0]  # row i: lags 0..i and 1..n-1-i
    total = float(rows.sum())
    jgj = g_norm2 - 2.0 / n * float(rows @ rows) + total * total / (n * n)
    ne = 0.5 * float(np.sqrt(max(0.0, jgj)))
    stress, raw = _stress_from(inner, side.b_norm, ne)
    pairs = (n - lags[1:]).astype(np.float64)
    s_he = float(np.sum(g[1:] * side.d_lags[1:]))
    s_ee = float(np.sum(pairs * g2[1:]))
    kruskal = _kruskal(side, s_he, s_ee)
    if side.rank_ss == 0.0 or _spread(g[1:]) == 0:
        rho = float("nan")
    else:
        ranks = _lag_average_ranks(g, n)
        mean = (pairs.sum() + 1) / 2.0
        cov = float(np.sum(ranks[1:] * side.rank_lags[1:])) - pairs.sum() * mean * mean
        var_e = float(np.sum(pairs * (ranks[1:] - mean) ** 2))
        rho = cov / float(np.sqrt(side.rank_ss * var_e))
    return StressMeasures(stress=stress, raw=raw, kruskal=kruskal, spearman=float(rho))


def score_vectors(side: CorpusSide, b_h: np.ndarray, p: np.ndarray) -> StressMeasures:
    """All measures of an encoding given by position vectors ``P`` (n, d).

    ``delta_E`` is the Euclidean distance between rows and ``B_E = (JP)(JP)^T``.
    """
    p = np.asarray(p, dtype=np.float64)
    jp = p - p.mean(axis=0, keepdims=True)
    inner = float(np.sum((b_h @ jp) * jp))
    ne = float(np.linalg.norm(jp.T @ jp))
    stress, raw = _stress_from(inner, side.b_norm, ne)
    de = upper_distances(p)
    s_he = float(side.d_upper @ de)
    s_ee = float(de @ de)
    kruskal = _kruskal(side, s_he, s_ee)
    if side.rank_ss == 0.0 or _spread(de) == 0:
        rho = float("nan")
    else:
        rho = pearson(side.d_ranks, average_ranks(de))
    return StressMeasures(stress=stress, raw=raw, kruskal=kruskal, spearman=rho)


def score_encoding(
    side: CorpusSide, d_h: np.ndarray, b_h: np.ndarray, enc: Encoding
) -> StressMeasures:
    """The measures of :func:`~posdiag.geometry.compare` by the cheapest exact route.

    A lag profile first (exact closed form), then position vectors, else the dense matrices.
    """
    if enc.profile is not None:
        return score_profile(side, enc.profile)
    if enc.vectors is not None:
        return score_vectors(side, b_h, enc.vectors)
    return compare(d_h, b_h, enc.delta, enc.gram())


# Up to this n a table's dense B_E (<= 32 MB) is kept: one vdot per replicate, where the small
# product B JP cost ~7 ms at n = 76 on the loaded machine (BLAS threads spinning).
DENSE_SCORER_MAX = 2048


class GramScorer:
    """The stress of one fixed encoding against many corpus Gram matrices (bootstrap replicates).

    Precomputes the encoding side once: for a lag profile the weights of ``<B, B_E>`` over the
    diagonal sums of ``B`` (so a replicate costs one O(n^2) pass shared by every Toeplitz
    encoding), for position vectors ``JP`` (``<B, B_E> = sum((B JP) o JP)``), else the dense
    ``B_E``. ``||B_E||_F`` is computed once in every case.
    """

    def __init__(self, enc: Encoding) -> None:
        self.weights: np.ndarray | None = None
        self.jp: np.ndarray | None = None
        self.dense: np.ndarray | None = None
        if enc.profile is not None:
            g2 = np.asarray(enc.profile, dtype=np.float64) ** 2
            n = g2.size
            lags = np.arange(n)
            self.weights = -0.5 * np.where(lags == 0, 1.0, 2.0) * g2
            count = np.where(lags == 0, n, 2 * (n - lags)).astype(np.float64)
            prefix = np.cumsum(g2)
            rows = prefix + prefix[::-1] - g2[0]
            total = float(rows.sum())
            jgj = float(np.sum(count * g2 * g2)) - 2.0 / n * float(rows @ rows) + total**2 / n**2
            self.norm = 0.5 * float(np.sqrt(max(0.0, jgj)))
        elif enc.vectors is not None and enc.vectors.shape[0] > DENSE_SCORER_MAX:
            p = np.asarray(enc.vectors, dtype=np.float64)
            self.jp = p - p.mean(axis=0, keepdims=True)
            self.norm = float(np.linalg.norm(self.jp.T @ self.jp))
        else:
            self.dense = enc.gram()
            self.norm = float(np.linalg.norm(self.dense))

    def stress(self, b: np.ndarray, b_norm: float, b_lags: np.ndarray) -> float:
        """Scale-fitted stress against ``b`` (double-centred), given ``||b||`` and its diagonal
        sums (:func:`diagonal_sums`)."""
        if self.weights is not None:
            inner = float(self.weights @ b_lags)
        elif self.jp is not None:
            inner = float(np.sum((b @ self.jp) * self.jp))
        else:
            assert self.dense is not None
            inner = float(np.vdot(b, self.dense))
        return _stress_from(inner, b_norm, self.norm)[0]
