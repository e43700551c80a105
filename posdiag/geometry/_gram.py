"""Gram products of square-root probability rows at long contexts.

The geometry needs ``BC = R^A (R^B)^T`` (cross-fitted) or ``S S^T`` (plug-in), each row
``sqrt(C_i / N_i)`` over the vocabulary. Frequent tokens dominate a sparse product's cost, so
:func:`cross_product` splits the columns: those with ``nnz_A(j) nnz_B(j) > (f n_A)(f n_B)``
(``f`` = :data:`DENSE_FRACTION`) go to a dense BLAS block, the rest are added into the dense
result by a compiled kernel. Rows go in blocks (memory bound in :class:`ProductPlan`). The dense
block runs in float32, centred on its columns' common level (:func:`_level`), so an entry of
``BC`` errs by a few 1e-8 (docs/performance.md). :func:`symmetric_product` computes the
cross-fit's symmetric part ``(A B^T + B A^T) / 2`` as two upper-triangle Grams, half the work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import scipy.sparse as sp

from .._util.jit import load_numba
from ..errors import PosdiagError
from ._compiled import COMPILED_FROM, rare_kernels, split_kernels
from ._square import mirror_upper

__all__ = [
    "COMPILED_FROM",
    "DENSE_FRACTION",
    "ProductPlan",
    "cross_product",
    "plan_product",
    "sqrt_rows",
    "symmetric_product",
]

# Break-even column density of a BLAS multiply-add against a sparse one (docs/performance.md).
DENSE_FRACTION = 0.1
# Working memory per row block besides the result: two (block_rows, n_B) float64 arrays.
BLOCK_BYTES = 64 << 20
# symmetric_product's block rows are thinner (the rows from the block on): taller blocks pay.
UPPER_BLOCK_BYTES = 128 << 20
UPPER_BLOCK_ROWS = 2048


@dataclass(frozen=True)
class ProductPlan:
    """How :func:`cross_product` computes a product, and the memory it needs.

    Attributes
    ----------
    dense_columns, sparse_columns : int
        Vocabulary columns in the dense BLAS block and in the sparse remainder.
    block_rows : int
        Rows of ``A`` per block.
    dtype : str
        Precision of the dense block (``float32`` or ``float64``); the sparse part and the
        result are float64.
    hybrid : bool
        False when the product is one plain sparse product (small inputs).
    bytes_bound : int
        Upper bound of the working memory besides the result and the inputs: the dense column
        blocks, two ``block_rows x n_B`` float64 temporaries and the two rare parts.
    """

    dense_columns: int
    sparse_columns: int
    block_rows: int
    dtype: str
    hybrid: bool
    bytes_bound: int


def sqrt_rows(counts: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
    """``sqrt(C / N)`` row-wise of counts (n, V), a float64 csr (n, V); rows with no tokens stay
    zero."""
    c = sp.csr_matrix(counts, dtype=np.float64)
    supports = np.asarray(c.sum(axis=1)).ravel()
    inv = np.divide(1.0, supports, out=np.zeros_like(supports), where=supports > 0)
    # inv_i * C_ij entry by entry: the numbers of the diagonal product, without its cost.
    data = c.data * np.repeat(inv, np.diff(c.indptr))
    s = sp.csr_matrix((data, c.indices, c.indptr), c.shape)
    if not data.all():
        # Own index arrays: eliminate_zeros compacts them in place (they may be the caller's).
        s = sp.csr_matrix((data, c.indices.copy(), c.indptr.copy()), c.shape)
        s.eliminate_zeros()
    s.data = np.sqrt(s.data)
    return s


def plan_product(
    a: sp.csr_matrix,
    b: sp.csr_matrix,
    *,
    block_rows: int | None = None,
    dtype: type[np.floating] = np.float32,
    dense_fraction: float = DENSE_FRACTION,
) -> tuple[ProductPlan, np.ndarray]:
    """Which columns of ``A`` (n_A, V) and ``B`` (n_B, V) go dense, the block size and the memory
    bound of ``A B^T``: the plan and the dense columns' mask, shape (V,)."""
    (na, v), nb = a.shape, b.shape[0]
    nnz_a = np.bincount(a.indices, minlength=v).astype(np.float64)
    nnz_b = np.bincount(b.indices, minlength=v).astype(np.float64)
    cost = nnz_a * nnz_b
    dense = cost > (dense_fraction * na) * (dense_fraction * nb)
    used = cost > 0
    hybrid = min(na, nb) >= COMPILED_FROM and bool(dense.any())
    if not hybrid:
        dense = np.zeros(v, dtype=bool)
    if block_rows is None:
        block_rows = max(16, BLOCK_BYTES // (16 * max(nb, 1)))
    block_rows = int(min(max(block_rows, 1), max(na, 1)))
    kd = int(dense.sum())
    item = np.dtype(dtype).itemsize
    # The rare parts of both factors (float64 value + int32 index per entry, int64 pointers).
    rare = int(nnz_a[~dense].sum() + nnz_b[~dense].sum()) * 12 + (na + v + 2) * 8 if hybrid else 0
    bound = (na + nb) * kd * item + 2 * block_rows * nb * 8 + rare
    plan = ProductPlan(
        dense_columns=kd,
        sparse_columns=int((used & ~dense).sum()),
        block_rows=block_rows,
        dtype=np.dtype(dtype).name,
        hybrid=hybrid,
        bytes_bound=int(bound),
    )
    return plan, dense


def cross_product(
    a: sp.spmatrix | sp.sparray,
    b: sp.spmatrix | sp.sparray,
    *,
    block_rows: int | None = None,
    dtype: type[np.floating] = np.float32,
    dense_fraction: float = DENSE_FRACTION,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``A B^T`` for sparse non-negative rows, as a dense float64 array.

    Parameters
    ----------
    a, b : sparse matrices of shape (n_A, V) and (n_B, V)
        Typically :func:`sqrt_rows` of two halves of the counts (``b = a`` for the plug-in).
    block_rows : int, optional
        Rows of ``A`` per block; default keeps the temporaries near 128 MB.
    dtype : numpy float type
        Precision of the dense BLAS block.
    dense_fraction : float
        Column density from which a column goes to the dense block.
    out : ndarray of shape (n_A, n_B), float64, C-contiguous, optional
        Add the product into this array (and return it) instead of a new one.

    Returns
    -------
    ndarray of shape (n_A, n_B), float64
    """
    same = a is b
    a = sp.csr_matrix(a, dtype=np.float64)
    b = a if same else sp.csr_matrix(b, dtype=np.float64)
    if a.shape[1] != b.shape[1]:
        raise PosdiagError(
            f"cross product: vocabularies differ ({a.shape[1]} vs {b.shape[1]} columns)"
        )
    plan, dense = plan_product(
        a, b, block_rows=block_rows, dtype=dtype, dense_fraction=dense_fraction
    )
    add = out is not None
    if out is None:
        out = np.empty((a.shape[0], b.shape[0]), dtype=np.float64)
    elif out.shape != (a.shape[0], b.shape[0]) or out.dtype != np.float64:
        raise PosdiagError(
            f"cross product: 'out' must be float64 of shape {(a.shape[0], b.shape[0])}; "
            f"got {out.dtype} {out.shape}"
        )
    elif not out.flags.c_contiguous:
        raise PosdiagError("cross product: 'out' must be C-contiguous")
    if not plan.hybrid:
        bt = sp.csr_matrix(b.T)
        for lo in range(0, a.shape[0], plan.block_rows):
            hi = min(lo + plan.block_rows, a.shape[0])
            if add:
                out[lo:hi] += (a[lo:hi] @ bt).toarray()
            else:
                out[lo:hi] = (a[lo:hi] @ bt).toarray()
        return out
    # Canonical rows (sorted, no duplicates): the kernel adds a row's terms in column order.
    a.sum_duplicates()
    b.sum_duplicates()
    position = (np.cumsum(dense) - 1).astype(np.int64)
    position[~dense] = -1
    ad, a_s = _split(a, position, plan.dense_columns, dtype)
    bd, bst = (ad, None) if same else _split(b, position, plan.dense_columns, dtype, rows=False)
    if bst is None:
        bst = _transpose(a_s, b.shape[0], b.shape[1])
    shift = None
    if ad.dtype == np.float32:
        mu = _level((ad,) if same else (ad, bd), dense)
        sa = _centre(a, ad, mu, dense)
        shift = (sa, sa if same else _centre(b, bd, mu, dense), float(mu @ mu))
    from scipy.linalg.blas import dgemm  # here: importing scipy.linalg costs the small paths

    kernel = rare_kernels()[0]
    for lo in range(0, a.shape[0], plan.block_rows):
        hi = min(lo + plan.block_rows, a.shape[0])
        block = out[lo:hi]
        if add and ad.dtype == np.float64:
            # block^T += bd ad^T by BLAS gemm (beta = 1) on transposed views: nothing copied.
            dgemm(1.0, bd.T, ad[lo:hi].T, beta=1.0, c=block.T, trans_a=True, overwrite_c=True)
        elif add:
            block += ad[lo:hi] @ bd.T
        else:
            block[...] = ad[lo:hi] @ bd.T
        if shift is not None:
            block += shift[0][lo:hi, None]
            block += shift[1][None, :] + shift[2]
        kernel(a_s.indptr, a_s.indices, a_s.data, lo, hi, bst.indptr, bst.indices, bst.data, block)
    return out


def symmetric_product(
    a: sp.spmatrix | sp.sparray,
    b: sp.spmatrix | sp.sparray | None = None,
    *,
    block_rows: int | None = None,
    dtype: type[np.floating] = np.float32,
    dense_fraction: float = DENSE_FRACTION,
    rare: type[np.floating] | None = None,
) -> np.ndarray:
    """``(A B^T + B A^T) / 2`` (``A A^T`` without ``b``) as a dense float64 array.

    With ``P = (A + B) / 2`` and ``Q = (A - B) / 2`` the symmetric part is ``P P^T - Q Q^T``
    exactly; only the Grams' upper triangles are computed, and ``Q`` keeps only the rows where
    ``A`` and ``B`` differ.

    Parameters
    ----------
    a, b : sparse matrices of shape (n, V)
        Typically the expected square-root halves of the counts.
    block_rows, dtype, dense_fraction
        As for :func:`cross_product`. With float32 the rare tokens' part runs in float32 too
        and errs by at most ``(K + 2) 2^-24`` of itself, ``K`` the rare tokens two rows share.
    rare : numpy float type, optional
        Precision of the rare tokens' part when it should differ from ``dtype``
        (benchmarks/NOTES.md compares them).

    Returns
    -------
    ndarray of shape (n, n), float64, symmetric
    """
    a = sp.csr_matrix(a, dtype=np.float64)
    a.sum_duplicates()
    q: sp.csr_matrix | None = None
    if b is None:
        p = a
    else:
        b = sp.csr_matrix(b, dtype=np.float64)
        if b.shape != a.shape:
            raise PosdiagError(f"symmetric product: shapes differ ({a.shape} vs {b.shape})")
        b.sum_duplicates()
        if np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices):
            # Same pattern (the expected halves): P and Q entry by entry.
            diff = a.data - b.data
            if diff.any():
                p = sp.csr_matrix(((a.data + b.data) * 0.5, a.indices, a.indptr), shape=a.shape)
                # Own index arrays: eliminate_zeros below compacts them in place.
                diff *= 0.5
                q = sp.csr_matrix((diff, a.indices.copy(), a.indptr.copy()), shape=a.shape)
            else:
                p = a  # equal halves (every N_i even): A B^T = A A^T, nothing to subtract
        else:
            p, q = (a + b) * 0.5, (a - b) * 0.5
        if q is not None:
            q.eliminate_zeros()
    n = a.shape[0]
    out = np.empty((n, n), dtype=np.float64)
    _upper_gram(p, out, None, block_rows, dtype, dense_fraction, rare)
    if q is not None and q.nnz:
        rows = np.flatnonzero(np.diff(q.indptr))
        _upper_gram(sp.csr_matrix(q[rows]), out, rows, block_rows, dtype, dense_fraction, rare)
    return mirror_upper(out)


def _upper_gram(
    x: sp.csr_matrix,
    out: np.ndarray,
    rows: np.ndarray | None,
    block_rows: int | None,
    dtype: type[np.floating],
    dense_fraction: float,
    values: type[np.floating] | None,
) -> None:
    """Write ``X X^T``'s upper triangle into ``out`` (``rows`` None), or subtract it from
    ``out[rows][:, rows]``'s (``rows`` increasing); :func:`mirror_upper` fills the rest."""
    m, v = x.shape
    x.sum_duplicates()
    # plan_product's rule for a product of x with itself: nnz_j^2 > (f m)^2.
    dense = np.bincount(x.indices, minlength=v) > dense_fraction * m
    if m < COMPILED_FROM or not dense.any():
        g = (x @ x.T).toarray()
        if rows is None:
            out[...] = g
        else:
            out[np.ix_(rows, rows)] -= g
        return
    if block_rows is None:
        block_rows = min(UPPER_BLOCK_ROWS, max(16, UPPER_BLOCK_BYTES // (8 * max(m, 1))))
    block_rows = int(min(max(block_rows, 1), m))
    numba = load_numba()
    counts = _range_counts(x, v, max(1, min(int(numba.get_num_threads()), m)))
    xd, parts = _split_gram(x, counts, dense, dtype, values)
    shift = None
    if xd.dtype == np.float32:
        mu = _level((xd,), dense)
        shift = (_centre(x, xd, mu, dense), float(mu @ mu))

    # numba keeps the chunk size per calling thread (set inside the kernel, it defeats caching).
    chunk = numba.set_parallel_chunksize(UPPER_CHUNK_ROWS)
    try:
        _gram_blocks(xd, parts, _run_upper, out, rows, block_rows, shift)
    finally:
        numba.set_parallel_chunksize(chunk)


def _level(blocks: tuple[np.ndarray, ...], dense: np.ndarray) -> np.ndarray:
    """The dense blocks' column mean, rounded to float32, on the dense columns; zero on the
    rare ones. Shape (V,), float64.

    The float32 block errs in proportion to its entries' absolute terms; multiplying only the
    deviations from this level (:func:`_centre`) cuts the error of ``B_H``'s top eigenvalues by
    almost two orders of magnitude. Any level keeps :func:`_centre`'s identity exact.
    """
    sums = sum(b.sum(axis=0, dtype=np.float64) for b in blocks)
    rows = max(sum(b.shape[0] for b in blocks), 1)
    mu = np.zeros(dense.size, dtype=np.float64)
    mu[dense] = (np.asarray(sums) / rows).astype(np.float32)
    return mu


def _centre(x: sp.csr_matrix, xd: np.ndarray, mu: np.ndarray, dense: np.ndarray) -> np.ndarray:
    """Subtract the level ``mu`` from ``x``'s dense block ``xd`` (m, k) in place; return
    ``s = (X - 1 mu^T) mu``, shape (m,), float64.

    With ``c = mu . mu``, ``X Y^T = c + s^X_i + s^Y_j + (Delta^X Delta^Y^T)_ij``.
    """
    xd -= mu[dense].astype(xd.dtype)[None, :]
    return np.asarray(x @ mu, dtype=np.float64) - float(mu @ mu)


def _gram_blocks(
    xd: np.ndarray,
    parts: tuple[np.ndarray, ...],
    kernel: Callable[..., None],
    out: np.ndarray,
    rows: np.ndarray | None,
    block_rows: int,
    shift: tuple[np.ndarray, float] | None = None,
) -> None:
    """:func:`_upper_gram`'s row blocks: BLAS on the dense columns, the kernel on the rest,
    which also adds a centred block's level terms ``c + s_i + s_j`` for ``shift = (s, c)``."""
    m = xd.shape[0]
    for lo in range(0, m, block_rows):
        hi = min(lo + block_rows, m)
        # Diagonal tile as a block times its own transpose: numpy hands it to syrk (half the
        # flops). Target column c is output column c + col0.
        col0 = 0 if rows is None else lo
        target = out[lo:hi] if rows is None else np.empty((hi - lo, m - lo), dtype=np.float64)
        target[:, lo - col0 : hi - col0] = xd[lo:hi] @ xd[lo:hi].T
        if hi < m:
            target[:, hi - col0 :] = xd[lo:hi] @ xd[hi:].T
        kernel(*parts, lo, hi, target, col0, shift)
        if rows is not None:
            out[rows[lo:hi, None], rows[None, lo:]] -= target


def _row_ranges(m: int, r: int) -> np.ndarray:
    """Bounds of ``r`` contiguous ranges of ``m`` rows, shape (r + 1,)."""
    return (np.arange(r + 1, dtype=np.int64) * m) // max(r, 1)


def _range_counts(x: sp.csr_matrix, v: int, ranges: int) -> np.ndarray:
    """Column counts of ``x`` per range of rows (:func:`_row_ranges`), shape (ranges, V), int64."""
    bounds = x.indptr[_row_ranges(x.shape[0], ranges)]
    return np.array([np.bincount(x.indices[lo:hi], minlength=v) for lo, hi in pairwise(bounds)])


def _split_gram(
    x: sp.csr_matrix,
    counts: np.ndarray,
    dense: np.ndarray,
    dtype: type[np.floating],
    values: type[np.floating] | None = None,
    gap: type[np.integer] | None = None,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The dense columns of canonical ``x`` (m, V) as an (m, k) ``dtype`` block, and its rare
    entries as the upper-triangle kernel reads them, ``(r_ptr, slot, stop, t_gap, t_val)``: per
    token, the rows holding it (as gaps to the list's previous row; uint16 up to 65,536 rows, else
    int32) and their values (float32 for float32 ``values``, else float64); row ``i``'s rare entries
    are ``p`` in ``r_ptr[i]:r_ptr[i + 1]``, at ``slot[p]`` of a list ending at ``stop[p]``."""
    m, v = x.shape
    ranges = counts.shape[0]
    rare = np.where(dense[None, :], 0, counts)
    t_ptr = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(rare.sum(axis=0), out=t_ptr[1:])
    # Each range writes its own slices: after the earlier ranges' rows in every token's list.
    nxt = t_ptr[None, :-1] + np.cumsum(rare, axis=0) - rare
    first = nxt[1:].copy()  # where ranges 1.. start in each list
    start = np.zeros(ranges, dtype=np.int64)
    np.cumsum(rare.sum(axis=1)[:-1], out=start[1:])
    position = (np.cumsum(dense) - 1).astype(np.int64)
    position[~dense] = -1
    total = int(t_ptr[-1])
    index = np.int32 if total < 2**31 else np.int64
    value = (
        np.float32 if np.dtype(dtype if values is None else values) == np.float32 else np.float64
    )
    block = np.zeros((m, int(dense.sum())), dtype=dtype)
    r_ptr = np.zeros(m + 1, dtype=np.int64)
    slot = np.empty(total, dtype=index)
    stop = np.empty(total, dtype=index)
    # Gaps, not rows: 2 bytes an entry instead of 4 in the kernel's stream.
    if gap is None:
        gap = np.uint16 if m <= 1 << 16 else np.int32
    t_gap = np.empty(total, dtype=gap)
    t_val = np.empty(total, dtype=value)
    last = np.full((ranges, v), -1, dtype=np.int64)
    split_kernels()["split_gram"](
        x.indptr.astype(np.int64, copy=False),
        x.indices,
        x.data,
        position,
        _row_ranges(m, ranges),
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
    )
    if ranges > 1:
        # A range's first row in a list was written as a row: make it a gap.
        before = np.maximum.accumulate(last, axis=0)[:-1]
        fix = (rare[1:] > 0) & (before >= 0)
        t_gap[first[fix]] -= before[fix].astype(gap)
    return block, (r_ptr, slot, stop, t_gap, t_val)


def _split(
    m: sp.csr_matrix,
    position: np.ndarray,
    k: int,
    dtype: type[np.floating],
    *,
    rows: bool = True,
) -> tuple[np.ndarray, sp.csr_matrix]:
    """The dense columns of ``m`` (n, V) as an (n, k) array of ``dtype`` and the rest sparse.

    ``position[j]``: column ``j``'s place in the dense block, -1 if rare. The rare part is an
    (n, V) csr (``rows``), else a (V, n) csr listing each token's rows in ascending order.
    """
    kern = split_kernels()
    n, v = m.shape
    indptr = m.indptr.astype(np.int64, copy=False)
    indices = m.indices.astype(np.int32, copy=False)
    data = m.data.astype(np.float64, copy=False)
    block = np.zeros((n, k), dtype=dtype)
    if rows:
        counts = np.zeros(n, dtype=np.int64)
        kern["count_rows"](indptr, indices, position, counts)
    else:
        counts = np.bincount(indices[position[indices] < 0], minlength=v).astype(np.int64)
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    idx = np.empty(ptr[-1], dtype=np.int32)
    val = np.empty(ptr[-1], dtype=np.float64)
    if rows:
        kern["split_rows"](indptr, indices, data, position, block, ptr, idx, val)
        shape = (n, v)
    else:
        kern["split_columns"](indptr, indices, data, position, block, ptr.copy(), idx, val)
        shape = (v, n)
    return block, sp.csr_matrix((val, idx, ptr), shape=shape)


def _transpose(m: sp.csr_matrix, n: int, v: int) -> sp.csr_matrix:
    """``m`` (n, V) as a (V, n) csr, rows of each column in ascending order."""
    position = np.full(v, -1, dtype=np.int64)
    return _split(m, position, 0, np.float64, rows=False)[1]


def _run_upper(
    r_ptr: np.ndarray,
    slot: np.ndarray,
    stop: np.ndarray,
    t_gap: np.ndarray,
    t_val: np.ndarray,
    lo: int,
    hi: int,
    out: np.ndarray,
    col0: int,
    shift: tuple[np.ndarray, float] | None = None,
) -> None:
    """Add the rare parts of a Gram's upper triangle for rows ``lo:hi`` (:func:`_split_gram`)
    into ``out[i - lo, row - col0]``, plus ``c + s_i + s_j`` for ``shift = (s, c)``.

    Float32 lists sum each row's off-diagonal terms in float32 (error at most ``(K + 2) 2^-24``
    of itself, ``K`` the shared rare tokens), the diagonal in float64. Rows go to threads in
    chunks of :data:`UPPER_CHUNK_ROWS` as they finish (a row's work falls with its index); each
    row adds the same terms in the same order on any thread.
    """
    kernels = rare_kernels()
    if t_val.dtype != np.float32:
        # The level terms cost a pass over the row: only a shifted Gram pays it.
        s, level = (_NO_SHIFT, 0.0) if shift is None else shift
        kernels[1](r_ptr, slot, stop, t_gap, t_val, lo, hi, out, col0, s, level)
        return
    if shift is None:
        shift = (np.zeros(out.shape[1] + col0), 0.0)
    kernels[2](r_ptr, slot, stop, t_gap, t_val, lo, hi, out, col0, shift[0], shift[1])


_NO_SHIFT = np.zeros(0, dtype=np.float64)


# Rows a thread of the Gram kernel takes at a time (_run_upper).
UPPER_CHUNK_ROWS = 16
