"""Compiled kernels of :mod:`posdiag.scoring.scores`: pair distances, bucket scatter, lag sums.

Imported only from ``scores.COMPILED_FROM_PAIRS`` pairs on, so the bundled corpus never imports
numba. The bucket sort and its exact rank sums (two int64 limbs) are :mod:`posdiag.scoring._sort`.
"""

from __future__ import annotations

import numpy as np

from .._util.jit import load_numba
from ._sort import LIMB_BITS, bucket_offsets, sort_buckets

numba = load_numba()

__all__ = [
    "LIMB_BITS",
    "STRIPES",
    "block_distances",
    "bucket_offsets",
    "corpus_scan",
    "diagonal_sums",
    "flat_hist",
    "flat_scatter",
    "nested_scan",
    "rank_lag_sums",
    "sort_buckets",
    "square_buckets",
    "vector_scan",
    "vector_scatter",
]


@numba.njit(cache=True, nogil=True, parallel=True)
def block_distances(
    gram: np.ndarray,
    sq: np.ndarray,
    lo: int,
    d_h: np.ndarray,
    b_h: np.ndarray,
    start: np.ndarray,
    out: np.ndarray,
    rows: np.ndarray,
    ranges: np.ndarray,
) -> None:
    """Distances of rows ``lo..lo+len(gram)-1`` right of the diagonal into ``out``, from
    ``gram[r, c] = p_{lo+r} . p_{lo+c}`` and squared norms ``sq`` (as ``scores.upper_distances``),
    with the sums of :func:`vector_scan` into ``rows`` and each row's (min, max, NaN count) of
    the distances into ``ranges`` (3, n), for the buckets' range."""
    count, cols = gram.shape
    n = lo + cols
    for r in numba.prange(count):
        i = lo + r
        he = 0.0
        ee = 0.0
        be = 0.0
        a = np.inf
        b = -np.inf
        nan = 0
        base = start[i] - i - 1
        for j in range(i + 1, n):
            d2 = (sq[i] + sq[j]) - 2.0 * gram[r, j - lo]
            if d2 <= 0.0:  # numpy's clip at 0; not max(0.0, d2), which turns a NaN into 0
                d2 = 0.0
            dist = np.sqrt(d2)
            out[base + j] = dist
            he += d_h[i, j] * dist
            ee += d2
            be += b_h[i, j] * d2
            if dist != dist:
                nan += 1
            else:
                a = min(a, dist)
                b = max(b, dist)
        rows[0, i] = he
        rows[1, i] = ee
        rows[2, i] = be
        ranges[0, i] = a
        ranges[1, i] = b
        ranges[2, i] = nan


@numba.njit(cache=True, nogil=True, inline="always")
def _bucket(x: float, vmin: float, scale: float, top: int) -> int:
    """The bucket of ``x`` (not NaN), monotone in ``x``; values past a bound go to the end
    buckets, and ``scale = 0`` (an empty or infinite range) puts all in bucket 0."""
    if scale == 0.0:
        return 0
    y = (x - vmin) * scale
    if y < 1.0:
        return 0
    if y < top:
        return int(y)
    return top  # also y = inf: int(inf) is undefined


# The pairs i < j enter the sort from the upper triangle of d_H, from position vectors (distances
# computed on the fly), or from a flat array (wide tables' distances). Each source is read twice:
# to count the pairs per bucket and part of the work, then to scatter them to their buckets.


@numba.njit(cache=True, nogil=True, parallel=True)
def corpus_scan(d: np.ndarray, lags: np.ndarray, row_sq: np.ndarray) -> tuple[float, float, int]:
    """One pass over the upper triangle of ``d`` (n, n): ``lags[l] = sum_i d[i, i + l]``
    (``lags[0] = 0``), ``row_sq[i] = sum_{j > i} d[i, j]^2``, and (min, max, NaN count)."""
    n = d.shape[0]
    acc = np.zeros((STRIPES, n))
    lows = np.full(STRIPES, np.inf)
    highs = np.full(STRIPES, -np.inf)
    nans = np.zeros(STRIPES, np.int64)
    for t in numba.prange(STRIPES):
        a = np.inf
        b = -np.inf
        nan = 0
        for i in range(t, n, STRIPES):
            rs = 0.0
            for j in range(i + 1, n):
                v = d[i, j]
                acc[t, j - i] += v
                rs += v * v
                if v != v:
                    nan += 1
                else:
                    a = min(a, v)
                    b = max(b, v)
            row_sq[i] = rs
        lows[t] = a
        highs[t] = b
        nans[t] = nan
    lags[:] = _sum_stripes(acc)
    return lows.min(), highs.max(), int(nans.sum())


@numba.njit(cache=True, nogil=True, inline="always")
def _part_rows(t: int, parts: int, n: int) -> np.ndarray:
    """The rows of part ``t`` of ``parts``: ``k, n - 1 - k`` for each ``k`` of its range (balanced
    work: a short row with a long one)."""
    half = (n + 1) // 2
    chunk = (half + parts - 1) // parts
    rows = []
    for k in range(t * chunk, min(half, (t + 1) * chunk)):
        rows.append(k)
        if n - 1 - k != k:
            rows.append(n - 1 - k)
    return np.array(rows, dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _square_part(d, t, parts, vmin, scale, h, start, keys, idx):
    n = d.shape[0]
    top = h.size - 1
    scatter = keys.size > 0
    for i in _part_rows(t, parts, n):
        base = start[i] - i - 1
        for j in range(i + 1, n):
            v = d[i, j]
            b = _bucket(v, vmin, scale, top)
            if scatter:
                at = h[b]
                h[b] = at + 1
                keys[at] = v
                idx[at] = base + j
            else:
                h[b] += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def square_buckets(
    d: np.ndarray,
    start: np.ndarray,
    vmin: float,
    scale: float,
    pos: np.ndarray,
    keys: np.ndarray,
    idx: np.ndarray,
) -> None:
    """With ``keys`` empty, count the pairs of part ``t`` in bucket ``b`` into ``pos[t, b]``
    (upper triangle of ``d``); else write each pair's value to ``keys`` and its row-major index
    to ``idx`` at the next free place of its bucket (``pos`` from :func:`bucket_offsets`)."""
    parts = pos.shape[0]
    for t in numba.prange(parts):
        _square_part(d, np.int64(t), parts, vmin, scale, pos[t], start, keys, idx)


@numba.njit(cache=True, nogil=True, inline="always")
def _distance(p: np.ndarray, i: int, j: int) -> tuple[float, float]:
    """(``||p_i - p_j||``, its square), summed coordinate by coordinate as ``pdist``."""
    acc = 0.0
    for c in range(p.shape[1]):
        diff = p[i, c] - p[j, c]
        acc += diff * diff
    return np.sqrt(acc), acc


@numba.njit(cache=True, nogil=True)
def _vector_scan_part(p, d_h, b_h, rows, scale, h, t, parts):
    n = p.shape[0]
    top = h.size - 1
    nan = 0
    for i in _part_rows(t, parts, n):
        he = 0.0
        ee = 0.0
        be = 0.0
        for j in range(i + 1, n):
            dist, sq = _distance(p, i, j)
            he += d_h[i, j] * dist
            ee += sq
            be += b_h[i, j] * sq
            if dist != dist:
                nan += 1
            else:
                h[_bucket(dist, 0.0, scale, top)] += 1
        rows[0, i] = he
        rows[1, i] = ee
        rows[2, i] = be
    return nan


@numba.njit(cache=True, nogil=True, parallel=True)
def vector_scan(
    p: np.ndarray,
    d_h: np.ndarray,
    b_h: np.ndarray,
    rows: np.ndarray,
    scale: float,
    hist: np.ndarray,
) -> int:
    """For position vectors ``p`` (n, dim) and every row ``i`` over ``j > i``:
    ``rows[0, i] = sum d_H d_E``, ``rows[1, i] = sum d_E^2``, ``rows[2, i] = sum B_H d_E^2``,
    and the bucket counts of ``d_E`` (lower bound 0, ``scale`` from an upper bound) into
    ``hist``. Returns the NaN count (then ``hist`` is incomplete)."""
    parts = hist.shape[0]
    nans = np.zeros(parts, np.int64)
    for t in numba.prange(parts):
        nans[t] = _vector_scan_part(p, d_h, b_h, rows, scale, hist[t], np.int64(t), parts)
    return int(nans.sum())


@numba.njit(cache=True, nogil=True)
def _nested_scan_part(p, dims, d_h, b_h, rows, scales, hist, nan, t, parts):
    n = p.shape[0]
    top = hist.shape[2] - 1
    d0, d1, d2 = dims[0], dims[1], dims[2]
    s0, s1, s2 = scales[0], scales[1], scales[2]
    h0, h1, h2 = hist[0, t], hist[1, t], hist[2, t]
    for i in _part_rows(t, parts, n):
        # Scalars, not small arrays: the nine sums stay in registers.
        he0 = ee0 = be0 = he1 = ee1 = be1 = he2 = ee2 = be2 = 0.0
        for j in range(i + 1, n):
            dh = d_h[i, j]
            bh = b_h[i, j]
            # Coordinate by coordinate as _distance: a prefix's square is the running sum.
            q = 0.0
            for c in range(d0):
                diff = p[i, c] - p[j, c]
                q += diff * diff
            q0 = q
            for c in range(d0, d1):
                diff = p[i, c] - p[j, c]
                q += diff * diff
            q1 = q
            for c in range(d1, d2):
                diff = p[i, c] - p[j, c]
                q += diff * diff
            q2 = q
            e0 = np.sqrt(q0)
            e1 = np.sqrt(q1)
            e2 = np.sqrt(q2)
            he0 += dh * e0
            ee0 += q0
            be0 += bh * q0
            he1 += dh * e1
            ee1 += q1
            be1 += bh * q1
            he2 += dh * e2
            ee2 += q2
            be2 += bh * q2
            if e0 != e0:
                nan[t, 0] += 1
            else:
                h0[_bucket(e0, 0.0, s0, top)] += 1
            if e1 != e1:
                nan[t, 1] += 1
            else:
                h1[_bucket(e1, 0.0, s1, top)] += 1
            if e2 != e2:
                nan[t, 2] += 1
            else:
                h2[_bucket(e2, 0.0, s2, top)] += 1
        rows[0, 0, i] = he0
        rows[0, 1, i] = ee0
        rows[0, 2, i] = be0
        rows[1, 0, i] = he1
        rows[1, 1, i] = ee1
        rows[1, 2, i] = be1
        rows[2, 0, i] = he2
        rows[2, 1, i] = ee2
        rows[2, 2, i] = be2


@numba.njit(cache=True, nogil=True, parallel=True)
def nested_scan(
    p: np.ndarray,
    dims: np.ndarray,
    d_h: np.ndarray,
    b_h: np.ndarray,
    rows: np.ndarray,
    scales: np.ndarray,
    hist: np.ndarray,
) -> np.ndarray:
    """:func:`vector_scan` of three tables in one pass over ``d_H`` and ``B_H``: table ``e`` is
    the first ``dims[e]`` columns of ``p`` (n, dims[2]), ``dims`` non-decreasing. Into ``rows[e]``
    (3, n) and ``hist[e]`` (parts, buckets) with ``scales[e]``, the same sums in the same order
    as :func:`vector_scan` of table ``e`` alone. Returns the NaN counts, shape (3,)."""
    parts = hist.shape[1]
    nans = np.zeros((parts, 3), np.int64)
    for t in numba.prange(parts):
        _nested_scan_part(p, dims, d_h, b_h, rows, scales, hist, nans, np.int64(t), parts)
    return nans.sum(axis=0)


@numba.njit(cache=True, nogil=True)
def _vector_scatter_part(p, rank2, start, scale, row, keys, vals, t, parts):
    n = p.shape[0]
    top = row.size - 1
    for i in _part_rows(t, parts, n):
        base = start[i] - i - 1
        for j in range(i + 1, n):
            dist, _ = _distance(p, i, j)
            b = _bucket(dist, 0.0, scale, top)
            at = row[b]
            row[b] = at + 1
            keys[at] = dist
            vals[at] = rank2[base + j]


@numba.njit(cache=True, nogil=True, parallel=True)
def vector_scatter(
    p: np.ndarray,
    rank2: np.ndarray,
    start: np.ndarray,
    scale: float,
    pos: np.ndarray,
    keys: np.ndarray,
    vals: np.ndarray,
) -> None:
    """Scatter ``(d_E, rank2[pair])`` of every pair to its bucket (as :func:`vector_scan`)."""
    parts = pos.shape[0]
    for t in numba.prange(parts):
        _vector_scatter_part(p, rank2, start, scale, pos[t], keys, vals, np.int64(t), parts)


@numba.njit(cache=True, nogil=True, parallel=True)
def flat_hist(x: np.ndarray, vmin: float, scale: float, hist: np.ndarray) -> None:
    """Bucket counts of ``x`` per part (contiguous chunks)."""
    m = x.size
    parts, buckets = hist.shape
    top = buckets - 1
    chunk = (m + parts - 1) // parts
    for t in numba.prange(parts):
        h = hist[t]
        for q in range(t * chunk, min(m, (t + 1) * chunk)):
            h[_bucket(x[q], vmin, scale, top)] += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def flat_scatter(
    x: np.ndarray,
    payload: np.ndarray,
    vmin: float,
    scale: float,
    pos: np.ndarray,
    keys: np.ndarray,
    vals: np.ndarray,
) -> None:
    """Scatter ``(x[q], payload[q])`` to the buckets (as :func:`flat_hist`); ``payload`` empty:
    the index ``q`` itself."""
    m = x.size
    with_payload = payload.size == m
    parts, buckets = pos.shape
    top = buckets - 1
    chunk = (m + parts - 1) // parts
    for t in numba.prange(parts):
        row = pos[t]
        for q in range(t * chunk, min(m, (t + 1) * chunk)):
            v = x[q]
            b = _bucket(v, vmin, scale, top)
            at = row[b]
            row[b] = at + 1
            keys[at] = v
            vals[at] = payload[q] if with_payload else q


# Fixed stripes of interleaved rows (not one per thread): float lag sums then add in the same
# order whatever the thread count, so results do not depend on the machine.
STRIPES = 8


@numba.njit(cache=True, nogil=True, parallel=True)
def rank_lag_sums(rank2: np.ndarray, n: int, start: np.ndarray) -> np.ndarray:
    """``out[l] = sum_i c(i, i + l)``, ``c = rank2 - (m + 1)``, over the row-major upper
    triangle (int64, exact: ``|out[l]| < n m``); ``out[0] = 0``."""
    m = rank2.size
    off = m + 1
    acc = np.zeros((STRIPES, n), np.int64)
    for t in numba.prange(STRIPES):
        for i in range(t, n - 1, STRIPES):
            base = start[i] - i - 1
            for j in range(i + 1, n):
                acc[t, j - i] += np.int64(rank2[base + j]) - off
    return acc.sum(axis=0)


@numba.njit(cache=True, nogil=True, parallel=True)
def diagonal_sums(a: np.ndarray) -> np.ndarray:
    """``out[l] = sum_i a[i, i + l]``, ``l = 0..n-1``, rows interleaved over :data:`STRIPES`."""
    n = a.shape[0]
    acc = np.zeros((STRIPES, n))
    for t in numba.prange(STRIPES):
        for i in range(t, n, STRIPES):
            for j in range(i, n):
                acc[t, j - i] += a[i, j]
    return _sum_stripes(acc)


@numba.njit(cache=True, nogil=True)
def _sum_stripes(acc: np.ndarray) -> np.ndarray:
    """``acc`` (STRIPES, n) summed over stripes in a fixed order, shape (n,)."""
    out = np.zeros(acc.shape[1])
    for t in range(STRIPES):
        for lag in range(acc.shape[1]):
            out[lag] += acc[t, lag]
    return out
