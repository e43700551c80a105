"""Compiled kernels of :mod:`posdiag.fastscore`: pair distances, radix sort, exact rank sums.

Imported only when a score needs them (``n(n-1)/2`` above ``fastscore.COMPILED_FROM_PAIRS``):
numba's import and the kernels' first compilation cost about a second, which the bundled corpus
should not pay.

Exactness: Spearman's rho is the Pearson correlation of average ranks. Twice an average rank
is an integer (``start + end + 1`` of its tie group), so every sum the correlation needs is an
integer sum; the kernels accumulate them exactly in two int64 limbs (:func:`_mac`), and the one
rounding left is the final division (tests/test_fastscore_ranks.py checks it against
``scipy.stats.spearmanr``).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "LIMB_BITS",
    "STRIPES",
    "block_distances",
    "bucket_sort",
    "diagonal_sums",
    "direct_distances",
    "rank_groups",
    "rank_lag_sums",
    "spearman_groups",
    "upper_values",
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


@numba.njit(cache=True, nogil=True, inline="always")
def _upper_row(d, start, out, row_sq, i):
    n = d.shape[0]
    acc = 0.0
    base = start[i] - i - 1
    for j in range(i + 1, n):
        v = d[i, j]
        out[base + j] = v
        acc += v * v
    row_sq[i] = acc


@numba.njit(cache=True, nogil=True, parallel=True)
def upper_values(d: np.ndarray, start: np.ndarray, out: np.ndarray, row_sq: np.ndarray) -> None:
    """Copy the upper triangle ``(i, j > i)`` of a square matrix into ``out``, row-major;
    ``row_sq[i] = sum_j d[i, j]^2`` over ``j > i``. Rows ``k`` and ``n - 1 - k`` go to the same
    task so every task has about ``n`` entries."""
    n = d.shape[0]
    for k in numba.prange((n + 1) // 2):
        _upper_row(d, start, out, row_sq, k)
        if n - 1 - k != k:
            _upper_row(d, start, out, row_sq, n - 1 - k)


@numba.njit(cache=True, nogil=True, inline="always")
def _direct_row(p, d_h, b_h, start, out, rows, i):
    n, dim = p.shape
    he = 0.0
    ee = 0.0
    be = 0.0
    base = start[i] - i - 1
    for j in range(i + 1, n):
        acc = 0.0
        for c in range(dim):
            diff = p[i, c] - p[j, c]
            acc += diff * diff
        dist = np.sqrt(acc)
        out[base + j] = dist
        he += d_h[i, j] * dist
        ee += acc
        be += b_h[i, j] * acc
    rows[0, i] = he
    rows[1, i] = ee
    rows[2, i] = be


@numba.njit(cache=True, nogil=True, parallel=True)
def direct_distances(
    p: np.ndarray,
    d_h: np.ndarray,
    b_h: np.ndarray,
    start: np.ndarray,
    out: np.ndarray,
    rows: np.ndarray,
) -> None:
    """``out[pair(i, j)] = ||p_i - p_j||`` for ``i < j`` (summed coordinate by coordinate, as
    ``scipy.spatial.distance.pdist``), and per row ``i`` over ``j > i``: ``rows[0, i] = sum
    d_H d_E``, ``rows[1, i] = sum d_E^2``, ``rows[2, i] = sum B_H d_E^2``.
    Rows ``k`` and ``n - 1 - k`` go to the same task (balanced work)."""
    n = p.shape[0]
    for k in numba.prange((n + 1) // 2):
        _direct_row(p, d_h, b_h, start, out, rows, k)
        if n - 1 - k != k:
            _direct_row(p, d_h, b_h, start, out, rows, n - 1 - k)


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
) -> None:
    """Rows ``lo..lo+len(gram)-1`` from inner products ``gram[r, c] = p_{lo+r} . p_{lo+c}`` and
    squared norms ``sq``: ``sqrt(max(0, (sq_i + sq_j) - 2 gram))`` right of the diagonal (the
    operations of ``fastscore.upper_distances``), with the sums of :func:`direct_distances`."""
    count, cols = gram.shape
    n = lo + cols
    for r in numba.prange(count):
        i = lo + r
        he = 0.0
        ee = 0.0
        be = 0.0
        base = start[i] - i - 1
        for j in range(i + 1, n):
            d2 = max(0.0, (sq[i] + sq[j]) - 2.0 * gram[r, j - lo])
            dist = np.sqrt(d2)
            out[base + j] = dist
            he += d_h[i, j] * dist
            ee += d2
            be += b_h[i, j] * d2
        rows[0, i] = he
        rows[1, i] = ee
        rows[2, i] = be


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


@numba.njit(cache=True, nogil=True)
def _lsd_segment(keys, vals, keys_tmp, vals_tmp, lo, hi, bits):  # sorts [lo, hi) in place
    if hi - lo < 2:
        return
    if hi - lo <= 16:
        # Insertion sort (stable) for the many tiny buckets.
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
        return
    kmin = keys[lo]
    kmax = keys[lo]
    for q in range(lo, hi):
        kmin = min(kmin, keys[q])
        kmax = max(kmax, keys[q])
    span = kmax - kmin
    width = 0
    while width < 64 and (span >> np.uint64(width)) != np.uint64(0):
        width += 1
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
    """Monotone in ``x`` (a subtraction and a product by constants round monotonically);
    one bucket for all when the range is 0 or infinite (``scale = 0``: inf * 0 would be NaN)."""
    if scale == 0.0:
        return 0
    return min(top, int((x - vmin) * scale))


@numba.njit(cache=True, nogil=True, parallel=True)
def bucket_sort(
    values: np.ndarray,
    bits_of: np.ndarray,
    vals: np.ndarray,
    keys_out: np.ndarray,
    vals_out: np.ndarray,
    vals_tmp: np.ndarray,
    buckets: int,
    digit_bits: int,
    threads: int,
) -> int:
    """Sort float64 ``values`` (``bits_of`` = their uint64 view) carrying uint32 ``vals`` (or,
    when ``vals`` is empty, each value's index): ``keys_out`` gets the order keys ascending,
    ``vals_out`` the payloads in that order.

    One parallel scatter into ``buckets`` ranges of equal width in *value* (a monotone map, so
    equal values share a bucket and buckets are ordered), then each bucket, small enough to
    stay in cache, is radix-sorted on the few bits its keys still differ in
    (:func:`_lsd_segment`, with ``bits_of``/``vals_tmp`` as scratch: ``values`` is destroyed).
    Stable. Returns the NaN count; nothing is sorted when it is not 0.
    """
    m = values.size
    with_vals = vals.size == m
    threads = max(1, min(threads, m))
    chunk = (m + threads - 1) // threads
    lows = np.empty(threads)
    highs = np.empty(threads)
    nans = np.zeros(threads, np.int64)
    for t in numba.prange(threads):
        a = np.inf
        b = -np.inf
        nan = 0
        for q in range(t * chunk, min(m, (t + 1) * chunk)):
            x = values[q]
            if x != x:
                nan += 1
            else:
                a = min(a, x)
                b = max(b, x)
        lows[t] = a
        highs[t] = b
        nans[t] = nan
    if nans.sum() or m == 0:
        return int(nans.sum())
    vmin = lows.min()
    vmax = highs.max()
    scale = buckets / (vmax - vmin) if vmax > vmin and np.isfinite(vmax - vmin) else 0.0
    top = buckets - 1
    hist = np.zeros((threads, buckets), np.int64)
    for t in numba.prange(threads):
        for q in range(t * chunk, min(m, (t + 1) * chunk)):
            hist[t, _bucket(values[q], vmin, scale, top)] += 1
    starts = np.empty(buckets + 1, np.int64)
    total = 0
    for b in range(buckets):
        starts[b] = total
        for t in range(threads):
            c = hist[t, b]
            hist[t, b] = total
            total += c
    starts[buckets] = total
    for t in numba.prange(threads):
        row = hist[t]
        for q in range(t * chunk, min(m, (t + 1) * chunk)):
            b = _bucket(values[q], vmin, scale, top)
            at = row[b]
            row[b] = at + 1
            keys_out[at] = _order_key(bits_of[q])
            vals_out[at] = vals[q] if with_vals else q
    # Buckets interleaved over threads: crowded neighbouring buckets go to different threads.
    for t in numba.prange(threads):
        for b in range(t, buckets, threads):
            _lsd_segment(
                keys_out, vals_out, bits_of, vals_tmp, starts[b], starts[b + 1], digit_bits
            )
    return 0


@numba.njit(cache=True, nogil=True)
def rank_groups(keys: np.ndarray, idx: np.ndarray, rank2: np.ndarray) -> tuple[int, int]:
    """Twice the average rank of each sorted key, written at its original place:
    ``rank2[idx[q]] = start + end + 1`` of its tie group ``[start, end)``.

    Returns ``sum_groups t^3 - t`` (``t`` = group size) as limbs ``(hi, lo)``.
    """
    m = keys.size
    hi = 0
    lo = 0
    s = 0
    while s < m:
        e = s + 1
        k = keys[s]
        while e < m and keys[e] == k:
            e += 1
        r = s + e + 1
        for q in range(s, e):
            rank2[idx[q]] = r
        t = e - s
        if t > 1:
            hi, lo = _mac(hi, lo, t, t * t - 1)
        s = e
    return hi, lo


@numba.njit(cache=True, nogil=True)
def spearman_groups(keys: np.ndarray, rank2_h: np.ndarray) -> tuple[int, int, int, int]:
    """For keys sorted with twice the corpus ranks ``rank2_h`` carried along:
    ``sum_p c_E(p) c_H(p)`` with ``c = 2 rank - (m + 1)`` (centred doubled average ranks), and
    ``sum_groups t^3 - t`` of the keys' ties, as limbs ``(hi, lo, tie_hi, tie_lo)``."""
    m = keys.size
    off = m + 1
    hi = 0
    lo = 0
    tie_hi = 0
    tie_lo = 0
    s = 0
    while s < m:
        k = keys[s]
        acc = int(rank2_h[s]) - off
        e = s + 1
        while e < m and keys[e] == k:
            acc += int(rank2_h[e]) - off
            e += 1
        # c_E = 2 * (s + 1 + e) / 2 - (m + 1)
        hi, lo = _mac(hi, lo, s + e - m, acc)
        t = e - s
        if t > 1:
            tie_hi, tie_lo = _mac(tie_hi, tie_lo, t, t * t - 1)
        s = e
    return hi, lo, tie_hi, tie_lo


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
