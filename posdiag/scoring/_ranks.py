"""Compiled kernels of :mod:`posdiag.scoring.scores`: pair distances, bucket sort, exact rank sums.

Imported only when a score needs them (``n(n-1)/2`` from ``scores.COMPILED_FROM_PAIRS`` on), so
the bundled corpus never imports numba. The bucket sort itself is :mod:`posdiag.scoring._sort`.

Exactness: Spearman's rho is the Pearson correlation of average ranks. Twice an average rank
is an integer (``start + end + 1`` of its tie group), so every sum the correlation needs is an
integer sum; the kernels accumulate them exactly in two int64 limbs (:func:`_mac`), and the one
rounding left is the final division (tests/scoring/test_ranks.py checks it against
``scipy.stats.spearmanr``).
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
    "square_hist",
    "square_scatter",
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
    """Rows ``lo..lo+len(gram)-1`` from inner products ``gram[r, c] = p_{lo+r} . p_{lo+c}`` and
    squared norms ``sq``: ``sqrt(max(0, (sq_i + sq_j) - 2 gram))`` right of the diagonal (the
    operations of ``fastscore.upper_distances``), with the sums of :func:`vector_scan` into
    ``rows`` and each row's (min, max, NaN count) of the distances into ``ranges`` (3, n): the
    range of the buckets without another pass over the distances."""
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
    """Monotone in ``x`` (a subtraction and a product by constants round monotonically; the
    clamps put values past a bound in the end buckets); one bucket for all when ``scale = 0``
    (a range of 0 or infinite: callers pass 0 rather than a scale that makes inf * 0)."""
    if scale == 0.0:
        return 0
    y = (x - vmin) * scale  # x is never NaN (callers count NaN values apart)
    if y < 1.0:
        return 0
    if y < top:
        return int(y)
    return top  # also y = inf: int(inf) is undefined


# The pairs i < j enter the sort from one of three sources: the upper triangle of a square
# matrix (d_H), distances between position vectors computed on the fly (never stored), or a
# flat array in pair order (distances of wide tables from BLAS blocks). Each is read twice:
# once to count the pairs per bucket (one histogram row per part of the work), once to
# scatter (value, payload) to the bucket ranges. Square and vector sources split the rows
# into parts of balanced work (rows k and n - 1 - k together).


@numba.njit(cache=True, nogil=True, parallel=True)
def corpus_scan(d: np.ndarray, lags: np.ndarray, row_sq: np.ndarray) -> tuple[float, float, int]:
    """One pass over the upper triangle of ``d`` (n, n): ``lags[l] = sum_i d[i, i + l]``
    (``l >= 1``; :func:`diagonal_sums` with ``upper_only``, same stripes and order),
    ``row_sq[i] = sum_{j > i} d[i, j]^2``, and (min, max, NaN count) of the values."""
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
    for lag in range(n):
        lags[lag] = 0.0
    for t in range(STRIPES):
        for lag in range(n):
            lags[lag] += acc[t, lag]
    return lows.min(), highs.max(), int(nans.sum())


@numba.njit(cache=True, nogil=True, inline="always")
def _part_rows(t: int, parts: int, n: int) -> tuple[int, int]:
    """Part ``t`` of ``parts`` takes ``k`` in the returned range, and rows ``k``, ``n - 1 - k``."""
    half = (n + 1) // 2
    chunk = (half + parts - 1) // parts
    return t * chunk, min(half, (t + 1) * chunk)


@numba.njit(cache=True, nogil=True)
def _square_part(d, t, parts, vmin, scale, h, start, keys, idx):
    # Counts into h (keys empty) or scatters to the places h holds (keys of size m).
    n = d.shape[0]
    top = h.size - 1
    k0, k1 = _part_rows(t, parts, n)
    scatter = keys.size > 0
    for k in range(k0, k1):
        for rep in range(1 if n - 1 - k == k else 2):
            i = k if rep == 0 else n - 1 - k
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
def square_hist(
    d: np.ndarray, start: np.ndarray, vmin: float, scale: float, hist: np.ndarray
) -> None:
    """``hist[t, b]`` = pairs of part ``t`` in bucket ``b`` (upper triangle of ``d``)."""
    parts = hist.shape[0]
    none = np.empty(0)
    no_idx = np.empty(0, np.uint32)
    for t in numba.prange(parts):
        _square_part(d, t, parts, vmin, scale, hist[t], start, none, no_idx)


@numba.njit(cache=True, nogil=True, parallel=True)
def square_scatter(
    d: np.ndarray,
    start: np.ndarray,
    vmin: float,
    scale: float,
    pos: np.ndarray,
    keys: np.ndarray,
    idx: np.ndarray,
) -> None:
    """Write each pair's value to ``keys`` and its index (row-major upper triangle) to
    ``idx`` at the next free place of its bucket (``pos`` from :func:`bucket_offsets`)."""
    parts = pos.shape[0]
    for t in numba.prange(parts):
        _square_part(d, t, parts, vmin, scale, pos[t], start, keys, idx)


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
    k0, k1 = _part_rows(t, parts, n)
    for k in range(k0, k1):
        for rep in range(1 if n - 1 - k == k else 2):
            i = k if rep == 0 else n - 1 - k
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
        nans[t] = _vector_scan_part(p, d_h, b_h, rows, scale, hist[t], t, parts)
    return int(nans.sum())


@numba.njit(cache=True, nogil=True)
def _nested_scan_part(p, dims, d_h, b_h, rows, scales, hist, nan, t, parts):
    n = p.shape[0]
    top = hist.shape[2] - 1
    d0, d1, d2 = dims[0], dims[1], dims[2]
    s0, s1, s2 = scales[0], scales[1], scales[2]
    h0, h1, h2 = hist[0, t], hist[1, t], hist[2, t]
    k0, k1 = _part_rows(t, parts, n)
    for k in range(k0, k1):
        for rep in range(1 if n - 1 - k == k else 2):
            i = k if rep == 0 else n - 1 - k
            # Scalars, not small arrays: the nine sums stay in registers.
            he0 = ee0 = be0 = he1 = ee1 = be1 = he2 = ee2 = be2 = 0.0
            for j in range(i + 1, n):
                dh = d_h[i, j]
                bh = b_h[i, j]
                # Coordinate by coordinate as _distance: the square of a prefix of the
                # coordinates is the running sum after its last one.
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
    """:func:`vector_scan` of three tables at once, in one pass over ``d_H`` and ``B_H``: table
    ``e`` is the first ``dims[e]`` columns of ``p`` (n, dims[2]), ``dims`` non-decreasing (the
    ``mds-r`` family: ``mds-1`` is the first column of ``mds-3``). Into ``rows[e]`` (3, n) and
    ``hist[e]`` (parts, buckets) with ``scales[e]``, the figures of :func:`vector_scan` of table
    ``e`` alone (the same sums in the same order, the same parts). Returns the NaN counts (3,)."""
    parts = hist.shape[1]
    nans = np.zeros((parts, 3), np.int64)
    for t in numba.prange(parts):
        _nested_scan_part(p, dims, d_h, b_h, rows, scales, hist, nans, t, parts)
    return nans.sum(axis=0)


@numba.njit(cache=True, nogil=True)
def _vector_scatter_part(p, rank2, start, scale, row, keys, vals, t, parts):
    n = p.shape[0]
    top = row.size - 1
    k0, k1 = _part_rows(t, parts, n)
    for k in range(k0, k1):
        for rep in range(1 if n - 1 - k == k else 2):
            i = k if rep == 0 else n - 1 - k
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
        _vector_scatter_part(p, rank2, start, scale, pos[t], keys, vals, t, parts)


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
def diagonal_sums(a: np.ndarray, upper_only: bool) -> np.ndarray:
    """``out[l] = sum_i a[i, i + l]``, ``l = 0..n-1`` (``out[0] = 0`` when ``upper_only``),
    rows interleaved over :data:`STRIPES` partial sums added in a fixed order."""
    n = a.shape[0]
    acc = np.zeros((STRIPES, n))
    first = 1 if upper_only else 0
    for t in numba.prange(STRIPES):
        for i in range(t, n, STRIPES):
            for j in range(i + first, n):
                acc[t, j - i] += a[i, j]
    out = np.zeros(n)
    for t in range(STRIPES):
        for lag in range(n):
            out[lag] += acc[t, lag]
    return out
