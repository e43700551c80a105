"""The cross-fit's pieces (why a cross-fit: :mod:`.estimator`), shared by the full estimate and
the held-out halves: splits by shard, ``BC`` from split halves or from the exact average over
every thinning, the plug-in ``BC`` and ``B_H`` from ``BC``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import TypeAlias

import numpy as np
import scipy.sparse as sp

from ..errors import PosdiagError
from ..uncertainty._shardsum import ShardStack
from ._compiled import COMPILED_FROM
from ._gram import cross_product, sqrt_rows, symmetric_product
from ._square import centred_half, symmetrize
from ._square import distances_to_first as csr_distances_to_first
from ._square import implied_distances as compiled_implied_distances
from ._thinning import expected_halves

__all__ = [
    "DEFAULT_SPLITS",
    "crossfit_bc",
    "distances_to_first",
    "distinct_splits",
    "expected_thinning_bc",
    "gram_from_bc",
    "implied_distances",
    "plugin_bc",
    "shard_halves",
    "split_picks",
    "sqrt_rows",
    "stack_shards",
    "stacked_halves",
]

# Why 10 splits: the split-to-split spread of BC is a second-order noise term (docs/geometry.md).
DEFAULT_SPLITS = 10

Matrix: TypeAlias = sp.spmatrix | sp.sparray | np.ndarray


def distances_to_first(counts: Matrix, n: int) -> np.ndarray:
    """Plug-in Hellinger distance of each of positions ``0..n-1`` to position 0, summed over the
    union of the two supports (no cancellation: an identical position is at exactly 0; a row without
    tokens at 1).

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
    n : int
        Positions used, ``1 <= n <= n_positions``.

    Returns
    -------
    ndarray of shape (n,), in [0, 1]
    """
    c = canonical_csr(counts)
    return csr_distances_to_first(c.indptr[: n + 1], c.indices, c.data)


def canonical_csr(m: Matrix, dtype: type[np.floating] | None = None) -> sp.csr_matrix:
    """``m`` as csr (of ``dtype``) with sorted, summed indices: a copy only when it is not."""
    c = sp.csr_matrix(m, dtype=dtype)
    if not c.has_canonical_format:
        c = c.copy()
        c.sum_duplicates()
    return c


def plugin_bc(counts: Matrix) -> np.ndarray:
    """Plug-in Bhattacharyya coefficients ``S S^T`` with ``S = sqrt(C/N)``; diagonal exactly 1.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n, vocab_size), every row with tokens

    Returns
    -------
    ndarray of shape (n, n)
    """
    s = sqrt_rows(counts)
    # Symmetric by construction (one Gram's upper triangle, mirrored); float64, as cross_product.
    bc = symmetric_product(s, dtype=np.float64)
    np.fill_diagonal(bc, 1.0)
    return np.clip(bc, 0.0, 1.0)


def crossfit_bc(
    halves: Sequence[tuple[Matrix, Matrix]], *, dtype: type[np.floating] = np.float64
) -> np.ndarray:
    """``mean_s (X_s + X_s^T) / 2`` with ``X_s = R^A_s (R^B_s)^T``, diagonal as computed.

    Parameters
    ----------
    halves : sequence of (C^A, C^B), each of shape (n, vocab_size)
        Counts of two independent halves of the data, one pair per split.
    dtype : numpy float type
        Precision of the products' dense BLAS block: float64 for the headline, float32 for
        the split-half grams.

    Returns
    -------
    ndarray of shape (n, n)
    """
    if not halves:
        raise PosdiagError("'splits' must be an int in [1, inf]; got 0")
    # sum_s (X_s + X_s^T) = M + M^T with M = sum_s X_s: the products add into one array and
    # the transpose is taken once, in place (no n x n temporaries).
    acc: np.ndarray | None = None
    for ca, cb in halves:
        acc = cross_product(sqrt_rows(ca), sqrt_rows(cb), dtype=dtype, out=acc)
    assert acc is not None
    symmetrize(acc)
    acc /= len(halves)
    return acc


def thinning_halves(
    counts: Matrix, n: int | None = None
) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """:func:`~._thinning.expected_halves` of rows ``0..n-1`` (all when None), each needing
    at least 2 tokens; no copy of canonical int64 counts."""
    c = sp.csr_matrix(counts)
    n = c.shape[0] if n is None else n
    c = sp.csr_matrix(first_rows(c, n), dtype=np.int64)
    c.sum_duplicates()
    _require_tokens(np.asarray(c.sum(axis=1)).ravel(), 2, "thinning")
    return expected_halves(c)


def expected_thinning_bc(
    counts: Matrix,
    n: int | None = None,
    *,
    dtype: type[np.floating] = np.float64,
    rare: type[np.floating] | None = None,
) -> np.ndarray:
    """``BC`` averaged over every thinning of each row (``S -> infinity``), exactly: one product
    (:mod:`._thinning`) instead of ``S`` seeded thinnings and their noise.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size), integer counts
        Rows ``0..n-1`` need ``N_i >= 2`` tokens.
    n : int, optional
        Positions used (default all rows).
    dtype : numpy float type
        Precision of the product's dense BLAS block (:func:`~._gram.symmetric_product`); the
        estimator passes float32 with float64 ``rare`` tokens (every printed number within 1e-6
        of float64).
    rare : numpy float type, optional
        Precision of the rare tokens' part (default ``dtype``).

    Returns
    -------
    ndarray of shape (n, n)
        Symmetric; the diagonal is ``E X_ii`` (below 1).
    """
    ma, mb, diag = thinning_halves(counts, n)
    bc = symmetric_product(ma, mb, dtype=dtype, rare=rare)
    np.fill_diagonal(bc, diag)
    return bc


def gram_from_bc(bc: np.ndarray, *, overwrite: bool = False) -> np.ndarray:
    """``B_H = 1/2 J BC J``, symmetrised; shape (n, n).

    One pass writing one array, in double centring's order of operations; ``overwrite``: into
    ``bc`` when it is C-contiguous float64, one ``n x n`` array fewer at the peak.
    """
    bc = np.ascontiguousarray(bc, dtype=np.float64)
    col, row, grand = bc.mean(axis=0), bc.mean(axis=1), float(bc.mean())
    return centred_half(bc, col, row, grand, out=bc if overwrite else None)


def implied_distances(bc: np.ndarray) -> np.ndarray:
    """Distances ``sqrt(max(0, (BC_ii + BC_jj)/2 - BC_ij))`` implied by ``B_H = 1/2 J BC J``.

    The centring terms cancel in ``B_ii + B_jj - 2 B_ij``, so these are the distances whose
    Torgerson Gram is ``B_H``; a negative value (noise near distance 0) is clipped at 0.

    Returns
    -------
    ndarray of shape (n, n), zero diagonal
    """
    bc = np.asarray(bc, dtype=np.float64)
    if bc.shape[0] >= COMPILED_FROM and bc.ndim == 2 and bc.shape[0] == bc.shape[1]:
        return compiled_implied_distances(np.ascontiguousarray(bc))
    return _implied_distances_numpy(bc)


def _implied_distances_numpy(bc: np.ndarray) -> np.ndarray:
    """:func:`implied_distances` in numpy passes (small inputs: no compile)."""
    diag = np.diag(bc)
    # In place on one n x n array (no temporaries).
    d = np.add.outer(diag, diag)
    d /= 2.0
    d -= bc
    np.clip(d, 0.0, None, out=d)
    np.sqrt(d, out=d)
    np.fill_diagonal(d, 0.0)
    return symmetrize(d)


def _check_supported(c: sp.csr_matrix, what: str) -> None:
    supports = np.asarray(c.sum(axis=1)).ravel()
    empty = np.flatnonzero(supports <= 0)
    if empty.size:
        raise PosdiagError(
            f"{what}: position {int(empty[0])} has no tokens in one half of the data; "
            "use fewer --shards, a larger --min-count, or --estimator plugin"
        )


def shard_halves(
    shards: Sequence[Matrix], n: int, splits: int, rng: np.random.Generator
) -> list[tuple[sp.csr_matrix, sp.csr_matrix]]:
    """``splits`` random halves of the shards: ``(C^A, C^B)`` on positions ``0..n-1``.

    ``A`` holds ``floor(K/2)`` of the ``K`` shards drawn without replacement, ``B`` the rest;
    the splits are distinct, so at most :func:`distinct_splits` of them.

    Parameters
    ----------
    shards : sequence of K >= 2 matrices of shape (n_positions, vocab_size)
    """
    k = len(shards)
    if k < 2:
        raise PosdiagError(f"'shards' must be an int >= 2 for a split by sequence; got {k}")
    return stacked_halves(stack_shards(shards, n), n, np.arange(k), splits, rng)


def stack_shards(shards: Sequence[Matrix], n: int) -> sp.csr_matrix:
    """Rows ``0..n-1`` of every shard, one shard above the other: shape (K n, vocab_size)."""
    return sp.csr_matrix(sp.vstack([sp.csr_matrix(s)[:n] for s in shards]), dtype=np.float64)


def stacked_halves(
    stack: sp.csr_matrix | ShardStack,
    n: int,
    subset: np.ndarray,
    splits: int,
    rng: np.random.Generator,
) -> list[tuple[sp.csr_matrix, sp.csr_matrix]]:
    """:func:`shard_halves` of the shards ``subset`` of a :func:`stack_shards` stack.

    Lets the bootstrap split each replicate's shards without restacking them. From
    :data:`~._compiled.COMPILED_FROM` positions, or given a ``ShardStack``, the halves are
    summed on the shards' union pattern (compiled); below, by a sparse selection product
    (no compile). The same draws and counts either way.
    """
    if not isinstance(stack, ShardStack) and n >= COMPILED_FROM:
        stack = ShardStack(stack, n)
    subset = np.asarray(subset, dtype=np.int64)
    k = subset.size
    halves = (
        _union_halves(stack, subset)
        if isinstance(stack, ShardStack)
        else _selected_halves(stack, n, subset)
    )
    out = []
    for pick in split_picks(k, splits, rng):
        a, b = halves(subset[pick])
        _check_supported(a, "cross-fit")
        _check_supported(b, "cross-fit")
        out.append((a, b))
    return out


def distinct_splits(k: int) -> int:
    """Splits of ``k`` shards into ``floor(k/2)`` and the rest, a split and its mirror (the
    same cross-fit: ``(X + X^T) / 2``) counted once."""
    return math.comb(k, k // 2) // (2 if k % 2 == 0 else 1)


def split_picks(k: int, splits: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """The first halves (sorted shard indices) of ``min(splits, distinct_splits(k))``
    distinct random splits, drawn lazily from ``rng``; a split drawn again, or its mirror, is
    drawn anew (benchmarks/NOTES.md, "Distinct splits").
    """
    seen: set[bytes] = set()
    everything = np.arange(k)
    for _ in range(min(splits, distinct_splits(k))):
        while True:
            pick = np.sort(rng.choice(k, size=k // 2, replace=False))
            key = pick.tobytes()
            if k % 2 == 0:
                key = min(key, np.setdiff1d(everything, pick).tobytes())
            if key not in seen:
                break
        seen.add(key)
        yield pick


_Halves: TypeAlias = Callable[[np.ndarray], tuple[sp.csr_matrix, sp.csr_matrix]]


def _union_halves(stack: ShardStack, subset: np.ndarray) -> _Halves:
    """``(C^A, C^B)`` of the shards ``pick`` and the rest of ``subset``, each a sum on the
    shards' union pattern."""
    return lambda pick: (stack.sum(pick), stack.sum(np.setdiff1d(subset, pick)))


def _selected_halves(stack: sp.csr_matrix, n: int, subset: np.ndarray) -> _Halves:
    """``(C^A, C^B)`` of the shards ``pick`` and the rest of ``subset``: one (n, K n) selection
    product for ``C^A``, ``C^B`` the subset's total minus it."""
    k_all = stack.shape[0] // n
    rows = np.tile(np.arange(n), k_all)
    cols = np.arange(k_all * n)
    whole = np.zeros(k_all)
    whole[subset] = 1.0
    total = _select(whole, stack, rows, cols, n)

    def halves(pick: np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        weights = np.zeros(k_all)
        weights[pick] = 1.0
        a = _select(weights, stack, rows, cols, n)
        b = sp.csr_matrix(total - a)
        b.eliminate_zeros()
        return a, b

    return halves


def _select(
    weights: np.ndarray, stack: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray, n: int
) -> sp.csr_matrix:
    """Sum of the shards with weight 1 in ``weights``; ``stack`` holds them one above another."""
    k = weights.size
    sel = sp.csr_matrix((np.repeat(weights, n), (rows, cols)), shape=(n, k * n))
    out = sp.csr_matrix(sel @ stack)
    out.eliminate_zeros()
    return out


def first_rows(c: sp.csr_matrix, n: int) -> sp.csr_matrix:
    """Rows ``0..n-1`` of ``c``: ``c`` itself when that is all of it and canonical (callers'
    in-place ``sum_duplicates`` leave it as it is), else a copy."""
    if n == c.shape[0] and c.has_canonical_format:
        return c
    return sp.csr_matrix(c[:n])


def check_thinnable(counts: sp.csr_matrix, n: int) -> None:
    """Every row ``0..n-1`` of ``counts`` has >= 4 tokens: after one thinning each half still
    has the 2 tokens its own inner thinning needs."""
    _require_tokens(np.asarray(counts.sum(axis=1)).ravel()[:n], 4, "split-half thinning")


def _require_tokens(supports: np.ndarray, least: int, what: str) -> None:
    """Refuse the first position whose support (shape (n,)) is below ``least`` tokens."""
    short = np.flatnonzero(supports < least)
    if short.size:
        i = int(short[0])
        raise PosdiagError(
            f"cross-fit: position {i} has {int(supports[i])} tokens; {what} needs >= {least}"
        )
