"""Each bootstrap replicate's ``B_H`` (and ``D_H``), from a half of the shards: up to
:data:`PATTERN_MAX_BYTES` on the total's fixed sparsity pattern (:class:`ShardPattern`, no compiled
code), beyond on shard sums (:class:`~posdiag.uncertainty._shardsum.ShardStack`) and compiled Gram
products (why two: docs/performance.md). Oracle: tests/uncertainty/oracle.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import PosdiagError
from ..geometry._gram import DENSE_FRACTION
from ..geometry.core import gram_from_distances, hellinger_distances
from ..geometry.estimator import (
    crossfit_bc,
    gram_from_bc,
    implied_distances,
    split_picks,
    stack_shards,
    stacked_halves,
)
from ._shardsum import ShardStack

__all__ = [
    "PATTERN_MAX_BYTES",
    "PatternTooLarge",
    "ReplicateGrams",
    "ShardPattern",
    "replicate_grams",
]

# The pattern's table (8 bytes a shard and cell) and rare pairs (24 bytes each).
PATTERN_MAX_BYTES = 192 << 20

# (index of the replicate in the weights, B, D or None) of each replicate kept.
ReplicateGrams = Iterator[tuple[int, np.ndarray, np.ndarray | None]]


class PatternTooLarge(PosdiagError):
    """The fixed-pattern layout would exceed :data:`PATTERN_MAX_BYTES`."""


def _check_size(k: int, nnz: int, pairs: int, max_bytes: int) -> None:
    need = 8 * k * nnz + 24 * pairs
    if need > max_bytes:
        raise PatternTooLarge(
            f"the replicate pattern needs {need / 1e6:,.0f} MB (max {max_bytes / 1e6:,.0f} MB)"
        )


class ShardPattern:
    """The shards' counts on rows ``0..n-1``, laid out on the total's sparsity pattern.

    Parameters
    ----------
    shards : sequence of K matrices of shape (n_positions, vocab_size)
    n : int
        Rows (positions) kept.
    cells : int, optional
        Stored cells of the shards' total on those rows, if known (to refuse early).
    max_bytes : int
        The most the table and the rare pairs may take (else :class:`PatternTooLarge`).

    Attributes
    ----------
    table : ndarray of shape (K, nnz)
        ``table[k, e]`` is shard ``k``'s count at the total's ``e``-th stored cell (row-major,
        sorted columns); 0 where the shard lacks the token.
    """

    def __init__(
        self,
        shards: Sequence[sp.spmatrix | sp.sparray | np.ndarray],
        n: int,
        cells: int | None = None,
        max_bytes: int = PATTERN_MAX_BYTES,
    ) -> None:
        parts = [sp.csr_matrix(s)[:n] for s in shards]
        _check_size(len(parts), max(cells or 0, *(p.nnz for p in parts)), 0, max_bytes)
        total = sum(parts[1:], sp.csr_matrix(parts[0], dtype=np.float64, copy=True))
        total.sum_duplicates()
        total.eliminate_zeros()
        total.sort_indices()
        v = total.shape[1]
        self.k, self.n = len(parts), n
        self.indptr, self.indices = total.indptr, total.indices
        self.row = np.repeat(np.arange(n), np.diff(total.indptr))
        if np.any(np.diff(total.indptr) == 0):
            raise PosdiagError("every analysed position needs tokens for the bootstrap")
        col_nnz = np.bincount(total.indices, minlength=v)
        dense_cols = col_nnz > DENSE_FRACTION * n
        pairs = int(np.sum(col_nnz[~dense_cols].astype(np.int64) ** 2))
        _check_size(self.k, total.nnz, pairs, max_bytes)
        keys = self.row.astype(np.int64) * v + self.indices
        self.table = np.zeros((self.k, keys.size))
        for i, p in enumerate(parts):
            p = sp.csr_matrix(p, dtype=np.float64)
            p.sum_duplicates()
            p.eliminate_zeros()
            pk = np.repeat(np.arange(n), np.diff(p.indptr)).astype(np.int64) * v + p.indices
            self.table[i, np.searchsorted(keys, pk)] = p.data
        # The column split once for every split of every replicate.
        self.kd = int(dense_cols.sum())
        position = np.cumsum(dense_cols) - 1
        is_dense = dense_cols[self.indices]
        self.dense_entries = np.flatnonzero(is_dense)
        self.dense_flat = self.row[is_dense] * self.kd + position[self.indices[is_dense]]
        rare = np.flatnonzero(~is_dense)
        r_cols = self.indices[rare]
        # The rare part as entry pairs sharing a column, each adding ra[e] rb[f] to (row e, row f).
        order = rare[np.argsort(r_cols, kind="stable")]
        per_col = np.bincount(r_cols, minlength=v)
        m = per_col[self.indices[order]]  # column size, per entry in column order
        starts = np.concatenate(([0], np.cumsum(per_col)))[self.indices[order]]
        self.pair_a = np.repeat(order, m)
        block = np.repeat(np.cumsum(m) - m, m)
        self.pair_b = order[np.repeat(starts, m) + np.arange(pairs) - block]
        self.pair_cell = self.row[self.pair_a] * n + self.row[self.pair_b]
        self.v = v
        self.starts = self.indptr[:-1]

    def counts(self, weights: np.ndarray) -> np.ndarray:
        """Counts on the pattern of the shards weighted by 0/1 ``weights`` (shape (K,)): (nnz,),
        exact integers in float64."""
        return np.asarray(weights, dtype=np.float64) @ self.table

    def supports(self, data: np.ndarray) -> np.ndarray:
        """Row sums of counts on the pattern, shape (n,)."""
        return np.add.reduceat(data, self.starts)

    def sqrt_rows(self, data: np.ndarray, supports: np.ndarray) -> np.ndarray:
        """``sqrt(C / N)`` on the pattern, rounded as ``estimator.sqrt_rows`` rounds it."""
        inv = 1.0 / supports
        return np.sqrt(data * inv[self.row])

    def product(self, ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
        """``R^A (R^B)^T`` for two rows-on-pattern arrays, dense (n, n)."""
        n = self.n
        out = np.zeros((n, n))
        if self.kd:
            da = np.zeros(n * self.kd)
            db = np.zeros(n * self.kd)
            da[self.dense_flat] = ra[self.dense_entries]
            db[self.dense_flat] = rb[self.dense_entries]
            out += da.reshape(n, self.kd) @ db.reshape(n, self.kd).T
        if self.pair_cell.size:
            out += np.bincount(
                self.pair_cell, weights=ra[self.pair_a] * rb[self.pair_b], minlength=n * n
            ).reshape(n, n)
        return out

    def csr(self, data: np.ndarray) -> sp.csr_matrix:
        """Counts on the pattern as a csr matrix of shape (n, V) (explicit zeros removed)."""
        # Own copies: eliminate_zeros compacts the arrays in place.
        m = sp.csr_matrix(
            (data.copy(), self.indices.copy(), self.indptr.copy()), shape=(self.n, self.v)
        )
        m.eliminate_zeros()
        return m


def replicate_grams(
    shards: Sequence[sp.csr_matrix],
    n: int,
    weights: np.ndarray,
    estimator: str,
    splits: int,
    split_rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
    distances: bool = True,
    cells: int | None = None,
    max_bytes: int = PATTERN_MAX_BYTES,
) -> ReplicateGrams:
    """``(j, B, D)`` of each replicate ``j`` (a row of 0/1 ``weights`` (R, K)) whose every
    position keeps support (in each quarter, for a cross-fit split ``splits`` times with
    ``split_rng``); ``D`` None without ``distances``. ``progress(done, R)`` after each."""
    draw = _Draw(weights, estimator, splits, split_rng, progress, distances)
    try:
        pattern = ShardPattern(shards, n, cells, max_bytes)
    except PatternTooLarge:
        return _summed_replicates(ShardStack(stack_shards(shards, n), n), draw)
    return _pattern_replicates(pattern, draw)


@dataclass(frozen=True)
class _Draw:
    """What every replicate engine is given (:func:`replicate_grams`)."""

    weights: np.ndarray
    estimator: str
    splits: int
    split_rng: np.random.Generator
    progress: Callable[[int, int], None] | None
    distances: bool

    def kept(self) -> Iterator[tuple[int, np.ndarray]]:
        """Each replicate's index and weights, reporting progress."""
        for j, w in enumerate(self.weights):
            if self.progress is not None:
                self.progress(j + 1, len(self.weights))
            yield j, w


def _pattern_replicates(pattern: ShardPattern, draw: _Draw) -> ReplicateGrams:
    for j, w in draw.kept():
        cw = pattern.counts(w)
        if np.any(pattern.supports(cw) <= 0):
            continue
        if draw.estimator != "crossfit":
            d = hellinger_distances(pattern.csr(cw))
            yield j, gram_from_distances(d), d
            continue
        subset = np.flatnonzero(w)
        acc: np.ndarray | None = None
        made = 0
        for first in split_picks(subset.size, draw.splits, draw.split_rng):
            pick = np.zeros(pattern.k)
            pick[subset[first]] = 1.0
            ca = pattern.counts(pick)
            cb = cw - ca
            na, nb = pattern.supports(ca), pattern.supports(cb)
            if np.any(na <= 0) or np.any(nb <= 0):
                acc = None
                break
            x = pattern.product(pattern.sqrt_rows(ca, na), pattern.sqrt_rows(cb, nb))
            acc = x + x.T if acc is None else acc + x + x.T
            made += 1
        if acc is None:
            continue
        bc = acc / (2.0 * made)
        yield j, gram_from_bc(bc), implied_distances(bc) if draw.distances else None


def _summed_replicates(sums: ShardStack, draw: _Draw) -> ReplicateGrams:
    for j, w in draw.kept():
        if np.any(sums.supports(w) <= 0):
            continue
        subset = np.flatnonzero(w)
        if draw.estimator != "crossfit":
            d = hellinger_distances(sums.sum(subset))
            yield j, gram_from_distances(d), d
            continue
        try:
            halves = stacked_halves(sums, sums.n, subset, draw.splits, draw.split_rng)
        except PosdiagError:
            continue  # a position lost all its support in a quarter of the shards
        bc = crossfit_bc(halves, dtype=np.float32)
        yield j, gram_from_bc(bc), implied_distances(bc) if draw.distances else None
