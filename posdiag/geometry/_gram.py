"""Gram products of square-root probability rows at long contexts.

The Hellinger geometry needs ``BC = R^A (R^B)^T`` (cross-fitted: two independent halves) or
``S S^T`` (plug-in), where each row is ``sqrt(C_i / N_i)`` over the vocabulary. A sparse-sparse
product costs ``sum_j nnz_A(j) nnz_B(j)`` multiply-adds over columns ``j``; the frequent tokens,
present at almost every position, dominate that sum and run an order of magnitude faster as a
dense BLAS product. :func:`cross_product` therefore splits the columns:

- a column goes to the dense block when ``nnz_A(j) nnz_B(j) > (f n_A)(f n_B)`` with ``f`` =
  :data:`DENSE_FRACTION` (the break-even of a BLAS multiply-add against a sparse one, measured);
- the rest stay sparse and are accumulated straight into the dense result by a small compiled
  kernel (numba): scipy's sparse product would build a csr result that is dense anyway.

Rows are processed in blocks of ``block_rows``, so besides the ``n_A x n_B`` float64 result and
the two dense column blocks the working memory is ``O(block_rows * n_B)`` (bound in
:class:`ProductPlan`). The dense block runs in float32 by default, centred on its columns'
common level (:func:`_level`): float32 accumulation errs in proportion to the absolute terms it
sums, so only the deviations from the level are multiplied in float32 and the level's terms
are added back in float64. An entry of ``BC`` then errs by a few 1e-8, the top eigenvalues of
``B_H`` by 2.4e-7 at n = 4,096 (1.5e-5 uncentred), and stress by less than 1e-8
(tests/geometry/test_gram.py, tests/geometry/test_longctx_paths.py measure it).

The cross-fit only ever uses the symmetric part ``(A B^T + B A^T) / 2``; :func:`symmetric_product`
computes it as ``P P^T - Q Q^T`` (``P``, ``Q`` the half-sum and half-difference of the factors),
two Grams of which only the upper triangles are computed: about half the work of the product.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.jit import load_numba
from ..errors import PosdiagError

__all__ = [
    "DENSE_FRACTION",
    "ProductPlan",
    "centred_half",
    "cross_product",
    "distances_to_first",
    "pack_upper",
    "plan_product",
    "sqrt_rows",
    "symmetric_product",
    "symmetrize",
    "unpack_upper",
]

# Break-even column density: a BLAS flop is far cheaper than a sparse multiply-add, so a column
# pays off dense once both sides hold it in more than ~10% of rows (docs/performance.md).
DENSE_FRACTION = 0.1
# Working memory per row block (besides the result): the block's dense product and its
# sparse part, both of shape (block_rows, n_B).
BLOCK_BYTES = 64 << 20
# Row blocks of symmetric_product: its dense block rows are thinner than a product's (the rows
# from the block on), so taller blocks pay, up to UPPER_BLOCK_BYTES of float64 result a block row.
UPPER_BLOCK_BYTES = 128 << 20
UPPER_BLOCK_ROWS = 2048
# Up to this many rows the Gram's token lists store each row as a uint16 gap (rows < 2^16).
GAP16_ROWS = 1 << 16
# Below this many rows a plain sparse product is faster than slicing columns.
HYBRID_FROM_ROWS = 128


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
        Upper bound of the working memory besides the result and the inputs: the two dense
        column blocks, two ``block_rows x n_B`` float64 temporaries and the two rare parts
        (12 bytes an entry plus pointers). It grows as ``n k`` (dense) and ``nnz`` (rare),
        i.e. linearly in n at a fixed number of distinct tokens per position, the result as
        ``n^2``.
    """

    dense_columns: int
    sparse_columns: int
    block_rows: int
    dtype: str
    hybrid: bool
    bytes_bound: int


def sqrt_rows(counts: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
    """``R = sqrt(C / N)`` row-wise, kept sparse (float64, csr).

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n, V)
        Non-negative counts; every row needs a positive sum.

    Returns
    -------
    csr_matrix of shape (n, V)
    """
    c = sp.csr_matrix(counts, dtype=np.float64)
    supports = np.asarray(c.sum(axis=1)).ravel()
    if np.any(supports <= 0):
        bad = int(np.flatnonzero(supports <= 0)[0])
        raise PosdiagError(f"every row of the count matrix needs a positive sum; row {bad} has 0")
    r = sp.csr_matrix(sp.diags(1.0 / supports) @ c)
    r.data = np.sqrt(r.data)
    return r


def _column_nnz(m: sp.csr_matrix, v: int) -> np.ndarray:
    if m.indices.size < COMPILED_FROM_NNZ:
        return np.bincount(m.indices, minlength=v).astype(np.float64)
    counts = np.zeros(v, dtype=np.int64)
    # Every column counts: no column is marked dense (-1 everywhere).
    _split_kernels()["count_columns"](m.indices, np.full(v, -1, dtype=np.int64), counts)
    return counts.astype(np.float64)


def plan_product(
    a: sp.csr_matrix,
    b: sp.csr_matrix,
    *,
    block_rows: int | None = None,
    dtype: type[np.floating] = np.float32,
    dense_fraction: float = DENSE_FRACTION,
) -> tuple[ProductPlan, np.ndarray]:
    """Which columns go dense, the block size and the memory bound of ``A B^T``.

    Returns
    -------
    (ProductPlan, ndarray of bool of shape (V,))
        The plan and the mask of dense columns.
    """
    (na, v), nb = a.shape, b.shape[0]
    nnz_a, nnz_b = _column_nnz(a, v), _column_nnz(b, v)
    cost = nnz_a * nnz_b
    dense = cost > (dense_fraction * na) * (dense_fraction * nb)
    used = cost > 0
    hybrid = min(na, nb) >= HYBRID_FROM_ROWS and bool(dense.any())
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
    a : sparse matrix of shape (n_A, V)
    b : sparse matrix of shape (n_B, V)
        Typically :func:`sqrt_rows` of two halves of the counts (``b = a`` for the plug-in).
    block_rows : int, optional
        Rows of ``A`` per block; default keeps the temporaries near 128 MB. The result is the
        same for any block size (to float rounding of the dense block).
    dtype : numpy float type
        Precision of the dense BLAS block (float32 default, see the module docstring).
    dense_fraction : float
        Column density from which a column goes to the dense block.
    out : ndarray of shape (n_A, n_B), float64, C-contiguous, optional
        Add the product into this array (and return it) instead of a new one: the cross-fit
        sums its ``S`` products without an ``n x n`` temporary per split.

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
    # One compiled pass per factor scatters its dense columns into the BLAS block and keeps
    # the rest sparse (B's rare part transposed: row j lists the rows of B holding token j),
    # in place of numpy fancy indexing's copies.
    # Canonical rows (sorted, no duplicates): the kernel adds a row's terms in column order.
    a.sum_duplicates()
    b.sum_duplicates()
    position = (np.cumsum(dense) - 1).astype(np.int64)
    position[~dense] = -1
    ad, a_s = _split(a, position, plan.dense_columns, dtype)
    bd, bst = (ad, None) if same else _split(b, position, plan.dense_columns, dtype, rows=False)
    if bst is None:
        # The plug-in multiplies a matrix by itself: split it once, transpose its rare part.
        bst = _transpose(a_s, b.shape[0], b.shape[1])
    shift = None
    if ad.dtype == np.float32:
        mu = _level((ad,) if same else (ad, bd), dense)
        sa = _centre(a, ad, mu, dense)
        shift = (sa, sa if same else _centre(b, bd, mu, dense), float(mu @ mu))
    kernel = _rare_kernel()
    gemm = _gemm(ad.dtype)
    for lo in range(0, a.shape[0], plan.block_rows):
        hi = min(lo + plan.block_rows, a.shape[0])
        block = out[lo:hi]
        if add and gemm is not None:
            # block += ad bd^T in place: BLAS gemm with beta = 1 on the transposed (Fortran-
            # ordered) view, block^T += bd ad^T; the C-ordered inputs are passed transposed, so
            # nothing is copied.
            gemm(1.0, bd.T, ad[lo:hi].T, beta=1.0, c=block.T, trans_a=True, overwrite_c=True)
        elif add:
            block += ad[lo:hi] @ bd.T
        else:
            block[...] = ad[lo:hi] @ bd.T
        if shift is not None:
            # The level's terms of the centred block (_centre), in float64.
            block += shift[0][lo:hi, None]
            block += shift[1][None, :] + shift[2]
        if kernel is None:
            block += (a_s[lo:hi] @ bst).toarray()
        else:
            kernel(
                a_s.indptr, a_s.indices, a_s.data, lo, hi, bst.indptr, bst.indices, bst.data, block
            )
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
    """``(A B^T + B A^T) / 2`` (``A A^T`` without ``b``) as a dense float64 array, in about
    0.6 of the multiply-adds of :func:`cross_product`.

    With ``P = (A + B) / 2`` and ``Q = (A - B) / 2``, ``A B^T = P P^T - P Q^T + Q P^T - Q Q^T``
    and the two middle terms are each other's negative transposes, so the symmetric part is
    ``P P^T - Q Q^T`` exactly. Both are Grams of one factor: only their upper triangles are
    computed (the dense block by BLAS on each row block against the rows from it on, each rare
    token from the row's own place in the token's list on) and mirrored, half the work of a
    product. ``Q`` keeps only the rows where ``A`` and ``B`` differ; for the expected thinning
    (:func:`posdiag.geometry._thinning.expected_halves`) those are the positions with an odd number
    of tokens, so ``Q Q^T`` costs about a quarter of ``P P^T``.

    Parameters
    ----------
    a, b : sparse matrices of shape (n, V)
        Typically the expected square-root halves of the counts.
    block_rows, dtype, dense_fraction
        As for :func:`cross_product` (the dense block's precision; float32, centred on
        the level, errs by a few 1e-8 per entry, tests/geometry/test_gram.py). With float32 the
        rare tokens' part runs in float32 as well (half the bytes of the kernel's list walk
        and of the row it adds into), and errs by at most ``(K + 2) 2^-24`` of itself, ``K``
        the rare tokens two positions share (:func:`_upper_kernel`).
    rare : numpy float type, optional
        Precision of the rare tokens' part when it should differ from ``dtype``: float64
        with a float32 dense block is what the headline uses. At n = 16,384 the float32 rare
        part put the top eigenvalues of ``B_H`` 9.5e-6 off float64 (its columns hold tokens
        in up to 10% of 16,384 rows, long uncentred float32 sums), float64 ones 5.8e-8.

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
            # Same pattern (the expected halves): P and Q entry by entry, no sparse addition.
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
    ``out[rows][:, rows]``'s upper triangle (``rows`` increasing); the lower triangle of the
    touched block rows is left to :func:`mirror_upper`."""
    m, v = x.shape
    x.sum_duplicates()
    hybrid = m >= HYBRID_FROM_ROWS
    counts = _range_counts(x, v) if hybrid else np.zeros((1, v), dtype=np.int64)
    # plan_product's rule for a product of x with itself: nnz_j^2 > (f m)^2.
    dense = counts.sum(axis=0) > dense_fraction * m
    # Small inputs without a dense column never import numba (numpy counts them).
    kernel = _upper_kernel() if hybrid and dense.any() else None
    if kernel is None:
        g = (x @ x.T).toarray()
        if rows is None:
            out[...] = g
        else:
            out[np.ix_(rows, rows)] -= g
        return
    if block_rows is None:
        block_rows = min(UPPER_BLOCK_ROWS, max(16, UPPER_BLOCK_BYTES // (8 * max(m, 1))))
    block_rows = int(min(max(block_rows, 1), m))
    xd, parts = _split_gram(x, counts, dense, dtype, values)
    shift = None
    if xd.dtype == np.float32:
        mu = _level((xd,), dense)
        shift = (_centre(x, xd, mu, dense), float(mu @ mu))
    numba = load_numba()

    # Rows go to the kernel's threads in chunks as they finish (_upper_kernel); numba keeps
    # the chunk size per calling thread, and a `with numba.parallel_chunksize` inside the
    # kernel would keep it from numba's cache.
    chunk = numba.set_parallel_chunksize(UPPER_CHUNK_ROWS)
    try:
        _gram_blocks(xd, parts, kernel, out, rows, block_rows, shift)
    finally:
        numba.set_parallel_chunksize(chunk)


def _level(blocks: tuple[np.ndarray, ...], dense: np.ndarray) -> np.ndarray:
    """The dense blocks' column mean over all their rows, rounded to float32, on the dense
    columns of the vocabulary; zero on the rare ones. Shape (V,), float64.

    Why: the float32 BLAS block errs in proportion to the sum of the absolute terms of each
    entry, and a frequent token's column is mostly its common level, which the centring
    ``J BC J`` of the geometry removes anyway. Multiplying the deviations from the level
    (:func:`_centre`) and adding the level's terms back in float64 cuts the error of ``B_H``'s
    top eigenvalues by almost two orders of magnitude (tests/geometry/test_gram.py bounds it). Any
    level keeps the identity of :func:`_centre` exact, so the mean of the blocks' own rounded
    entries serves; rounded to float32, the blocks subtract it as is.
    """
    sums = sum(b.sum(axis=0, dtype=np.float64) for b in blocks)
    rows = max(sum(b.shape[0] for b in blocks), 1)
    mu = np.zeros(dense.size, dtype=np.float64)
    mu[dense] = (np.asarray(sums) / rows).astype(np.float32)
    return mu


def _centre(x: sp.csr_matrix, xd: np.ndarray, mu: np.ndarray, dense: np.ndarray) -> np.ndarray:
    """Subtract the level ``mu`` (:func:`_level`) from ``x``'s dense block ``xd`` (m, k), in
    place, and return ``s = (X - 1 mu^T) mu``, shape (m,), float64, from ``x``'s entries.

    With ``c = mu . mu``, ``X Y^T = c + s^X_i + s^Y_j + (Delta^X Delta^Y^T)_ij`` for two
    blocks centred on the same level: the deviations are multiplied in float32, the rest is
    added in float64.
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
    """:func:`_upper_gram`'s row blocks: BLAS on the dense columns, the kernel on the rest;
    ``shift = (s, c)`` (:func:`_centre`): the kernel adds back the centred block's level
    terms ``c + s_i + s_j`` as it adds each row's rare part (one pass over the row instead of
    two more over the block row)."""
    m = xd.shape[0]
    for lo in range(0, m, block_rows):
        hi = min(lo + block_rows, m)
        # The diagonal tile as a block times its own transpose, which numpy hands to BLAS syrk
        # (half the flops), the rest of the block row by gemm.
        # Column c of target is output column c + col0 (out's own block row, or a compact
        # block subtracted from out[rows][:, rows] below).
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


def _range_counts(x: sp.csr_matrix, v: int) -> np.ndarray:
    """Column counts of ``x`` per range of rows (:func:`_row_ranges`), shape (R, V), int64.

    One range (numpy) below :data:`COMPILED_FROM_NNZ` stored entries, else one per numba
    thread, counted in parallel: their sum gives the dense columns, and each range's counts
    where its rows start in the token lists of :func:`_split_gram`.
    """
    if x.indices.size < COMPILED_FROM_NNZ:
        return np.bincount(x.indices, minlength=v).astype(np.int64)[None, :]
    numba = load_numba()

    ranges = max(1, min(int(numba.get_num_threads()), x.shape[0]))
    counts = np.zeros((ranges, v), dtype=np.int64)
    bounds = _row_ranges(x.shape[0], ranges)
    _split_kernels()["count_ranges"](
        x.indptr.astype(np.int64, copy=False), x.indices, bounds, counts
    )
    return counts


def _split_gram(
    x: sp.csr_matrix,
    counts: np.ndarray,
    dense: np.ndarray,
    dtype: type[np.floating],
    values: type[np.floating] | None = None,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The dense columns of canonical ``x`` (m, V) as an (m, k) array of ``dtype``, and its
    rare entries as the upper-triangle kernel reads them, in one parallel pass over ``x``.

    Returns
    -------
    block : ndarray of shape (m, k), dtype
    (r_ptr, slot, stop, t_gap, t_val) : the rare part. ``t_gap``/``t_val`` list, token by
        token, the rows holding it in ascending order and their values (``x`` transposed,
        rare columns only), each row as its gap to the row before it in the list (a list's
        first entry: its row), uint16 up to 65,536 rows, else int32; row ``i``'s rare entries
        are ``p`` in ``r_ptr[i]:r_ptr[i + 1]`` (int64), in column order, entry ``p`` sitting
        at ``slot[p]`` of its token's list, which ends at ``stop[p]`` (int32 while the lists
        fit, else int64). Values are float32 for a float32 ``values`` (default ``dtype``),
        else float64.
    """
    m, v = x.shape
    ranges = counts.shape[0]
    rare = np.where(dense[None, :], 0, counts)
    t_ptr = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(rare.sum(axis=0), out=t_ptr[1:])
    # Range t's rows go after the earlier ranges' rows in every token's list, and its row
    # entries after the earlier ranges' entries: each range writes its own slices.
    nxt = t_ptr[None, :-1] + np.cumsum(rare, axis=0) - rare
    first = nxt[1:].copy()  # where ranges 1.. start in each list
    start = np.zeros(ranges, dtype=np.int64)
    np.cumsum(rare.sum(axis=1)[:-1], out=start[1:])
    position = (np.cumsum(dense) - 1).astype(np.int64)
    position[~dense] = -1
    total = int(t_ptr[-1])
    # int32 while the lists fit: half the bytes of int64 for the longest arrays here.
    index = np.int32 if total < 2**31 else np.int64
    value = (
        np.float32 if np.dtype(dtype if values is None else values) == np.float32 else np.float64
    )
    block = np.zeros((m, int(dense.sum())), dtype=dtype)
    r_ptr = np.zeros(m + 1, dtype=np.int64)
    slot = np.empty(total, dtype=index)
    stop = np.empty(total, dtype=index)
    # Gaps, not rows: the kernel knows each walk's first row (its own), and 2 bytes an entry
    # instead of 4 cut the bytes it streams (below, _upper_kernel).
    gap = np.uint16 if m <= GAP16_ROWS else np.int32
    t_gap = np.empty(total, dtype=gap)
    t_val = np.empty(total, dtype=value)
    last = np.full((ranges, v), -1, dtype=np.int64)
    _split_kernels()["split_gram"](
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
        # A range's first row in a list was written as a row: its gap is to the last row of
        # the earlier ranges in that list (if any).
        before = np.maximum.accumulate(last, axis=0)[:-1]
        fix = (rare[1:] > 0) & (before >= 0)
        t_gap[first[fix]] -= before[fix].astype(gap)
    return block, (r_ptr, slot, stop, t_gap, t_val)


def mirror_upper(m: np.ndarray, block: int = 64) -> np.ndarray:
    """``m[j, i] = m[i, j]`` for ``j > i``, in place; returns ``m``.

    From :data:`COMPILED_FROM_ROWS` rows one compiled pass over square tiles (the kernel of
    :func:`symmetrize`): numpy's strided block copies below cost a TLB miss per element
    written on large arrays. Smaller arrays: each block row's strip right of the diagonal is
    copied, transposed, below it, by blocks of ``block`` rows. Copies only: the same numbers.

    Parameters
    ----------
    m : ndarray of shape (n, n), float64, C-contiguous
    """
    _check_square(m)
    n = m.shape[0]
    if n >= COMPILED_FROM_ROWS:
        zeros = np.zeros(n)
        _square_kernels()["pairs"](m, zeros, zeros, 0.0, 1.0, zeros, _UPPER, _NO_PACKED, m, _TILE)
        return m
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        m[hi:, lo:hi] = m[lo:hi, hi:].T
        tile = m[lo:hi, lo:hi]
        low = np.tril_indices(hi - lo, -1)
        tile[low] = tile.T[low]
    return m


# The modes of the square-tile kernel (pairs) and its packed argument when it reads a square.
_CENTRED, _IMPLIED, _UPPER = 0, 1, 2
_NO_PACKED = np.zeros(0, dtype=np.float64)


def pack_upper(m: np.ndarray) -> np.ndarray:
    """The upper triangle of ``m`` (n, n), diagonal included, row after row: shape
    (n (n + 1) / 2,). :func:`unpack_upper` gives ``m`` back bit for bit when ``m`` is exactly
    symmetric."""
    n = m.shape[0]
    out = np.empty(n * (n + 1) // 2, dtype=m.dtype)
    at = 0
    for i in range(n):
        out[at : at + n - i] = m[i, i:]
        at += n - i
    return out


def unpack_upper(packed: np.ndarray, n: int) -> np.ndarray:
    """The symmetric (n, n) float64 array whose upper triangle, diagonal included, ``packed``
    holds row after row (shape (n (n + 1) / 2,)); copies only, so bit for bit.

    Parameters
    ----------
    packed : ndarray of shape (n (n + 1) / 2,), float64
    n : int
    """
    if packed.shape != (n * (n + 1) // 2,) or packed.dtype != np.float64:
        raise PosdiagError(
            f"expected a packed triangle of shape ({n * (n + 1) // 2},) float64; "
            f"got {packed.dtype} {packed.shape}"
        )
    out = np.empty((n, n), dtype=np.float64)
    if n >= COMPILED_FROM_ROWS:
        # One tile pass writing both triangles, not a row loop then a mirror.
        zeros = np.zeros(n)
        packed = np.ascontiguousarray(packed)
        _square_kernels()["pairs"](out, zeros, zeros, 0.0, 1.0, zeros, _UPPER, packed, out, _TILE)
        return out
    at = 0
    for i in range(n):
        out[i, i:] = packed[at : at + n - i]
        at += n - i
    return mirror_upper(out)


def _gemm(dtype: np.dtype) -> Callable[..., np.ndarray] | None:
    """BLAS dgemm (which can add into its output) for a float64 dense block, else None (a
    float32 block is multiplied in float32 and added)."""
    if dtype != np.float64:
        return None
    from scipy.linalg.blas import dgemm

    return dgemm


def _split(
    m: sp.csr_matrix,
    position: np.ndarray,
    k: int,
    dtype: type[np.floating],
    *,
    rows: bool = True,
) -> tuple[np.ndarray, sp.csr_matrix]:
    """The dense columns of ``m`` as an (n, k) array of ``dtype`` and the rest sparse.

    ``position[j]`` is column ``j``'s place in the dense block, -1 for a rare column. The rare
    part keeps the vocabulary's column indices: as an (n, V) csr (``rows``), else transposed,
    a (V, n) csr whose row ``j`` lists the rows holding token ``j`` in ascending order (what
    ``csr_matrix(rare.T)`` gives, so the kernel adds the same terms in the same order).
    """
    kern = _split_kernels()
    n, v = m.shape
    indptr = m.indptr.astype(np.int64, copy=False)
    indices = m.indices.astype(np.int32, copy=False)
    data = m.data.astype(np.float64, copy=False)
    block = np.zeros((n, k), dtype=dtype)
    if rows:
        counts = np.zeros(n, dtype=np.int64)
        kern["count_rows"](indptr, indices, position, counts)
    else:
        counts = np.zeros(v, dtype=np.int64)
        kern["count_columns"](indices, position, counts)
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


_SPLIT: dict[str, Callable[..., None]] = {}


def _split_kernels() -> dict[str, Callable[..., None]]:
    """Compiled (numba) passes of :func:`_split`, :func:`_range_counts` and :func:`_split_gram`:
    rows in parallel, each writing only its own block row and its own slice of the rare
    arrays; :func:`_split`'s transposed split is one serial pass (its writes interleave across
    columns), :func:`_split_gram`'s runs by ranges of rows, each range writing its own slice
    of every token's list (placed by the ranges' column counts)."""
    if _SPLIT:
        return _SPLIT
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

    @numba.njit(cache=True, nogil=True)
    def count_columns(indices, position, counts):  # pragma: no cover - compiled
        for p in range(indices.size):
            j = indices[p]
            if position[j] < 0:
                counts[j] += 1

    @numba.njit(parallel=True, cache=True, nogil=True)
    def count_ranges(indptr, indices, bounds, counts):  # pragma: no cover - compiled
        for t in numba.prange(bounds.size - 1):
            for p in range(indptr[bounds[t]], indptr[bounds[t + 1]]):
                counts[t, indices[p]] += 1

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
        # Each range of rows writes its block rows, its slice of the row entries (from
        # start[t]) and its slice of every token's list (from nxt[t, j]); last[t, j] is the
        # range's last row holding token j so far.
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

    _SPLIT.update(
        count_ranges=count_ranges,
        split_gram=split_gram,
        count_rows=count_rows,
        split_rows=split_rows,
        split_columns=split_columns,
        count_columns=count_columns,
    )
    return _SPLIT


_KERNEL: list[object] = []


def _rare_kernel() -> Callable[..., None] | None:
    """A compiled kernel adding a csr block times a csr transpose into a dense block
    (:func:`cross_product`), or None.

    scipy's sparse product builds a csr result, which for these inputs is dense (every pair of
    positions shares some rare token); accumulating straight into the dense block, in parallel
    over rows (each row writes only its own output row), skips that. None when numba is not
    installed: the scipy product is used.

    Most of the kernel's time is the cache miss at the start of each token's list, so the list
    of the token after next is prefetched (LLVM's prefetch intrinsic, a hint with no effect on
    the additions or their order).
    """
    kernels = _kernels()
    return kernels[0] if kernels else None


def _upper_kernel() -> Callable[..., None] | None:
    """The compiled kernel of a Gram's upper triangle (:func:`symmetric_product`), or None.

    ``kernel(r_ptr, slot, stop, t_gap, t_val, lo, hi, out, col0)`` adds, for rows ``lo:hi``
    of :func:`_split_gram`'s rare part, each row's value times every entry of its token's list
    from the row's own place (``slot``) to the list's end (``stop``) into ``out[i - lo,
    row - col0]``. The row's value is the list's entry at ``slot``. Float64 lists: products
    and sums in float64, each term added straight into ``out``. Float32 lists (float32
    Grams): each row's terms off the diagonal are multiplied and summed in float32 and added
    to ``out`` once, so an entry's rare part whose two rows share ``K`` rare tokens errs by at
    most ``(K + 2) 2^-24`` of itself (values rounded once, ``K`` float32 operations on
    non-negative terms), the bound of the float32 BLAS block over its ``k`` dense columns
    with ``K << k``; the diagonal is summed in float64. A float32 row halves the bytes the
    terms scatter into.

    Called with numba's ``parallel_chunksize`` set to :data:`UPPER_CHUNK_ROWS`, rows go to the
    threads in chunks as they finish: a row's work falls with its index (the lists' remainders
    shrink), so static halves of a row block would leave one core idle part of the time. Each
    row adds the same terms in the same order whichever thread runs it.
    """
    return _run_upper if _kernels() else None


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
    """:func:`_upper_kernel`: float32 lists to the kernel summing in float32; either kernel
    also adds ``c + s_i + s_j`` for ``shift = (s, c)`` (a float32 dense block's level,
    :func:`_centre`; rows and columns of ``s`` as those of the Gram)."""
    kernels: Any = _KERNEL
    if t_val.dtype != np.float32:
        # Float64 lists add straight into out: the level terms cost a pass over the row, so
        # only a shifted Gram pays it.
        s, level = (_NO_SHIFT, 0.0) if shift is None else shift
        kernels[1](r_ptr, slot, stop, t_gap, t_val, lo, hi, out, col0, s, level)
        return
    if shift is None:
        shift = (np.zeros(out.shape[1] + col0), 0.0)
    kernels[2](r_ptr, slot, stop, t_gap, t_val, lo, hi, out, col0, shift[0], shift[1])


_NO_SHIFT = np.zeros(0, dtype=np.float64)


def _kernels() -> list[Any]:
    if not _KERNEL:
        try:
            numba = load_numba()
        except ImportError:  # pragma: no cover - numba is a dependency; kept for vendored use
            return []
        _KERNEL.extend(_build_rare(numba))
    return _KERNEL


# Tokens ahead whose list the rare kernels prefetch (1 and 2 were fastest; benchmarks/NOTES.md).
PREFETCH_AHEAD = 2
# Rows a thread of the Gram kernel takes at a time (_upper_kernel).
UPPER_CHUNK_ROWS = 16


# The prefetch intrinsic, a module global (set by _build_rare): as a closure variable of the
# kernel it would enter numba's cache key pickled, differently in every process, and the kernel
# would be recompiled in every process (posdiag.geometry._thinning had that bug).
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

    # float32 lists (a float32 Gram): each row's rare part off the diagonal is summed in a
    # float32 row of its own, half the bytes of the float64 row the terms scatter into (it
    # stays in L1 longer), and added to it once with the
    # dense block's level terms shift[i] + shift[j] + level (_centre); the diagonal is summed
    # in float64.
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

    # Compile (or load) now, with the array types the callers pass: _split's csr for the
    # product, _split_gram's int32 slots and float64 or float32 lists for the Gram.
    one = sp.csr_matrix(
        (np.ones(1), np.zeros(1, np.int32), np.array([0, 1], np.int64)), shape=(1, 1)
    )
    ptr, idx, val = one.indptr, one.indices, one.data
    out = np.zeros((1, 1))
    rare(ptr, idx, val, 0, 1, ptr, idx, val, out)
    at, end, gaps = np.zeros(1, np.int32), np.ones(1, np.int32), np.zeros(1, np.uint16)
    upper(ptr, at, end, gaps, val, 0, 1, out, 0, _NO_SHIFT, 0.0)
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


# Square tiles of the in-place passes: a tile and its mirror (2 x 64 x 64 float64, 64 KB)
# stay in cache while the mirror is read column-wise.
_TILE = 64


def symmetrize(m: np.ndarray) -> np.ndarray:
    """``m <- (m + m^T) / 2`` in place (compiled, tile by tile, rows in parallel); returns ``m``.

    The same arithmetic as :func:`posdiag.geometry.core.symmetrize` (``(a + b) / 2`` per pair, so
    the same numbers) in one pass over the matrix.

    Parameters
    ----------
    m : ndarray of shape (n, n), float64, C-contiguous
    """
    _check_square(m)
    if m.shape[0] < COMPILED_FROM_ROWS:
        m[...] = (m + m.T) / 2.0
        return m
    zeros = np.zeros(m.shape[0])
    _square_kernels()["pairs"](m, zeros, zeros, 0.0, 1.0, zeros, _CENTRED, _NO_PACKED, m, _TILE)
    return m


def centred_half(
    bc: np.ndarray,
    col: np.ndarray,
    row: np.ndarray,
    grand: float,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``((bc - col[None, :]) - row[:, None] + grand) * 0.5``, then symmetrised, as a new array
    (or into ``out``, which may be ``bc`` itself: each pair's two entries are read before they
    are written, and every pair is visited once).

    :func:`posdiag.geometry.estimator.gram_from_bc`'s arithmetic (the same operations in the same
    order, so the same numbers) in one compiled pass instead of five passes over ``n x n`` arrays.

    Parameters
    ----------
    bc : ndarray of shape (n, n), float64, C-contiguous
    col, row : ndarray of shape (n,)
        Column and row means of ``bc``.
    grand : float
        Mean of ``bc``.

    Returns
    -------
    ndarray of shape (n, n), symmetric
    """
    _check_square(bc)
    if out is None:
        out = np.empty_like(bc)
    else:
        _check_square(out)
        if out.shape != bc.shape:
            raise PosdiagError(f"expected out of shape {bc.shape}; got {out.shape}")
    if bc.shape[0] < COMPILED_FROM_ROWS:
        x = bc - col[None, :]
        x -= row[:, None]
        x += grand
        x *= 0.5
        out[...] = (x + x.T) / 2.0
        return out
    _square_kernels()["pairs"](
        bc, col, row, float(grand), 0.5, col, _CENTRED, _NO_PACKED, out, _TILE
    )
    return out


def implied_distances(bc: np.ndarray) -> np.ndarray:
    """``sqrt(max(0, (BC_ii + BC_jj) / 2 - BC_ij))``, zero diagonal, symmetrised, as a new
    array: :func:`posdiag.geometry.estimator.implied_distances`' six numpy passes (outer sum,
    halving, subtraction, clip, sqrt, symmetrisation) in one compiled
    pass with the same operations in the same order, so the same numbers bit for bit
    (tests/geometry/test_implied_distances.py).

    Parameters
    ----------
    bc : ndarray of shape (n, n), float64, C-contiguous
    """
    _check_square(bc)
    out = np.empty_like(bc)
    zeros = np.zeros(bc.shape[0])
    diag = np.ascontiguousarray(np.diag(bc))
    _square_kernels()["pairs"](bc, zeros, zeros, 0.0, 1.0, diag, _IMPLIED, _NO_PACKED, out, _TILE)
    return out


def _check_square(m: np.ndarray) -> None:
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.dtype != np.float64:
        raise PosdiagError(f"expected a square float64 matrix; got {m.dtype} {m.shape}")
    if not m.flags.c_contiguous:
        raise PosdiagError("expected a C-contiguous matrix")


def distances_to_first(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Hellinger distance of each row of a canonical csr count matrix to row 0.

    ``H^2 = 1/2 sum_v (sqrt(p_0v) - sqrt(p_iv))^2`` by a merge of the two sorted rows (rows
    in parallel): a sum of squares, exact to rounding even when the rows are equal (then 0).
    A row without tokens is at distance 1 (and every row when row 0 has none).

    Parameters
    ----------
    indptr : ndarray of shape (n + 1,)
    indices, data : ndarray
        The csr arrays (sorted column indices, no duplicates, counts >= 0).

    Returns
    -------
    ndarray of shape (n,)
    """
    out = np.empty(indptr.size - 1)
    if indices.size < COMPILED_FROM_NNZ:
        return _distances_to_first_numpy(indptr.astype(np.int64), indices, data)
    _square_kernels()["to_first"](indptr.astype(np.int64), indices, data, out)
    return out


def _distances_to_first_numpy(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray
) -> np.ndarray:
    """:func:`distances_to_first` in numpy: the same terms, summed in another order (so equal
    to rounding), and exactly 0 for a row equal to row 0 (every term is 0, none is missing)."""
    n = indptr.size - 1
    data = np.asarray(data[: indptr[-1]], dtype=np.float64)
    indices = indices[: indptr[-1]]
    lengths = np.diff(indptr)
    rows = np.repeat(np.arange(n), lengths)
    totals = np.bincount(rows, weights=data, minlength=n)
    e0 = int(indptr[1])
    if totals[0] <= 0.0:
        return np.ones(n)
    first = np.zeros(int(indices.max()) + 1 if indices.size else 1)
    first[indices[:e0]] = np.sqrt(data[:e0]) / np.sqrt(totals[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.sqrt(data) / np.sqrt(totals[rows])
    at = first[indices]
    shared = np.bincount(rows, weights=at * at, minlength=n)  # row 0's mass met by row i
    met = np.bincount(rows, weights=(at > 0).astype(np.float64), minlength=n)
    terms = np.bincount(rows, weights=(at - value) ** 2, minlength=n)
    # Row 0's terms that row i lacks; none (exactly 0) when row i holds all of row 0's tokens.
    missing = np.where(met == np.count_nonzero(first), 0.0, np.sum(first * first) - shared)
    acc = terms + np.maximum(missing, 0.0)
    out = np.sqrt(np.clip(acc / 2.0, 0.0, 1.0))
    out[totals <= 0.0] = 1.0
    return out


# Below these sizes the n x n passes, the column counts and the distances to row 0 run in numpy
# (the same arithmetic): the bundled corpus (76 positions, 3,600 stored counts) then never
# imports numba, whose import and cache load would be a large share of `make run`.
COMPILED_FROM_ROWS = 256
COMPILED_FROM_NNZ = 1 << 20

_SQUARE: dict[str, Callable[..., None]] = {}


def _square_kernels() -> dict[str, Callable[..., None]]:
    if _SQUARE:
        return _SQUARE
    import math

    numba = load_numba()

    @numba.njit(parallel=True, cache=True, nogil=True)
    def pairs(bc, col, row, grand, scale, diag, mode, packed, out, tile):  # pragma: no cover
        # Each pair (i, j >= i) is read and written to both entries, in one pass:
        # - _UPPER: both take the upper entry bc[i, j], or with a packed upper triangle (row
        #   after row, diagonal included; packed.size > 0) its entry (a mirror, copies only);
        # - _IMPLIED: the distances sqrt(max(0, (diag_i + diag_j) / 2 - bc_ij)), zero diagonal,
        #   symmetrised (posdiag.geometry.estimator.implied_distances' numpy order: clip (NaN
        # passes), sqrt, and the symmetrisation's x - 0 - 0 + 0 turning a -0.0 into 0.0);
        # - _CENTRED: out = sym(((bc - col) - row + grand) * scale); with zero col/row/grand and
        #   scale 1 it is the plain symmetrisation (x - 0 - 0 + 0) * 1 == x.
        # Tile row I owns the tiles (I, J >= I) and their mirrors; rows I and nt - 1 - I go to
        # the same thread, so every thread gets the same share of the triangle. Each pair is
        # read before it is written, so out may be bc.
        n = bc.shape[0]
        nt = (n + tile - 1) // tile
        for k in numba.prange((nt + 1) // 2):
            for s in range(2):
                ti = k if s == 0 else nt - 1 - k
                if s == 1 and ti == k:
                    continue
                lo, hi = ti * tile, min(n, (ti + 1) * tile)
                for tj in range(ti, nt):
                    lo2, hi2 = tj * tile, min(n, (tj + 1) * tile)
                    for i in range(lo, hi):
                        # Row i's packed segment starts at i n - i (i - 1) / 2.
                        start = i * n - (i * (i - 1)) // 2 - i
                        for j in range(max(lo2, i), hi2):
                            if mode == _UPPER:
                                avg = packed[start + j] if packed.size > 0 else bc[i, j]
                            elif mode == _IMPLIED:
                                if i == j:
                                    out[i, i] = 0.0
                                    continue
                                x = (diag[i] + diag[j]) / 2.0 - bc[i, j]
                                if x < 0.0:  # not max(): a NaN must pass
                                    x = 0.0
                                y = (diag[j] + diag[i]) / 2.0 - bc[j, i]
                                if y < 0.0:
                                    y = 0.0
                                avg = ((math.sqrt(x) + 0.0) + (math.sqrt(y) + 0.0)) / 2.0
                            else:
                                x = (((bc[i, j] - col[j]) - row[i]) + grand) * scale
                                y = (((bc[j, i] - col[i]) - row[j]) + grand) * scale
                                avg = (x + y) / 2.0
                            out[i, j] = avg
                            out[j, i] = avg

    @numba.njit(parallel=True, cache=True, nogil=True)
    def to_first(indptr, indices, data, out):  # pragma: no cover - compiled
        e0 = indptr[1]
        n0 = 0.0
        for p in range(e0):
            n0 += data[p]
        # sqrt(c / N) as sqrt(c) / sqrt(N), the same expression for every row: a row equal to
        # row 0 gives the same terms, so its distance is exactly 0.
        first = np.empty(e0)
        for p in range(e0):
            first[p] = math.sqrt(data[p]) / math.sqrt(n0)
        for i in numba.prange(indptr.size - 1):
            ni = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                ni += data[p]
            if n0 <= 0.0 or ni <= 0.0:
                out[i] = 1.0
                continue
            root = math.sqrt(ni)
            acc = 0.0
            p, q, pe = 0, indptr[i], indptr[i + 1]
            while p < e0 or q < pe:
                if q >= pe or (p < e0 and indices[p] < indices[q]):
                    d = first[p]
                    p += 1
                elif p >= e0 or indices[q] < indices[p]:
                    d = math.sqrt(data[q]) / root
                    q += 1
                else:
                    d = first[p] - math.sqrt(data[q]) / root
                    p += 1
                    q += 1
                acc += d * d
            out[i] = math.sqrt(min(1.0, max(0.0, acc / 2.0)))

    _SQUARE.update(pairs=pairs, to_first=to_first)
    return _SQUARE
