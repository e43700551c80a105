"""Thinning at long contexts: its exact expectation, and fast seeded draws.

Thinning splits position ``i``'s ``N_i`` tokens into ``h_i = floor(N_i / 2)`` for half ``A`` and
``g_i = N_i - h_i`` for ``B`` by a multivariate hypergeometric draw. The average over every
thinning (docs/geometry.md 2b) is one product ``M^A (M^B)^T`` plus a diagonal, with
``m^A_iv = E sqrt(H / h_i)``, ``m^B_iv = E sqrt((c_iv - H) / g_i)`` and
``E X_ii = sum_v E sqrt(H (c_iv - H)) / sqrt(h_i g_i)`` for ``H`` one token's hypergeometric
share; each is a sum over the pmf from its mode outwards until the terms fall below ``1e-17``
of the mode's: exact to rounding.

Draws (the held-out halves) choose each row's ``floor(N_i/2)`` token units by selection
sampling (Knuth's Algorithm S), exactly the multivariate hypergeometric law; each row has its
own splitmix64 stream, so the result does not depend on the thread schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.jit import load_numba

__all__ = ["draw_half", "expected_halves"]

# Counts below this have their moments computed once per distinct row total (a table).
_MEMO = 256


# The compiled moments and entries, module globals (set by _kernels): as closure variables
# they would enter numba's cache key as pickled dispatchers, recompiled in every process.
_moments: Any = None
_scaled: Any = None


@cache
def _kernels() -> dict[str, Callable[..., None]]:
    global _moments, _scaled
    numba = load_numba()
    _moments = _build_moments(numba)
    _scaled = _build_scaled(numba)
    return {"expected": _build_expected(numba), "draw": _build_draw(numba)}


def _build_moments(numba: Any) -> Callable[..., tuple[float, float, float]]:
    @numba.njit(cache=True, nogil=True)
    def moments(c, total, h):  # pragma: no cover - compiled
        """(E sqrt(H), E sqrt(c - H), E sqrt(H (c - H))) for H ~ Hypergeom(c, total - c, h)."""
        lo = max(0, h - (total - c))
        hi = min(c, h)
        if c <= 64 and lo == 0:
            # Few successes (most tokens of a row): pmf(0) = prod_t (total - h - t) / (total - t)
            # (at most 2^-64, no underflow), then the ratio recurrence over the whole support.
            p = 1.0
            for t in range(c):
                p *= (total - h - t) / (total - t)
            sa = 0.0
            sb = p * math.sqrt(c)
            sd = 0.0
            mass = p
            for k in range(hi):
                p *= (c - k) * (h - k) / ((k + 1.0) * (total - c - h + k + 1.0))
                sa += p * math.sqrt(k + 1)
                sb += p * math.sqrt(c - k - 1)
                sd += p * math.sqrt((k + 1) * (c - k - 1))
                mass += p
            return sa / mass, sb / mass, sd / mass
        mode = ((h + 1) * (c + 1)) // (total + 2)
        mode = min(max(mode, lo), hi)
        # log pmf at the mode: C(c, k) C(total - c, h - k) / C(total, h).
        lp = (
            math.lgamma(c + 1.0)
            - math.lgamma(mode + 1.0)
            - math.lgamma(c - mode + 1.0)
            + math.lgamma(total - c + 1.0)
            - math.lgamma(h - mode + 1.0)
            - math.lgamma(total - c - h + mode + 1.0)
            - math.lgamma(total + 1.0)
            + math.lgamma(h + 1.0)
            + math.lgamma(total - h + 1.0)
        )
        p0 = math.exp(lp)
        sa = p0 * math.sqrt(mode)
        sb = p0 * math.sqrt(c - mode)
        sd = p0 * math.sqrt(mode * (c - mode))
        mass = p0
        # Upwards: pmf(k+1) / pmf(k) = (c - k)(h - k) / ((k + 1)(total - c - h + k + 1)).
        p = p0
        k = mode
        while k < hi:
            p *= (c - k) * (h - k) / ((k + 1.0) * (total - c - h + k + 1.0))
            k += 1
            if p < 1e-17 * p0:
                break
            sa += p * math.sqrt(k)
            sb += p * math.sqrt(c - k)
            sd += p * math.sqrt(k * (c - k))
            mass += p
        p = p0
        k = mode
        while k > lo:
            p *= k * (total - c - h + k) / ((c - k + 1.0) * (h - k + 1.0))
            k -= 1
            if p < 1e-17 * p0:
                break
            sa += p * math.sqrt(k)
            sb += p * math.sqrt(c - k)
            sd += p * math.sqrt(k * (c - k))
            mass += p
        # Renormalise: removes the rounding of the log-gamma sum at the mode (~1e-13 relative).
        return sa / mass, sb / mass, sd / mass

    return moments


def _build_scaled(numba: Any) -> Callable[..., tuple[float, float, float]]:
    @numba.njit(cache=True, nogil=True, inline="always")
    def scaled(c, total):  # pragma: no cover - compiled
        """The entries of ``M^A`` and ``M^B`` for a count ``c`` in a row of ``total`` tokens,
        and ``E sqrt(H (c - H))``."""
        h = total // 2
        g = total - h
        ea, eb, ed = _moments(c, total, h)
        va = ea / math.sqrt(h)
        # An even N_i: both halves have the same law, so the same numbers.
        return va, va if h == g else eb / math.sqrt(g), ed

    return scaled


def _build_expected(numba: Any) -> Callable[..., None]:
    @numba.njit(parallel=True, cache=True, nogil=True)
    def expected(indptr, data, out_a, out_b, diag):  # pragma: no cover - compiled
        n = indptr.size - 1
        totals = np.empty(n, np.int64)
        for i in numba.prange(n):
            total = 0
            for p in range(indptr[i], indptr[i + 1]):
                total += data[p]
            totals[i] = total
        # The entries depend on (c, N_i) only: each small count's entries are computed once
        # per distinct N_i, by the same operations as per entry.
        sizes = np.unique(totals)
        group = np.searchsorted(sizes, totals)
        # slot[s, c]: the row of `table` for count c at N_i = sizes[s]; -1 where not needed.
        slot = np.full((sizes.size, _MEMO), -1, np.int64)
        if sizes.size * _MEMO * _MEMO <= indptr[n]:
            # Few distinct N_i: every count up to N_i, cheaper than a pass finding those seen.
            for s in range(sizes.size):
                slot[s, : min(_MEMO, sizes[s] + 1)] = 0
        else:
            for i in range(n):
                for p in range(indptr[i], indptr[i + 1]):
                    if data[p] < _MEMO:
                        slot[group[i], data[p]] = 0
        need = 0
        for s in range(sizes.size):
            for c in range(_MEMO):
                if slot[s, c] == 0:
                    slot[s, c] = need
                    need += 1
        table = np.empty((need, 3))
        for s in numba.prange(sizes.size):
            for c in range(_MEMO):
                k = slot[s, c]
                if k >= 0:
                    table[k, 0], table[k, 1], table[k, 2] = _scaled(c, sizes[s])
        for i in numba.prange(n):
            total = totals[i]
            row = slot[group[i]]
            acc = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                c = data[p]
                if c < _MEMO:
                    k = row[c]
                    va, vb, ed = table[k, 0], table[k, 1], table[k, 2]
                else:
                    va, vb, ed = _scaled(c, total)
                out_a[p] = va
                out_b[p] = vb
                acc += ed
            h = total // 2
            diag[i] = acc / (math.sqrt(h) * math.sqrt(total - h))

    return expected


def _build_draw(numba: Any) -> Callable[..., None]:
    @numba.njit(parallel=True, cache=True, nogil=True)
    def draw(indptr, data, seeds, out):  # pragma: no cover - compiled
        for i in numba.prange(indptr.size - 1):
            left = 0
            for p in range(indptr[i], indptr[i + 1]):
                left += data[p]
            need = left // 2
            state = np.uint64(seeds[i])
            for p in range(indptr[i], indptr[i + 1]):
                taken = 0
                for _ in range(data[p]):
                    if need == 0:
                        break
                    # splitmix64, then 53 random bits as a uniform in [0, 1).
                    state += np.uint64(0x9E3779B97F4A7C15)
                    z = state
                    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                    z = z ^ (z >> np.uint64(31))
                    u = float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)
                    if u * left < need:
                        taken += 1
                        need -= 1
                    left -= 1
                out[p] = taken

    return draw


def _int_csr(counts: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
    c = sp.csr_matrix(counts)
    c = sp.csr_matrix(c, dtype=np.int64)
    c.sum_duplicates()
    c.sort_indices()
    return c


def expected_halves(
    counts: sp.spmatrix | sp.sparray | np.ndarray,
) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """``M^A``, ``M^B`` (csr, (n, V)) and the diagonal ``E X_ii`` (n,) of the expected thinning of
    integer counts (n, V), every row with ``N_i >= 2`` tokens (the caller checks).

    Both matrices have the sparsity pattern of ``counts`` and share its index arrays (or its
    canonical int64 copy's), read-only; ``E BC_ij = (<m^A_i, m^B_j> + <m^A_j, m^B_i>) / 2`` off the
    diagonal."""
    c = _int_csr(counts)
    a = np.empty(c.data.size)
    b = np.empty(c.data.size)
    diag = np.empty(c.shape[0])
    _kernels()["expected"](c.indptr, c.data, a, b, diag)
    ma = sp.csr_matrix((a, c.indices, c.indptr), shape=c.shape)
    mb = sp.csr_matrix((b, c.indices, c.indptr), shape=c.shape)
    return ma, mb, diag


def draw_half(
    counts: sp.spmatrix | sp.sparray | np.ndarray, rng: np.random.Generator
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """One seeded thinning of integer counts (n, V): ``(C^A, C^B)``, int64 csr (n, V) without
    explicit zeros, ``floor(N_i/2)`` tokens of row ``i`` in ``C^A``; ``rng`` seeds one splitmix64
    stream a row."""
    c = _int_csr(counts)
    seeds = rng.integers(0, np.iinfo(np.int64).max, size=c.shape[0], dtype=np.int64)
    taken = np.zeros(c.data.size, dtype=np.int64)
    _kernels()["draw"](c.indptr, c.data, seeds, taken)
    a = sp.csr_matrix((taken, c.indices.copy(), c.indptr.copy()), shape=c.shape)
    b = sp.csr_matrix((c.data - taken, c.indices.copy(), c.indptr.copy()), shape=c.shape)
    a.eliminate_zeros()
    b.eliminate_zeros()
    return a, b
