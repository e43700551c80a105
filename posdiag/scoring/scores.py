"""Encoding scores without an ``n x n`` matrix per encoding (docs/geometry.md section 4).

The corpus side (``B_H``, ``d_H`` and the ranks of ``d_H``) is summarised once
(:func:`corpus_side`). A Toeplitz encoding is then scored from its lag profile alone
(``<B_H, B_E> = -1/2 <B_H, G>``, ``G = [g(|i-j|)^2]``, a sum over diagonals since ``B_H`` is
double-centred), position vectors ``P`` from ``B_E = (JP)(JP)^T`` and their pair distances.
Spearman's rho is exact: twice an average rank is an integer, so every sum is an integer sum
and the one rounding is the final division. From :data:`COMPILED_FROM_PAIRS` pairs on the
kernels of :mod:`posdiag.scoring._ranks` run (a bucket sort instead of ranking into an array);
below, numpy does the same sums. Results equal :func:`~posdiag.geometry.core.compare` to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType

import numpy as np
from scipy.spatial.distance import pdist

from .._util.jit import load_numba
from ..encodings import Encoding
from ..encodings._core import DENSE_MATRICES_MAX
from ..errors import PosdiagError
from ..geometry.core import StressMeasures, compare

__all__ = [
    "COMPILED_FROM_PAIRS",
    "DIRECT_MAX_DIM",
    "CorpusSide",
    "GramScorer",
    "SortLayout",
    "corpus_side",
    "diagonal_sums",
    "score_encoding",
    "score_profile",
    "score_vectors",
    "score_vectors_many",
    "upper_distances",
]


# From this many pairs (n ~ 512) the compiled kernels score, so small corpora never import numba;
# below 2^21 pairs, where numpy's integer rank sums are exact (m^3 < 2^63).
COMPILED_FROM_PAIRS = 1 << 17
# Exact sums need |c| < 2^30 (the limbs' factor) and 2 m < 2^32 (uint32 ranks): n <= 46,341.
EXACT_MAX_POSITIONS = 46_341
# Narrower vectors get distances coordinate by coordinate (as pdist: compare()'s values); wider
# ones (learned tables) by the BLAS Gram expansion, a block of rows at a time.
DIRECT_MAX_DIM = 16


@dataclass(frozen=True)
class SortLayout:
    """How the pairs are laid out for the compiled sort; results do not depend on it.

    Pairs go to buckets of equal width in value, about ``bucket_size`` pairs each (at most
    ``max_buckets``; the corpus side's crowded values take the ``corpus_`` sizes), each sorted in
    a thread's buffer of ``buffer`` pairs (radix digits of ``radix_bits``), a larger one in place.
    Wide tables' distances are formed ``block_bytes`` of ``(rows, n)`` float64 at a time.
    """

    corpus_bucket_size: int = 2048
    corpus_max_buckets: int = 1 << 16
    bucket_size: int = 4096
    max_buckets: int = 16384
    buffer: int = 1 << 17
    radix_bits: int = 8
    block_bytes: int = 64 << 20

    def block_rows(self, n: int) -> int:
        return max(1, min(n, self.block_bytes // (8 * max(1, n))))


def _kernels() -> ModuleType:
    from . import _ranks

    return _ranks


def _compiled(m: int, compiled: bool | None = None) -> bool:
    """Whether ``m`` pairs take the compiled kernels (``compiled`` forces a path)."""
    return m >= COMPILED_FROM_PAIRS if compiled is None else compiled


def _threads() -> int:
    return int(load_numba().get_num_threads())


def _bucket_hist(m: int, size: int, most: int) -> np.ndarray:
    """Zero bucket counts of the ``_ranks`` scatter of ``m`` pairs into buckets of about
    ``size`` pairs, at most ``most`` of them: shape (threads, buckets)."""
    buckets = min(most, max(256, m // size))
    return np.zeros((_threads(), buckets), dtype=np.int64)


def _scale(buckets: int, lo: float, hi: float) -> float:
    """Buckets per unit of value over ``[lo, hi]``; 0 (one bucket for all) when the range is
    empty, infinite or NaN, or so narrow that the scale overflows."""
    width = hi - lo
    if not (width > 0.0 and math.isfinite(width)):
        return 0.0
    scale = buckets / width
    return scale if math.isfinite(scale) else 0.0


def _walk(
    keys: np.ndarray, vals: np.ndarray, starts: np.ndarray, rank2: np.ndarray, layout: SortLayout
) -> list[int]:
    """Sort the scattered buckets and walk their tie groups (``_ranks.sort_buckets``):
    ``[cross, ties]`` as exact ints; with a ``rank2`` of ``keys.size`` (``vals`` then pair
    indices) the doubled average ranks are written there instead of the cross sum."""
    k = _kernels()
    cap = int(min(layout.buffer, max(1, int(np.diff(starts).max(initial=1)))))
    ranks = rank2.size == keys.size
    out = k.sort_buckets(keys, vals, starts, rank2, ranks, _threads(), layout.radix_bits, cap)
    return [sum(_from_limbs(h, lo) for h, lo in out[:, c : c + 2]) for c in (0, 2)]


def _from_limbs(hi: int, lo: int) -> int:
    return (int(hi) << _kernels().LIMB_BITS) + int(lo)


def diagonal_sums(m: np.ndarray, compiled: bool | None = None) -> np.ndarray:
    """``s[l] = sum_i m[i, i + l]`` for ``l = 0..n-1`` (upper diagonals), of shape (n,).

    Walks rows, not diagonals (contiguous memory); compiled from :data:`COMPILED_FROM_PAIRS`
    pairs on (``compiled`` forces a path).
    """
    n = m.shape[0]
    if _compiled(n * (n - 1) // 2, compiled):
        return np.asarray(_kernels().diagonal_sums(np.ascontiguousarray(m)))
    out = np.zeros(n)
    for i in range(n):
        out[: n - i] += m[i, i:]
    return out


def _tie_groups(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, ends)``: an argsort of ``x`` (m,) and the half-open ranges of ``x[order]``
    holding equal values (1-based ranks ``starts+1 .. ends``). Unstable: ties share their rank."""
    m = x.size
    order = np.argsort(x)
    xs = x[order]
    new = np.empty(m, dtype=bool)
    new[:1] = True
    np.not_equal(xs[1:], xs[:-1], out=new[1:])
    del xs
    starts = np.flatnonzero(new)
    return order, starts, np.append(starts[1:], m)


def _upper_segments(n: int) -> np.ndarray:
    """Start of row ``i``'s entries ``(i, i+1..n-1)`` in the row-major upper triangle."""
    lengths = np.arange(n - 1, -1, -1)
    return np.concatenate(([0], np.cumsum(lengths)))


def upper_distances(p: np.ndarray, block_rows: int = 512) -> np.ndarray:
    """Euclidean distances ``||p_i - p_j||``, ``i < j``, of rows of ``p`` (n, d), row-major, shape
    (n(n-1)/2,).

    The Gram expansion with BLAS, a block of rows at a time, upper triangle only: no ``n x n``
    array. Equals ``pdist`` to ~1e-7 relative on distances not tiny against the norms.
    """
    p = np.asarray(p, dtype=np.float64)
    n = p.shape[0]
    sq = np.einsum("ij,ij->i", p, p)
    start = _upper_segments(n)
    out = np.empty(int(start[-1]))
    for lo in range(0, n, block_rows):
        hi = min(n, lo + block_rows)
        # Same operations, in the same order, as the compiled _ranks.block_distances.
        d2 = (sq[lo:hi, None] + sq[None, lo:]) - 2.0 * (p[lo:hi] @ p[lo:].T)
        d = np.sqrt(np.clip(d2, 0.0, None))
        for i in range(lo, hi):
            out[start[i] : start[i + 1]] = d[i - lo, i - lo + 1 :]
    return out


def _pair_distances(p: np.ndarray, layout: SortLayout) -> np.ndarray:
    """``delta_E`` of position vectors over the pairs ``i < j``, row-major (numpy path)."""
    if p.shape[1] <= DIRECT_MAX_DIM:
        return pdist(p) if p.shape[0] > 1 else np.zeros(0)
    return upper_distances(p, layout.block_rows(p.shape[0]))


def _rank2(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Twice the average ranks of ``x`` (int64, ``start + end + 1`` of each tie group) and
    ``sum_groups t^3 - t`` (numpy; ``x.size < 2^21`` so every sum fits int64)."""
    order, starts, ends = _tie_groups(x)
    sizes = ends - starts
    out = np.empty(x.size, dtype=np.int64)
    out[order] = np.repeat(starts + ends + 1, sizes)
    return out, int(np.sum(sizes * (sizes * sizes - 1)))


def _sum_c2(m: int, ties: int) -> int:
    """``sum_p (2 rank_p - (m + 1))^2`` over ``m`` average ranks whose tie groups give
    ``ties = sum t^3 - t``: ``(m^3 - m)/3`` less ``(t^3 - t)/3`` per group (exact int)."""
    return (m**3 - m - ties) // 3


def _spearman(cross: int, ss_h: int, ss_e: int) -> float:
    """Pearson correlation of average ranks from exact integer sums of centred doubled ranks;
    nan when either side is constant (as ``scipy.stats.spearmanr``)."""
    if ss_h == 0 or ss_e == 0:
        return float("nan")
    rho = cross / math.sqrt(ss_h * ss_e)
    return max(-1.0, min(1.0, rho))


@dataclass(frozen=True)
class CorpusSide:
    """What every encoding's score needs from the corpus geometry, computed once.

    Attributes
    ----------
    n : int
    b_norm : float
        ``||B_H||_F``.
    b_lags, d_lags : ndarray of shape (n,)
        Diagonal sums ``sum_i B_H[i, i+l]``, and those of ``d_H`` (lag 0 is 0).
    d_sq : float
        ``sum_{i<j} d_H(i, j)^2``.
    d_h : ndarray of shape (n, n)
        The corpus distances (a reference, C-contiguous).
    rank2 : ndarray of shape (n(n-1)/2,)
        Twice the average ranks of ``d_H(i, j)``, ``i < j``, row-major (uint32, or int64 in numpy).
    rank_lags : ndarray of shape (n,), int64
        Diagonal sums of the centred doubled ranks ``rank2 - (m + 1)`` (lag 0 is 0).
    rank_ss2 : int
        ``sum (rank2 - (m + 1))^2`` (exact; 0 when ``d_H`` is constant).
    d_nan : bool
        Whether some ``d_H(i, j)`` is NaN (every Spearman rho is then nan).
    scratch : list of (ndarray of shape (m,), ndarray of shape (m,))
        The compiled sort's float64 and uint32 buffers, lent to one score at a time.
    compiled : bool
        Whether this side and every score against it take the compiled kernels.
    layout : SortLayout
    """

    n: int
    b_norm: float
    b_lags: np.ndarray
    d_lags: np.ndarray
    d_sq: float
    d_h: np.ndarray
    rank2: np.ndarray
    rank_lags: np.ndarray
    rank_ss2: int
    d_nan: bool
    scratch: list[tuple[np.ndarray, np.ndarray]] = field(
        default_factory=list, repr=False, compare=False
    )
    compiled: bool = False
    layout: SortLayout = field(default_factory=SortLayout)


def corpus_side(
    d_h: np.ndarray,
    b_h: np.ndarray,
    *,
    compiled: bool | None = None,
    layout: SortLayout | None = None,
) -> CorpusSide:
    """Summarise the corpus geometry for :func:`score_profile` and :func:`score_vectors`.

    Parameters
    ----------
    d_h : ndarray of shape (n, n)
        Corpus distances (symmetric).
    b_h : ndarray of shape (n, n)
        Their Gram matrix; must be double-centred (rows and columns sum to 0).
    compiled : bool, optional
        Force the compiled kernels or numpy (default: from :data:`COMPILED_FROM_PAIRS` pairs).
    layout : SortLayout, optional
    """
    n = d_h.shape[0]
    if n > EXACT_MAX_POSITIONS:
        raise PosdiagError(
            f"'n_eff' must be an int in [2, {EXACT_MAX_POSITIONS}] for exact Spearman ranks "
            f"(the rank sums' integer range); got {n}"
        )
    m = n * (n - 1) // 2
    d_h = np.ascontiguousarray(d_h, dtype=np.float64)
    start = _upper_segments(n)
    scratch: list[tuple[np.ndarray, np.ndarray]] = []
    layout = layout or SortLayout()
    compiled = _compiled(m, compiled)
    if compiled:
        k = _kernels()
        d_lags = np.zeros(n)
        row_sq = np.zeros(n)
        # One pass gives the diagonal sums, sum d^2 and the range for the buckets.
        vmin, vmax, nan = k.corpus_scan(d_h, d_lags, row_sq)
        d_sq = float(row_sq.sum())
        b_lags = np.asarray(k.diagonal_sums(np.ascontiguousarray(b_h)))
        ties = 0
        if nan:
            rank2 = np.zeros(m, dtype=np.uint32)
        else:
            hist = _bucket_hist(m, layout.corpus_bucket_size, layout.corpus_max_buckets)
            scale = _scale(hist.shape[1], vmin, vmax)
            k.square_buckets(d_h, start, vmin, scale, hist, np.empty(0), np.empty(0, np.uint32))
            starts = k.bucket_offsets(hist)
            keys = np.empty(m)
            idx = np.empty(m, dtype=np.uint32)  # payload: each pair's own index
            k.square_buckets(d_h, start, vmin, scale, hist, keys, idx)
            rank2 = np.empty(m, dtype=np.uint32)
            ties = _walk(keys, idx, starts, rank2, layout)[1]
            scratch.append((keys, idx))
            del keys, idx
        rank_lags = np.asarray(k.rank_lag_sums(rank2, n, start))
    else:
        rows, cols = np.triu_indices(n, k=1)
        dh = d_h[rows, cols]
        nan = int(np.isnan(dh).sum())
        d_sq = float(dh @ dh)
        d_lags = diagonal_sums(d_h, False)
        d_lags[0] = 0.0
        b_lags = diagonal_sums(b_h, False)
        rank2, ties = _rank2(dh)
        # |sum| < n m < 2^53: the float64 bincount is exact.
        lag_sums = np.bincount(cols - rows, weights=rank2 - (m + 1), minlength=n)
        rank_lags = lag_sums.astype(np.int64)
    return CorpusSide(
        n=n,
        b_norm=float(np.linalg.norm(b_h)),
        b_lags=b_lags,
        d_lags=d_lags,
        d_sq=d_sq,
        d_h=d_h,
        rank2=rank2,
        rank_lags=rank_lags,
        rank_ss2=_sum_c2(m, ties) if m else 0,
        d_nan=bool(nan),
        scratch=scratch,
        compiled=compiled,
        layout=layout,
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
    """Average rank of each lag's value among all pairs ``i < j`` (lag 1..n-1; index 0 unused),
    shape (n,): lag ``l`` holds ``n - l`` pairs."""
    order, starts, ends = _tie_groups(g[1:])
    count = np.add.reduceat((n - 1 - order).astype(np.float64), starts)  # pairs per group
    end = np.cumsum(count)
    out = np.zeros(n)
    out[1 + order] = np.repeat(end - (count - 1.0) / 2.0, ends - starts)
    return out


def _profile_terms(g2: np.ndarray) -> tuple[np.ndarray, float]:
    """The weights ``w`` with ``<B, B_E> = w . diagonal_sums(B)`` (``B`` double-centred) and
    ``||B_E||_F`` of a Toeplitz encoding with squared lag profile ``g2`` (shape (n,))."""
    n = g2.size
    lags = np.arange(n)
    weights = -0.5 * np.where(lags == 0, 1.0, 2.0) * g2  # each off-diagonal lag appears twice
    count = np.where(lags == 0, n, 2 * (n - lags)).astype(np.float64)
    prefix = np.cumsum(g2)
    rows = prefix + prefix[::-1] - g2[0]  # row i: lags 0..i and 1..n-1-i
    total = float(rows.sum())
    jgj = float(np.sum(count * g2 * g2)) - 2.0 / n * float(rows @ rows) + total * total / (n * n)
    return weights, 0.5 * float(np.sqrt(max(0.0, jgj)))


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
    weights, ne = _profile_terms(g2)
    # np.sum, not a dot product: the summation order of the figures before (bit for bit).
    stress, raw = _stress_from(float(np.sum(weights * side.b_lags)), side.b_norm, ne)
    pairs = n - np.arange(1, n, dtype=np.float64)
    s_he = float(np.sum(g[1:] * side.d_lags[1:]))
    s_ee = float(np.sum(pairs * g2[1:]))
    kruskal = _kruskal(side, s_he, s_ee)
    if side.d_nan or np.isnan(g[1:]).any():
        rho = float("nan")
    else:
        m = n * (n - 1) // 2
        # Doubled average ranks are integers below 2^53: exact in float64, then Python ints.
        c_e = [int(r) for r in 2.0 * _lag_average_ranks(g, n)[1:] - (m + 1)]
        c_h = [int(c) for c in side.rank_lags[1:]]
        cross = sum(a * b for a, b in zip(c_e, c_h, strict=True))
        ss_e = sum((n - lag) * c * c for lag, c in enumerate(c_e, start=1))
        rho = _spearman(cross, side.rank_ss2, ss_e)
    return StressMeasures(stress=stress, raw=raw, kruskal=kruskal, spearman=float(rho))


def score_vectors(side: CorpusSide, b_h: np.ndarray, p: np.ndarray) -> StressMeasures:
    """All measures of an encoding given by position vectors ``P`` (n, d).

    ``delta_E`` is the Euclidean distance between rows and ``B_E = (JP)(JP)^T``.
    """
    return score_vectors_many(side, b_h, [p])[0]


def score_vectors_many(
    side: CorpusSide, b_h: np.ndarray, vectors: Sequence[np.ndarray]
) -> list[StressMeasures]:
    """:func:`score_vectors` of each table of ``vectors`` (each (n, d_k)), the same floats.

    On the compiled path, tables that are the leading columns of one another (``mds-1`` is the
    first column of ``mds-3``) share one pass over ``d_H`` and ``B_H``, three at a time
    (``_ranks.nested_scan``); their sorts stay one at a time, in the same memory.
    """
    ps = [np.asarray(p, dtype=np.float64) for p in vectors]
    compiled = side.compiled
    scans: dict[int, _Scan] = {}
    family = _nested_family(ps) if compiled else []
    for lo in range(0, len(family), 3):
        chunk = family[lo : lo + 3]
        if len(chunk) < 2:
            break  # alone: its own pass (vector_scan), as score_vectors
        scans.update(zip(chunk, _nested_scan(side, b_h, [ps[q] for q in chunk]), strict=True))
    out = []
    for q, p in enumerate(ps):
        jp = p - p.mean(axis=0, keepdims=True)
        ne = float(np.linalg.norm(jp.T @ jp))
        # Compiled: <B_H, B_E> = -sum_{i<j} B_H d_E^2 (B_H double-centred), summed by the
        # distance kernel instead of an n x n x d product B_H JP.
        if q in scans:
            s_he, s_ee, inner, cross, ss_e = _sort_sums(side, *scans.pop(q))
        elif compiled:
            s_he, s_ee, inner, cross, ss_e = _vector_sums_compiled(side, b_h, p)
        else:
            inner = float(np.sum((b_h @ jp) * jp))
            s_he, s_ee, cross, ss_e = _vector_sums_numpy(side, p)
        stress, raw = _stress_from(inner, side.b_norm, ne)
        kruskal = _kruskal(side, s_he, s_ee)
        rho = float("nan") if side.d_nan else _spearman(cross, side.rank_ss2, ss_e)
        out.append(StressMeasures(stress=stress, raw=raw, kruskal=kruskal, spearman=rho))
    return out


def _vector_sums_numpy(side: CorpusSide, p: np.ndarray) -> tuple[float, float, int, int]:
    """``sum d_H d_E``, ``sum d_E^2``, ``sum c_H c_E`` and ``sum c_E^2`` (doubled centred
    ranks; both 0 when a distance is NaN) by numpy."""
    n = side.n
    m = n * (n - 1) // 2
    de = _pair_distances(p, side.layout)
    rows, cols = np.triu_indices(n, k=1)
    s_he = float(side.d_h[rows, cols] @ de)
    s_ee = float(de @ de)
    if np.isnan(de).any():
        return s_he, s_ee, 0, 0
    order, starts, ends = _tie_groups(de)
    sizes = ends - starts
    c_h = np.asarray(side.rank2, dtype=np.int64)[order] - (m + 1)
    per_group = np.add.reduceat(c_h, starts) if m else c_h
    cross = int(np.sum((starts + ends - m) * per_group))
    return s_he, s_ee, cross, _sum_c2(m, int(np.sum(sizes * (sizes * sizes - 1))))


# What a pass over the pairs leaves for the sort of one table's distances: the sums
# (s_he, s_ee, inner), the bucket counts (threads, buckets), the NaN count, and the scatter
# of (d_E, corpus rank2) into (keys, vals) at the places the counts give.
_Scan = tuple[float, float, float, np.ndarray, int, Callable[[np.ndarray, np.ndarray], None]]


def _nested_family(ps: Sequence[np.ndarray]) -> list[int]:
    """Indices of the tables of at most :data:`DIRECT_MAX_DIM` coordinates that are, bit for
    bit, the leading columns of the widest of them (the ``mds-r`` family), narrowest first;
    empty unless there are two or more."""
    narrow = sorted(
        (q for q, p in enumerate(ps) if p.shape[1] <= DIRECT_MAX_DIM), key=lambda q: ps[q].shape[1]
    )
    if len(narrow) < 2:
        return []
    wide = ps[narrow[-1]]

    def prefix(p: np.ndarray) -> bool:
        head = np.ascontiguousarray(wide[:, : p.shape[1]])
        return p.shape[0] == wide.shape[0] and np.array_equal(
            np.ascontiguousarray(p).view(np.int64), head.view(np.int64)
        )

    family = [q for q in narrow if prefix(ps[q])]
    return family if len(family) >= 2 else []


def _nested_scan(side: CorpusSide, b_h: np.ndarray, ps: Sequence[np.ndarray]) -> list[_Scan]:
    """The scans of up to three nested tables ``ps`` (each the leading columns of the last) in
    one compiled pass (fewer than three: the last repeated), bucketed as
    :func:`_vector_sums_compiled` does narrow tables."""
    k = _kernels()
    n = side.n
    m = n * (n - 1) // 2
    start = _upper_segments(n)
    slots = list(ps) + [ps[-1]] * (3 - len(ps))
    one = _bucket_hist(m, side.layout.bucket_size, side.layout.max_buckets)
    hist = np.zeros((3,) + one.shape, dtype=np.int64)
    scales = np.array([_scale(one.shape[1], 0.0, _diameter_bound(p)) for p in slots])
    dims = np.array([p.shape[1] for p in slots], dtype=np.int64)
    rows = np.zeros((3, 3, n))
    coords = np.ascontiguousarray(slots[-1])
    b_h = np.ascontiguousarray(b_h, dtype=np.float64)
    nans = k.nested_scan(coords, dims, side.d_h, b_h, rows, scales, hist)
    out: list[_Scan] = []
    for e, p in enumerate(ps):
        s_he, s_ee, s_be = (float(r) for r in rows[e].sum(axis=1))
        table = np.ascontiguousarray(p)
        scatter = partial(k.vector_scatter, table, side.rank2, start, float(scales[e]), hist[e])
        out.append((s_he, s_ee, -s_be, hist[e], int(nans[e]), scatter))
    return out


def _vector_sums_compiled(
    side: CorpusSide, b_h: np.ndarray, p: np.ndarray
) -> tuple[float, float, float, int, int]:
    """As :func:`_vector_sums_numpy`, by the kernels of :mod:`posdiag.scoring._ranks`, and
    ``<B_H, B_E>`` (third)."""
    k = _kernels()
    n = side.n
    m = n * (n - 1) // 2
    start = _upper_segments(n)
    b_h = np.ascontiguousarray(b_h, dtype=np.float64)
    rows = np.zeros((3, n))
    hist = _bucket_hist(m, side.layout.bucket_size, side.layout.max_buckets)
    scatter: Callable[[np.ndarray, np.ndarray], None]
    if p.shape[1] <= DIRECT_MAX_DIM:
        # Distances recomputed in each of two passes, never stored; buckets over [0, an
        # upper bound of the largest] (larger rounded values go to the top bucket).
        p = np.ascontiguousarray(p)
        scale = _scale(hist.shape[1], 0.0, _diameter_bound(p))
        nan = k.vector_scan(p, side.d_h, b_h, rows, scale, hist)
        scatter = partial(k.vector_scatter, p, side.rank2, start, scale, hist)
    else:
        dist = np.empty(m)
        sq = np.einsum("ij,ij->i", p, p)
        ranges = np.empty((3, n))  # every row's (min, max, NaN count) of its distances
        step = side.layout.block_rows(n)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            gram = p[lo:hi] @ p[lo:].T
            k.block_distances(gram, sq, lo, side.d_h, b_h, start, dist, rows, ranges)
            del gram
        vmin, vmax, nan = float(ranges[0].min()), float(ranges[1].max()), int(ranges[2].sum())
        scale = _scale(hist.shape[1], vmin, vmax)
        if not nan:
            k.flat_hist(dist, vmin, scale, hist)
        holder = [dist]  # handed to the scatter, freed when it returns (before the sort)
        del dist

        def scatter(keys: np.ndarray, vals: np.ndarray) -> None:
            k.flat_scatter(holder.pop(), side.rank2, vmin, scale, hist, keys, vals)

    s_he, s_ee, s_be = (float(r) for r in rows.sum(axis=1))
    return _sort_sums(side, s_he, s_ee, -s_be, hist, nan, scatter)


def _sort_sums(
    side: CorpusSide,
    s_he: float,
    s_ee: float,
    inner: float,
    hist: np.ndarray,
    nan: int,
    scatter: Callable[[np.ndarray, np.ndarray], None],
) -> tuple[float, float, float, int, int]:
    """``(s_he, s_ee, inner, sum c_H c_E, sum c_E^2)``: the rank sums from one scatter of the
    encoding's distances into the corpus side's borrowed scratch and its bucket sort."""
    m = side.n * (side.n - 1) // 2
    if nan or side.d_nan:  # rho is nan: nothing to sort
        return s_he, s_ee, inner, 0, 0
    k = _kernels()
    starts = k.bucket_offsets(hist)
    # Borrowed (list.pop is atomic: a concurrent call finds none and allocates its own).
    keys, vals = side.scratch.pop() if side.scratch else (np.empty(m), np.empty(m, np.uint32))
    try:
        scatter(keys, vals)
        cross, ties = _walk(keys, vals, starts, np.empty(0, dtype=np.uint32), side.layout)
    finally:
        side.scratch.append((keys, vals))
    return s_he, s_ee, inner, cross, _sum_c2(m, ties)


def _diameter_bound(p: np.ndarray) -> float:
    """An upper bound of ``max_{i,j} ||p_i - p_j||`` (up to rounding): the smaller of twice
    the largest distance to the mean (at most twice the diameter) and the diagonal of the
    bounding box (the diameter itself in one dimension)."""
    if p.shape[0] == 0:
        return 0.0
    radius = float(np.sqrt(np.max(np.sum((p - p.mean(axis=0)) ** 2, axis=1))))
    box = float(np.sqrt(np.sum((p.max(axis=0) - p.min(axis=0)) ** 2)))
    return min(2.0 * radius, box)


def score_encoding(
    side: CorpusSide, d_h: np.ndarray, b_h: np.ndarray, enc: Encoding
) -> StressMeasures:
    """The measures of :func:`~posdiag.geometry.core.compare` by the cheapest exact route.

    A lag profile first (exact closed form), then position vectors, else the dense matrices.
    """
    if enc.profile is not None:
        return score_profile(side, enc.profile)
    if enc.vectors is not None:
        return score_vectors(side, b_h, enc.vectors)
    return compare(d_h, b_h, enc.delta, enc.gram())


# Up to this n a table's B_E = (JP)(JP)^T is kept dense (one GEMM, <= 128 MiB; the bootstrap
# reserves it): a replicate's <B, B_E> is then one vdot (n^2) instead of B JP (n^2 d).
DENSE_TABLE_MAX = 4096


class GramScorer:
    """The stress of one fixed encoding against many corpus Gram matrices (bootstrap replicates).

    The encoding side is precomputed once: a lag profile's weights over the diagonal sums of
    ``B``; up to ``dense_max`` positions the dense ``B_E`` (one ``vdot`` a replicate); beyond,
    for position vectors, ``(JP)(JP)^T`` up to ``table_max`` positions, else ``JP``.
    """

    def __init__(
        self, enc: Encoding, dense_max: int = DENSE_MATRICES_MAX, table_max: int = DENSE_TABLE_MAX
    ) -> None:
        self.weights: np.ndarray | None = None
        self.jp: np.ndarray | None = None
        self.dense: np.ndarray | None = None
        if enc.profile is not None:
            self.weights, self.norm = _profile_terms(np.asarray(enc.profile, np.float64) ** 2)
        elif enc.vectors is not None and enc.vectors.shape[0] > dense_max:
            p = np.asarray(enc.vectors, dtype=np.float64)
            jp = p - p.mean(axis=0, keepdims=True)
            self.norm = float(np.linalg.norm(jp.T @ jp))
            if jp.shape[0] <= table_max:
                self.dense = jp @ jp.T
            else:
                self.jp = jp
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
