"""Compiled kernels of :mod:`posdiag.scoring.scores`: pair distances, bucket sort, exact rank sums.

Imported only when a score needs them (``n(n-1)/2`` above ``fastscore.COMPILED_FROM_PAIRS``):
numba's import and the kernels' first compilation cost about a second, which the bundled corpus
should not pay.

Exactness: Spearman's rho is the Pearson correlation of average ranks. Twice an average rank
is an integer (``start + end + 1`` of its tie group), so every sum the correlation needs is an
integer sum; the kernels accumulate them exactly in two int64 limbs (:func:`_mac`), and the one
rounding left is the final division (tests/scoring/test_ranks.py checks it against
``scipy.stats.spearmanr``).
"""

from __future__ import annotations

import numpy as np

from .._util.jit import load_numba

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

# Two int64 limbs hold value = hi * 2^31 + lo with 0 <= lo < 2^31 after each addition.
LIMB_BITS = 31
_LIMB_MASK = (1 << LIMB_BITS) - 1
_SIGN = np.uint64(1 << 63)
_NEG_ZERO = np.uint64(1 << 63)
_ABS = np.uint64((1 << 63) - 1)
_INF_BITS = np.uint64(0x7FF0000000000000)


@numba.njit(cache=True, nogil=True, inline="always")
def _mac(hi: int, lo: int, a: int, b: int) -> tuple[int, int]:
    """``(hi, lo) += a * b`` exactly for ``|a| < 2^30``, ``|b| < 2^62`` (int64 limbs), while the
    running total stays below ``2^93`` in magnitude (``hi < 2^62``)."""
    b_lo = b & _LIMB_MASK  # b = b_hi * 2^31 + b_lo with 0 <= b_lo < 2^31, also for b < 0
    b_hi = b >> LIMB_BITS
    lo += a * b_lo
    hi += a * b_hi + (lo >> LIMB_BITS)
    return hi, lo & _LIMB_MASK


@numba.njit(cache=True, nogil=True, inline="always")
def _order_key(bits: np.uint64) -> np.uint64:
    """Map the bit pattern of a float64 to a uint64 that sorts like the float (``-0.0`` as
    ``+0.0``); NaN patterns land above every other key (callers check them apart)."""
    if bits == _NEG_ZERO:
        bits = np.uint64(0)
    if bits & _SIGN:
        return ~bits
    return bits | _SIGN


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


@numba.njit(cache=True, nogil=True)
def _count(keys, lo, hi, kmin, shift, mask, hist):
    for q in range(lo, hi):
        hist[np.intp(((keys[q] - kmin) >> shift) & mask)] += 1


@numba.njit(cache=True, nogil=True)
def _scatter(src_k, src_v, dst_k, dst_v, lo, hi, kmin, shift, mask, pos):
    for q in range(lo, hi):
        k = src_k[q]
        d = np.intp(((k - kmin) >> shift) & mask)
        at = pos[d]
        pos[d] = at + 1
        dst_k[at] = k
        dst_v[at] = src_v[q]


# Sub-buckets of at most this many pairs are sorted by insertion (stable); a bucket of n
# pairs is split into about n << SUB_BITS sub-buckets, so few hold two or more.
SMALL = 16
SUB_BITS = 2


@numba.njit(cache=True, nogil=True, inline="always")
def _insertion(keys, vals, lo, hi):  # stable, in place on [lo, hi)
    for q in range(lo + 1, hi):
        k = keys[q]
        v = vals[q]
        r = q - 1
        while r >= lo and keys[r] > k:
            keys[r + 1] = keys[r]
            vals[r + 1] = vals[r]
            r -= 1
        keys[r + 1] = k
        vals[r + 1] = v


@numba.njit(cache=True, nogil=True, inline="always")
def _bit_width(span: np.uint64) -> int:
    """Bits of ``span`` up to its highest set bit (0 for 0)."""
    width = 0
    while width < 64 and (span >> np.uint64(width)) != np.uint64(0):
        width += 1
    return width


@numba.njit(cache=True, nogil=True)
def _lsd_segment(keys, vals, keys_tmp, vals_tmp, lo, hi, bits):  # sorts [lo, hi) in place
    if hi - lo < 2:
        return
    if hi - lo <= SMALL:
        _insertion(keys, vals, lo, hi)  # the many tiny buckets
        return
    kmin = keys[lo]
    kmax = keys[lo]
    for q in range(lo, hi):
        kmin = min(kmin, keys[q])
        kmax = max(kmax, keys[q])
    width = _bit_width(kmax - kmin)
    if width == 0:
        return
    passes = (width + bits - 1) // bits
    digit = (width + passes - 1) // passes
    buckets = 1 << digit
    mask = np.uint64(buckets - 1)
    pos = np.empty(buckets, np.int64)
    swapped = False
    for ps in range(passes):
        shift = np.uint64(ps * digit)
        src_k, src_v = (keys_tmp, vals_tmp) if swapped else (keys, vals)
        dst_k, dst_v = (keys, vals) if swapped else (keys_tmp, vals_tmp)
        pos[:] = 0
        _count(src_k, lo, hi, kmin, shift, mask, pos)
        total = lo
        for b in range(buckets):
            c = pos[b]
            pos[b] = total
            total += c
        _scatter(src_k, src_v, dst_k, dst_v, lo, hi, kmin, shift, mask, pos)
        swapped = not swapped
    if swapped:
        keys[lo:hi] = keys_tmp[lo:hi]
        vals[lo:hi] = vals_tmp[lo:hi]


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


@numba.njit(cache=True, nogil=True)
def bucket_offsets(hist: np.ndarray) -> np.ndarray:
    """Turn counts ``hist[t, b]`` into first write places (bucket-major, then part), in place;
    returns the bucket starts, shape (buckets + 1,)."""
    parts, buckets = hist.shape
    starts = np.empty(buckets + 1, np.int64)
    total = 0
    for b in range(buckets):
        starts[b] = total
        for t in range(parts):
            c = hist[t, b]
            hist[t, b] = total
            total += c
    starts[buckets] = total
    return starts


@numba.njit(cache=True, nogil=True)
def _sort_bucket(src, vals, lo, hi, bk, bv, tk, tv, hist, bits):
    """Sort the float64 bit patterns ``src[lo:hi]`` (payloads ``vals[lo:hi]``) into order
    keys ``bk[:hi - lo]`` and payloads ``bv``. Returns False (writing nothing) when all keys
    are equal.

    One counting pass on the top bits of ``key - min`` into about ``4 (hi - lo)``
    sub-buckets (values within a bucket are close to uniform, so few sub-buckets hold two
    keys), then one insertion sort over the whole range (it only moves keys within their
    sub-bucket); when some sub-bucket is crowded, a radix sort of those
    (:func:`_lsd_segment`, scratch ``tk``/``tv``) and insertion for the others. Stable."""
    size = hi - lo
    kmin = _order_key(src[lo])
    kmax = kmin
    for q in range(lo + 1, hi):
        k = _order_key(src[q])
        kmin = min(kmin, k)
        kmax = max(kmax, k)
    if kmin == kmax:
        return False
    width = _bit_width(kmax - kmin)
    sub = 0
    while (2 << sub) <= size:  # 2^sub <= size
        sub += 1
    sub = min(sub + SUB_BITS, width)
    shift = np.uint64(width - sub)
    count = 1 << sub
    for b in range(count):
        hist[b] = 0
    for q in range(lo, hi):
        hist[np.intp((_order_key(src[q]) - kmin) >> shift)] += 1
    total = 0
    crowded = 0
    for b in range(count):
        c = hist[b]
        hist[b] = total
        total += c
        crowded = max(crowded, c)
    for q in range(lo, hi):
        k = _order_key(src[q])
        slot = np.intp((k - kmin) >> shift)
        at = hist[slot]
        hist[slot] = at + 1
        bk[at] = k
        bv[at] = vals[q]
    if crowded <= SMALL:
        _insertion(bk, bv, 0, size)
        return True
    s = 0
    for b in range(count):
        e = hist[b]  # the end of sub-bucket b now
        if e - s > SMALL:
            _lsd_segment(bk, bv, tk, tv, s, e, bits)
        elif e - s > 1:
            _insertion(bk, bv, s, e)
        s = e
    return True


# Digit of the in-place sort of buckets larger than the thread buffers.
FLAG_BITS = 8


@numba.njit(cache=True, nogil=True)
def _sort_in_place(keys, vals, lo, hi):
    """Sort ``keys[lo:hi]`` (float64 bit patterns, replaced by their order keys) with the
    payloads ``vals`` in place and no memory beyond the digit counts: an MSD radix sort whose
    passes permute by cycles (American flag sort) on :data:`FLAG_BITS` of ``key - min`` at a
    time, from the top of the range's span; ranges of :data:`SMALL` keys by insertion. Not
    stable (tie groups are walked as a whole)."""
    for q in range(lo, hi):
        keys[q] = _order_key(keys[q])
    nb_max = 1 << FLAG_BITS
    counts = np.empty(nb_max, np.int64)
    heads = np.empty(nb_max, np.int64)
    ends = np.empty(nb_max, np.int64)
    # Depth-first: at most nb_max - 1 ranges wait per level, 64 / FLAG_BITS + 1 levels.
    stack = np.empty((nb_max * (64 // FLAG_BITS + 2), 2), np.int64)
    top = 0
    stack[0, 0] = lo
    stack[0, 1] = hi
    top = 1
    while top:
        top -= 1
        a = stack[top, 0]
        e = stack[top, 1]
        if e - a <= SMALL:
            _insertion(keys, vals, a, e)
            continue
        kmin = keys[a]
        kmax = kmin
        for q in range(a + 1, e):
            kmin = min(kmin, keys[q])
            kmax = max(kmax, keys[q])
        if kmin == kmax:
            continue
        width = _bit_width(kmax - kmin)
        digit = min(FLAG_BITS, width)
        shift = np.uint64(width - digit)
        nb = 1 << digit
        for b in range(nb):
            counts[b] = 0
        for q in range(a, e):
            counts[np.intp((keys[q] - kmin) >> shift)] += 1
        total = a
        for b in range(nb):
            heads[b] = total
            total += counts[b]
            ends[b] = total
        for b in range(nb):
            while heads[b] < ends[b]:
                k = keys[heads[b]]
                v = vals[heads[b]]
                d = np.intp((k - kmin) >> shift)
                while d != b:  # carry the key to its digit's next free place
                    at = heads[d]
                    heads[d] = at + 1
                    k, keys[at] = keys[at], k
                    v, vals[at] = vals[at], v
                    d = np.intp((k - kmin) >> shift)
                keys[heads[b]] = k
                vals[heads[b]] = v
                heads[b] += 1
        start = a
        for b in range(nb):
            if ends[b] - start > 1:
                stack[top, 0] = start
                stack[top, 1] = ends[b]
                top += 1
            start = ends[b]


@numba.njit(cache=True, nogil=True)
def _walk_ranks(keys, payload, size, first, rank2, th, tl):
    """Tie groups of the sorted ``keys[:size]`` at places ``first + ...`` of the whole order:
    ``rank2[payload] = start + end + 1`` (twice the average 1-based rank); ``t^3 - t`` added
    to the limbs ``(th, tl)``. ``keys`` empty: all ``size`` keys are equal."""
    s = 0
    while s < size:
        e = size
        if keys.size:
            k = keys[s]
            e = s + 1
            while e < size and keys[e] == k:
                e += 1
        r = 2 * first + s + e + 1
        for q in range(s, e):
            rank2[payload[q]] = r
        t = e - s
        if t > 1:
            th, tl = _mac(th, tl, t, t * t - 1)
        s = e
    return th, tl


@numba.njit(cache=True, nogil=True)
def _walk_cross(keys, payload, size, first, m, hi, lo, th, tl):
    """As :func:`_walk_ranks` with payloads the doubled corpus ranks: adds ``c_E sum c_H``
    (``c = 2 rank - (m + 1)``) of each group to the limbs ``(hi, lo)``."""
    off = m + 1
    s = 0
    while s < size:
        acc = np.int64(payload[s]) - off
        e = s + 1
        if keys.size:
            k = keys[s]
            while e < size and keys[e] == k:
                acc += np.int64(payload[e]) - off
                e += 1
        else:
            for q in range(1, size):
                acc += np.int64(payload[q]) - off
            e = size
        # c_E = 2 * (first + s + 1 + first + e) / 2 - (m + 1)
        hi, lo = _mac(hi, lo, 2 * first + s + e - m, acc)
        t = e - s
        if t > 1:
            th, tl = _mac(th, tl, t, t * t - 1)
        s = e
    return hi, lo, th, tl


@numba.njit(cache=True, nogil=True, parallel=True)
def sort_buckets(
    keys: np.ndarray,
    vals: np.ndarray,
    starts: np.ndarray,
    rank2: np.ndarray,
    ranks: bool,
    threads: int,
    bits: int,
    cap: int,
) -> np.ndarray:
    """Sort each bucket ``[starts[b], starts[b + 1])`` of float ``keys`` (payloads ``vals``)
    in a buffer of the thread's and walk its tie groups: with ``ranks``, ``vals`` are pair
    indices and ``rank2`` gets twice the average ranks (:func:`_walk_ranks`); else ``vals``
    are the doubled corpus ranks and the cross sum is accumulated (:func:`_walk_cross`).
    Equal values share a bucket, so no tie group crosses one. Buffers hold ``cap`` pairs;
    larger buckets are sorted in place (:func:`_sort_in_place`), so memory stays bounded
    whatever the distribution of the values.

    Returns limbs ``(hi, lo, tie_hi, tie_lo)`` per thread, shape (threads, 4).
    """
    src = keys.view(np.uint64)
    m = keys.size
    buckets = starts.size - 1
    out = np.zeros((threads, 4), np.int64)
    equal = np.empty(0, np.uint64)  # "all keys equal" for the walks
    for t in numba.prange(threads):
        hi = 0
        lo = 0
        th = 0
        tl = 0
        bk0 = np.empty(cap, np.uint64)
        bv0 = np.empty(cap, np.uint32)
        tk0 = np.empty(cap, np.uint64)
        tv0 = np.empty(cap, np.uint32)
        hist0 = np.empty(cap << SUB_BITS, np.int64)
        for b in range(t, buckets, threads):
            first = starts[b]
            size = starts[b + 1] - first
            if size == 0:
                continue
            if size > cap:
                # Too large for the buffers (a crowded value range): sorted where it lies.
                _sort_in_place(src, vals, first, first + size)
                sorted_keys, payload = src[first : first + size], vals[first : first + size]
            elif _sort_bucket(src, vals, first, first + size, bk0, bv0, tk0, tv0, hist0, bits):
                sorted_keys, payload = bk0, bv0
            else:
                sorted_keys, payload = equal, vals[first : first + size]
            if ranks:
                th, tl = _walk_ranks(sorted_keys, payload, size, first, rank2, th, tl)
            else:
                hi, lo, th, tl = _walk_cross(sorted_keys, payload, size, first, m, hi, lo, th, tl)
        out[t, 0] = hi
        out[t, 1] = lo
        out[t, 2] = th
        out[t, 3] = tl
    return out


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
