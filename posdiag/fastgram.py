"""Gram products of square-root probability rows at long contexts (issue 13).

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
:class:`ProductPlan`). The dense block runs in float32 by default: every entry of ``BC`` is a sum
of non-negative terms bounded by 1, so float32 accumulation errs by at most a few 1e-7 per entry,
and the effect on stress stays below 1e-6 (tests/test_fastgram.py measures it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .errors import PosdiagError

__all__ = [
    "DENSE_FRACTION",
    "ProductPlan",
    "cross_product",
    "plan_product",
    "sqrt_rows",
]

# Break-even column density: a dense column costs 2 n_A n_B float32 flops (~1e-11 s each with
# BLAS here), a sparse one nnz_A * nnz_B multiply-adds in the compiled kernel (~1.5e-9 s each),
# so a column pays off dense once both sides hold it in more than ~10% of rows (measured at
# n = 2,048: 0.06 -> 5.4 s, 0.1 -> 3.8 s, 0.15 -> 5.2 s under load).
DENSE_FRACTION = 0.1
# Working memory per row block (besides the result): the block's dense product and its
# sparse part, both of shape (block_rows, n_B).
BLOCK_BYTES = 64 << 20
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
        column blocks plus two ``block_rows x n_B`` float64 temporaries.
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
    return np.bincount(m.indices, minlength=v).astype(np.float64)


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
    cost = _column_nnz(a, v) * _column_nnz(b, v)
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
    bound = (na + nb) * kd * item + 2 * block_rows * nb * 8
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
    a.sort_indices()
    layout = _column_layout(a, dense)
    ad, a_s = _apply_layout(layout, a.data, dtype)
    if same:
        # The plug-in multiplies a matrix by itself: split it once.
        bd, b_s = ad, a_s
    else:
        b.sort_indices()
        # The expected thinning's two factors share the sparsity of the counts: scatter by the
        # same layout (the index work was ~0.2 s a matrix at n = 1,024 under load).
        shared = np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        bd, b_s = _apply_layout(layout if shared else _column_layout(b, dense), b.data, dtype)
    # B's rare part by column: row j lists the rows of B holding token j.
    bst = sp.csr_matrix(b_s.T)
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
        if kernel is None:
            block += (a_s[lo:hi] @ bst).toarray()
        else:
            kernel(
                a_s.indptr, a_s.indices, a_s.data, lo, hi, bst.indptr, bst.indices, bst.data, block
            )
    return out


def _gemm(dtype: np.dtype) -> Callable[..., np.ndarray] | None:
    """BLAS dgemm (which can add into its output) for a float64 dense block, else None (a
    float32 block is multiplied in float32 and added)."""
    if dtype != np.float64:
        return None
    from scipy.linalg.blas import dgemm

    return dgemm


def _csr(m: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return m.indptr, m.indices, m.data


def _split_columns(
    m: sp.csr_matrix, dense: np.ndarray, dtype: type[np.floating]
) -> tuple[np.ndarray, sp.csr_matrix]:
    """The dense columns of ``m`` as an (n, k) array of ``dtype`` and the rest as csr (n, V).

    Scatters the stored entries directly (csr column slicing plus ``toarray`` took longer than
    the product itself at n = 2,048). The sparse part keeps the full width with the dense
    columns removed, so column indices stay those of the vocabulary.
    """
    m = sp.csr_matrix(m)
    m.sort_indices()
    return _apply_layout(_column_layout(m, dense), m.data, dtype)


@dataclass(frozen=True)
class _Layout:
    """Where each stored entry of a csr matrix goes when its columns are split (index work
    only, reusable for every matrix with the same sparsity pattern)."""

    shape: tuple[int, int]
    k: int
    is_dense: np.ndarray
    flat: np.ndarray
    keep: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray


def _column_layout(m: sp.csr_matrix, dense: np.ndarray) -> _Layout:
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    is_dense = dense[m.indices]
    position = np.cumsum(dense) - 1
    k = int(dense.sum())
    # One flat scatter: 2-d fancy indexing took 0.6 s for 2.7 M entries.
    flat = rows[is_dense] * k + position[m.indices[is_dense]]
    keep = ~is_dense
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows[keep], minlength=m.shape[0]))))
    shape = (int(m.shape[0]), int(m.shape[1]))
    return _Layout(shape, k, is_dense, flat, keep, indptr, m.indices[keep])


def _apply_layout(
    layout: _Layout, data: np.ndarray, dtype: type[np.floating]
) -> tuple[np.ndarray, sp.csr_matrix]:
    block = np.zeros((layout.shape[0], layout.k), dtype=dtype)
    block.reshape(-1)[layout.flat] = data[layout.is_dense]
    rest = sp.csr_matrix(
        (data[layout.keep], layout.indices.copy(), layout.indptr.copy()), shape=layout.shape
    )
    return block, rest


_KERNEL: list[object] = []


def _rare_kernel() -> Callable[..., None] | None:
    """A compiled kernel adding a csr block times a csr transpose into a dense block, or None.

    scipy's sparse product builds a csr result, which for these inputs is dense (every pair of
    positions shares some rare token): ~10-25 ns per multiply-add on this machine. Accumulating
    straight into the dense block costs ~1-2 ns, in parallel over rows (each row writes only its
    own output row). None when numba is not installed: the scipy product is used.
    """
    if not _KERNEL:
        try:
            import numba
        except ImportError:  # pragma: no cover - numba is a dependency; kept for vendored use
            _KERNEL.append(None)
        else:

            @numba.njit(parallel=True, cache=True, nogil=True)
            def rare(a_ptr, a_idx, a_val, lo, hi, t_ptr, t_idx, t_val, out):
                for r in numba.prange(hi - lo):
                    i = lo + r
                    row = out[r]
                    for p in range(a_ptr[i], a_ptr[i + 1]):
                        j = a_idx[p]
                        x = a_val[p]
                        for q in range(t_ptr[j], t_ptr[j + 1]):
                            row[t_idx[q]] += x * t_val[q]

            _KERNEL.append(rare)
    kernel = _KERNEL[0]
    return kernel  # type: ignore[return-value]
