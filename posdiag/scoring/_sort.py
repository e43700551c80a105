"""Compiled bucket sort of :mod:`posdiag.scoring._ranks`: each bucket of scattered pairs sorted
in a thread's buffer (in place when it outgrows it; one MSD radix sort for crowded ranges), and
its tie groups walked for exact doubled average ranks or rank cross sums in two int64 limbs."""

from __future__ import annotations

import numpy as np

from .._util.jit import load_numba

numba = load_numba()

__all__ = ["LIMB_BITS", "bucket_offsets", "sort_buckets"]

# Two int64 limbs hold value = hi * 2^31 + lo with 0 <= lo < 2^31 after each addition.
LIMB_BITS = 31
_LIMB_MASK = (1 << LIMB_BITS) - 1
_SIGN = np.uint64(1 << 63)
_NEG_ZERO = np.uint64(1 << 63)


@numba.njit(cache=True, nogil=True, inline="always")
def _mac(hi: int, lo: int, a: int, b: int) -> tuple[int, int]:
    """``(hi, lo) += a * b`` exactly for ``|a| < 2^30``, ``|b| < 2^62``, a total below ``2^93``."""
    b_lo = b & _LIMB_MASK  # b = b_hi * 2^31 + b_lo with 0 <= b_lo < 2^31, also for b < 0
    b_hi = b >> LIMB_BITS
    lo += a * b_lo
    hi += a * b_hi + (lo >> LIMB_BITS)
    return hi, lo & _LIMB_MASK


@numba.njit(cache=True, nogil=True, inline="always")
def _order_key(bits: np.uint64) -> np.uint64:
    """A float64's bit pattern as a uint64 that sorts like the float (``-0.0`` as ``+0.0``)."""
    if bits == _NEG_ZERO:
        bits = np.uint64(0)
    if bits & _SIGN:
        return ~bits
    return bits | _SIGN


# Sub-buckets of at most SMALL pairs are sorted by insertion; a bucket of n pairs is split into
# about n << SUB_BITS sub-buckets, so few hold two or more.
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
def _sort_bucket(src, vals, lo, hi, bk, bv, hist, bits):
    """Sort the float64 bit patterns ``src[lo:hi]`` (payloads ``vals``) into order keys
    ``bk[:hi - lo]`` and payloads ``bv``; False (nothing written) when all keys are equal.

    A counting pass on the top bits of ``key - min`` into about ``4 (hi - lo)`` sub-buckets,
    then insertion sort, or :func:`_radix_sort` of crowded sub-buckets."""
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
    s = np.int64(0)
    for b in range(count):
        e = hist[b]  # the end of sub-bucket b now
        if e - s > 1:
            _radix_sort(bk, bv, s, e, bits)
        s = e
    return True


@numba.njit(cache=True, nogil=True)
def _radix_sort(keys, vals, lo, hi, bits):
    """Sort the order keys ``keys[lo:hi]`` and ``vals`` in place: an MSD radix sort permuting
    by cycles (American flag sort) on ``bits`` of ``key - min`` at a time; :data:`SMALL` keys
    by insertion. Not stable."""
    nb_max = 1 << bits
    counts = np.empty(nb_max, np.int64)
    heads = np.empty(nb_max, np.int64)
    ends = np.empty(nb_max, np.int64)
    # Depth-first: at most nb_max - 1 ranges wait per level, 64 / bits + 1 levels.
    stack = np.empty((nb_max * (64 // bits + 2), 2), np.int64)
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
        digit = min(bits, width)
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
    """Sort each bucket ``[starts[b], starts[b + 1])`` of float ``keys`` (payloads ``vals``) in a
    thread's buffer of ``cap`` pairs (larger ones in place) and walk its tie groups: with
    ``ranks``, ``vals`` are pair indices and ``rank2`` gets twice the average ranks; else
    ``vals`` are the doubled corpus ranks and their cross sum is accumulated.

    Returns limbs ``(hi, lo, tie_hi, tie_lo)`` per thread, shape (threads, 4).
    """
    src = keys.view(np.uint64)
    m = keys.size
    buckets = starts.size - 1
    out = np.zeros((threads, 4), np.int64)
    equal = np.empty(0, np.uint64)  # "all keys equal" for the walks
    for t in numba.prange(threads):
        hi = np.int64(0)  # typed once (a literal 0 compiles the walks twice)
        lo = np.int64(0)
        th = np.int64(0)
        tl = np.int64(0)
        bk0 = np.empty(cap, np.uint64)
        bv0 = np.empty(cap, np.uint32)
        hist0 = np.empty(cap << SUB_BITS, np.int64)
        for b in range(t, buckets, threads):
            first = starts[b]
            size = starts[b + 1] - first
            if size == 0:
                continue
            if size > cap:  # a crowded value range: sorted where it lies
                for q in range(first, first + size):
                    src[q] = _order_key(src[q])
                _radix_sort(src, vals, first, first + size, bits)
                sorted_keys, payload = src[first : first + size], vals[first : first + size]
            elif _sort_bucket(src, vals, first, first + size, bk0, bv0, hist0, bits):
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
