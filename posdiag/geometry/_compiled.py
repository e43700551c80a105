"""The compiled (numba) kernels of the Gram products, and the one size from which geometry compiles.

Below :data:`COMPILED_FROM` positions every geometry computation runs in numpy and scipy, so
the bundled corpus (76 positions) never imports numba or waits for a compile. The kernels are
built on first use and cached on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.jit import load_numba

__all__ = ["COMPILED_FROM", "rare_kernels", "split_kernels"]

# Positions from which geometry runs compiled kernels: below, a plain sparse product and numpy
# passes (the same numbers, to rounding), and no numba import or compile for small corpora.
COMPILED_FROM = 128


@cache
def split_kernels() -> dict[str, Callable[..., None]]:
    """Compiled passes of :func:`~._gram._split` and ``_split_gram``: rows (or ranges of rows)
    in parallel, each writing only its own block rows and slices; the transposed split is one
    serial pass (its writes interleave across columns)."""
    numba = load_numba()

    @numba.njit(parallel=True, cache=True, nogil=True)
    def count_rows(indptr, indices, position, counts):  # pragma: no cover - compiled
        for i in numba.prange(indptr.size - 1):
            c = 0
            for p in range(indptr[i], indptr[i + 1]):
                if position[indices[p]] < 0:
                    c += 1
            counts[i] = c

    @numba.njit(parallel=True, cache=True, nogil=True)
    def split_rows(indptr, indices, data, position, block, ptr, idx, val):  # pragma: no cover
        for i in numba.prange(indptr.size - 1):
            q = ptr[i]
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                k = position[j]
                if k >= 0:
                    block[i, k] = data[p]
                else:
                    idx[q] = j
                    val[q] = data[p]
                    q += 1

    @numba.njit(cache=True, nogil=True)
    def split_columns(indptr, indices, data, position, block, nxt, idx, val):  # pragma: no cover
        for i in range(indptr.size - 1):
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                k = position[j]
                if k >= 0:
                    block[i, k] = data[p]
                else:
                    q = nxt[j]
                    idx[q] = i
                    val[q] = data[p]
                    nxt[j] = q + 1

    @numba.njit(parallel=True, cache=True, nogil=True)
    def split_gram(
        indptr,
        indices,
        data,
        position,
        bounds,
        nxt,
        start,
        t_ptr,
        block,
        r_ptr,
        slot,
        stop,
        last,
        t_gap,
        t_val,
    ):  # pragma: no cover - compiled
        # last[t, j]: range t's last row holding token j so far.
        for t in numba.prange(bounds.size - 1):
            c = start[t]
            for i in range(bounds[t], bounds[t + 1]):
                for p in range(indptr[i], indptr[i + 1]):
                    j = indices[p]
                    k = position[j]
                    if k >= 0:
                        block[i, k] = data[p]
                    else:
                        q = nxt[t, j]
                        t_gap[q] = i if last[t, j] < 0 else i - last[t, j]
                        last[t, j] = i
                        t_val[q] = data[p]
                        slot[c] = q
                        stop[c] = t_ptr[j + 1]
                        c += 1
                        nxt[t, j] = q + 1
                r_ptr[i + 1] = c

    return {
        "split_gram": split_gram,
        "count_rows": count_rows,
        "split_rows": split_rows,
        "split_columns": split_columns,
    }


@cache
def rare_kernels() -> list[Any]:
    """``[rare, upper, upper32]``: the rare tokens' part of a product
    (:func:`~._gram.cross_product`, prefetching the list of the token after next) and of a
    Gram's upper triangle in float64 and float32 (:func:`~._gram._run_upper`)."""
    return _build_rare(load_numba())


# Tokens ahead whose list the rare kernels prefetch (1 and 2 were fastest; benchmarks/NOTES.md).
PREFETCH_AHEAD = 2


# The prefetch intrinsic, a module global (set by _build_rare): as a closure variable it would
# enter numba's cache key pickled, and the kernel be recompiled in every process.
_prefetch: Any = None


def _build_rare(numba: Any) -> list[Callable[..., None]]:  # pragma: no cover - compiled
    global _prefetch
    _prefetch = _prefetch_intrinsic()

    # A whole product (cross_product): row i meets every row of each of its tokens' lists.
    @numba.njit(parallel=True, cache=True, nogil=True)
    def rare(a_ptr, a_idx, a_val, lo, hi, t_ptr, t_idx, t_val, out):
        for r in numba.prange(hi - lo):
            i = lo + r
            row = out[r]
            end = a_ptr[i + 1]
            for p in range(a_ptr[i], end):
                if p + PREFETCH_AHEAD < end:
                    start = t_ptr[a_idx[p + PREFETCH_AHEAD]]
                    _prefetch(t_idx, start)
                    _prefetch(t_val, start)
                j = a_idx[p]
                x = a_val[p]
                for q in range(t_ptr[j], t_ptr[j + 1]):
                    row[t_idx[q]] += x * t_val[q]

    # The upper triangle of a Gram (symmetric_product): row i meets each of its tokens' rows
    # from its own place in the token's list on (columns >= i), written at column - col0.
    @numba.njit(parallel=True, cache=True, nogil=True)
    def upper(r_ptr, slot, stop, t_gap, t_val, lo, hi, out, col0, shift, level):
        for r in numba.prange(hi - lo):
            i = lo + r
            row = out[r]
            end = r_ptr[i + 1]
            for p in range(r_ptr[i], end):
                if p + PREFETCH_AHEAD < end:
                    start = slot[p + PREFETCH_AHEAD]
                    _prefetch(t_gap, start)
                    _prefetch(t_val, start)
                first = slot[p]
                x = np.float64(t_val[first])
                row[i - col0] += x * x
                col = i
                for q in range(first + 1, stop[p]):
                    col += t_gap[q]
                    row[col - col0] += x * np.float64(t_val[q])
            if shift.size > 0:
                si = shift[i] + level
                for j in range(i, out.shape[1] + col0):
                    row[j - col0] += si + shift[j]

    # float32 lists: each row's rare part off the diagonal is summed in a float32 row of its
    # own (half the bytes) and added once with the level terms; the diagonal in float64.
    @numba.njit(parallel=True, cache=True, nogil=True)
    def upper32(r_ptr, slot, stop, t_gap, t_val, lo, hi, out, col0, shift, level):
        width = out.shape[1] + col0
        for r in numba.prange(hi - lo):
            i = lo + r
            acc = np.zeros(width - i, dtype=np.float32)
            diag = 0.0
            end = r_ptr[i + 1]
            for p in range(r_ptr[i], end):
                if p + PREFETCH_AHEAD < end:
                    start = slot[p + PREFETCH_AHEAD]
                    _prefetch(t_gap, start)
                    _prefetch(t_val, start)
                first = slot[p]
                x = t_val[first]
                diag += np.float64(x) * np.float64(x)
                col = 0
                for q in range(first + 1, stop[p]):
                    col += t_gap[q]
                    acc[col] += x * t_val[q]
            row = out[r]
            si = shift[i] + level
            row[i - col0] += diag + (si + shift[i])
            for c in range(1, acc.size):
                row[i - col0 + c] += acc[c] + (si + shift[i + c])

    # Compile (or load) now, with the array types the callers pass.
    one = sp.csr_matrix(
        (np.ones(1), np.zeros(1, np.int32), np.array([0, 1], np.int64)), shape=(1, 1)
    )
    ptr, idx, val = one.indptr, one.indices, one.data
    out = np.zeros((1, 1))
    rare(ptr, idx, val, 0, 1, ptr, idx, val, out)
    at, end, gaps = np.zeros(1, np.int32), np.ones(1, np.int32), np.zeros(1, np.uint16)
    upper(ptr, at, end, gaps, val, 0, 1, out, 0, np.zeros(0), 0.0)
    upper32(ptr, at, end, gaps, val.astype(np.float32), 0, 1, out, 0, np.zeros(1), 0.0)
    return [rare, upper, upper32]


def _prefetch_intrinsic() -> Any:  # pragma: no cover - compiled
    """``prefetch(array, index)``: LLVM's ``llvm.prefetch`` (read, high locality, data) of
    ``array[index]``; a hint only, no effect on results."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, arr, idx):
        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            ptr = builder.gep(ary.data, [args[1]])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            flags = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
            builder.call(fn, [builder.bitcast(ptr, i8p), *flags])
            return context.get_dummy_value()

        return types.void(arr, idx), codegen

    return prefetch
