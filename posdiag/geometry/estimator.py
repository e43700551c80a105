"""Estimators of the Hellinger geometry ``B_H`` from counts: cross-fitted (default) and plug-in.

Why not the plug-in alone (docs/theory.md, "The estimator"): two estimates of the *same*
distribution are not at distance 0, so every off-diagonal plug-in ``D_H^2`` is inflated by about
``f_i + f_j`` (``f_i`` the squared error of position ``i``'s estimate) while the diagonal is
exactly 0. Double centring turns that into about ``J diag(f) J``: an isotropic, full-rank
component with a flat eigenvalue tail, which any full-rank table with near-equidistant rows (an
untrained random table) matches. On the bundled corpus the plug-in ranks ``learned-random``
above ``mds-3``.

The cross-fit estimates every Bhattacharyya coefficient from two *independent* halves of the
data. For each split ``s = 1..S`` a random half ``A`` of the shards and the rest ``B`` give
``R^A = sqrt(C^A / N^A)`` and ``R^B`` (row-wise, sparse), and ``X_s = R^A (R^B)^T``. Then

    BC  = mean_s (X_s + X_s^T) / 2        (diagonal as computed: below 1)
    B_H = 1/2 J BC J                       (= -1/2 J D^2 J with D^2 = 1 - BC, diagonal included)

Because the halves are independent, ``E[X_ij] = <m_i, m_j>`` with ``m_i = E sqrt(mu_hat_i)`` for
every ``i, j`` *including* ``i = j``, so the noise term cancels under double centring. What is
left is a shrinkage of words too rare to be seen at all (``N_i p < 1``), so the estimate still
depends on ``N`` (compare corpora at similar ``N``). The estimate is not an exact Euclidean
distance matrix: small negative eigenvalues are expected.

Counts without shards (a counts ``.npz``, token id files counted by the dense path) are split
by *thinning*: each position's counts are split into ``floor(N_i / 2)`` and the rest by a
multivariate hypergeometric draw, which is exactly how a random half of the sequences at that
position splits its tokens. Rows are thinned independently, so the average over *every*
thinning (``S -> infinity``) is one product of expected square-root rows
(:mod:`posdiag.geometry._thinning`): that is what the thinning path computes, exactly and without a
seed, at the cost of one of the ``S`` products it replaces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import scipy.sparse as sp

from .._util.defaults import DEFAULT_ESTIMATOR  # the CLI reads it without numpy
from .._util.threads import small_blas
from .._util.validate import check_choice, check_int
from ..errors import PosdiagError
from ..uncertainty._shardsum import ShardStack
from ._gram import (  # re-exported: the report parks D_H with them
    COMPILED_FROM_ROWS,
    centred_half,
    mirror_upper,
    pack_upper,
    symmetric_product,
    unpack_upper,
)
from ._gram import cross_product as fast_cross_product
from ._gram import distances_to_first as fast_distances_to_first
from ._gram import implied_distances as fast_implied_distances
from ._gram import symmetrize as fast_symmetrize
from ._hypergeom import VECTORISED_FLOOR_FROM
from ._thinning import draw_half, expected_halves
from .core import MDS, _fix_signs, mds_from_gram, mds_of_gram
from .spectral import top_pairs

__all__ = [
    "DEFAULT_ESTIMATOR",
    "DEFAULT_SPLITS",
    "ESTIMATORS",
    "HellingerEstimate",
    "SplitHalf",
    "SplitHalfSummary",
    "cross_product",
    "crossfit_bc",
    "distances_to_first",
    "distinct_splits",
    "estimate_hellinger",
    "expected_thinning_bc",
    "gram_from_bc",
    "heldout_mds_stress",
    "heldout_pair",
    "implied_distances",
    "negative_eigenvalue_note",
    "noise_energy",
    "noise_energy_rows",
    "outer_splits",
    "pack_upper",
    "plugin_bc",
    "restrict",
    "shard_halves",
    "split_half_grams",
    "split_half_summary",
    "split_picks",
    "stack_shards",
    "stacked_halves",
    "sqrt_rows",
    "thinned_halves",
    "unpack_upper",
]

ESTIMATORS = ("crossfit", "plugin")
# Why 10 splits: the split-to-split spread of BC is a second-order noise term; on the bundled
# corpus and on the synthetic validation corpora the cross-fitted stresses moved by < 0.005
# between S = 10 and S = 40, at 1/4 of the cost.
DEFAULT_SPLITS = 10
# Stress levels whose effective ranks a partial headline spectrum grows for (up to
# posdiag.geometry.spectral.DEFAULT_MAX_RANK pairs): those `posdiag stress` prints.
HEADLINE_TOLERANCES = (0.1, 0.05)

Matrix: TypeAlias = sp.spmatrix | sp.sparray | np.ndarray


@dataclass(frozen=True)
class HellingerEstimate:
    """The estimated Hellinger geometry of positions ``0..n-1``.

    Attributes
    ----------
    estimator : str
        ``"crossfit"`` or ``"plugin"``.
    method : str
        How the halves were made: ``"shards"`` (random halves of the shards, i.e. of the
        sequences), ``"thinning"`` (multivariate hypergeometric split of each position's counts)
        or ``"none"`` (plug-in).
    splits : int
        Number of random splits averaged (0 for the plug-in).
    seed : int
        Seed of the splits.
    gram : ndarray of shape (n, n)
        ``B_H = 1/2 J BC J``, symmetric, from the estimated Bhattacharyya coefficients ``BC``
        (whose cross-fitted diagonal is below 1). ``BC`` itself is not kept: the gram and the
        distances hold everything a report needs, and at n = 16,384 each n x n array is
        2.1 GB (:func:`crossfit_bc`, :func:`expected_thinning_bc` and :func:`plugin_bc` give it).
    distances : ndarray of shape (n, n)
        The distances ``B_H`` implies, ``sqrt(max(0, (BC_ii + BC_jj)/2 - BC_ij))``, zero
        diagonal; for the plug-in exactly ``sqrt(1 - BC)``. ``-1/2 J D^2 J = B_H`` wherever no
        squared distance was clipped at 0.
    mds : MDS
        Eigen-decomposition of ``gram`` (eigenvalues descending, may be negative).
    """

    estimator: str
    method: str
    splits: int
    seed: int
    gram: np.ndarray
    distances: np.ndarray
    mds: MDS

    @property
    def n(self) -> int:
        return int(self.gram.shape[0])


def sqrt_rows(counts: Matrix) -> sp.csr_matrix:
    """``sqrt(C / N)`` row-wise, kept sparse; rows with no tokens stay zero.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n, vocab_size)

    Returns
    -------
    csr_matrix of shape (n, vocab_size), float64
    """
    c = sp.csr_matrix(counts, dtype=np.float64)
    supports = np.asarray(c.sum(axis=1)).ravel()
    inv = np.divide(1.0, supports, out=np.zeros_like(supports), where=supports > 0)
    # inv_i * C_ij entry by entry, as the diagonal product computed it (the same numbers),
    # without its sparse product, which is paid several times a replicate.
    s = sp.csr_matrix((c.data * np.repeat(inv, np.diff(c.indptr)), c.indices, c.indptr), c.shape)
    s.eliminate_zeros()
    s.data = np.sqrt(s.data)
    return s


def cross_product(ra: sp.csr_matrix, rb: sp.csr_matrix) -> np.ndarray:
    """``R^A (R^B)^T`` as a dense (n, n) array.

    The one place the cross-fit multiplies: :func:`posdiag.geometry._gram.cross_product`, the
    blocked hybrid product (dense float64 BLAS block for tokens in > 10% of rows, a compiled
    kernel accumulating the rare ones), the same numbers as the plain sparse product to ~1e-15
    and faster at long contexts (docs/performance.md).

    Parameters
    ----------
    ra, rb : csr_matrix of shape (n, vocab_size)

    Returns
    -------
    ndarray of shape (n, n)
    """
    # float64: the headline eigenvalues must agree with a dense pipeline to 1e-6.
    return fast_cross_product(ra, rb, dtype=np.float64)


def distances_to_first(counts: Matrix, n: int) -> np.ndarray:
    """Plug-in Hellinger distance of each of positions ``0..n-1`` to position 0.

    ``H^2 = 1/2 sum_v (sqrt(p_0v) - sqrt(p_iv))^2`` summed over the union of the two supports
    (:func:`posdiag.geometry._gram.distances_to_first`): no cancellation, so a position identical to
    position 0 is at distance exactly 0 (``sqrt(1 - BC)`` leaves ~1e-7 of rounding there), and
    no ``sqrt(C / N)`` matrix is built. Rows without tokens are at distance 1, as with
    :func:`sqrt_rows`.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
    n : int
        Positions used, ``1 <= n <= n_positions``.

    Returns
    -------
    ndarray of shape (n,), in [0, 1]
    """
    c = sp.csr_matrix(counts)
    if not c.has_canonical_format:
        c = c.copy()
        c.sum_duplicates()
    return fast_distances_to_first(c.indptr[: n + 1], c.indices, c.data)


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
    # Symmetric by construction (one Gram's upper triangle, mirrored): half a product's work;
    # float64, as cross_product.
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
        Precision of the products' dense BLAS block (:func:`posdiag.geometry._gram.cross_product`):
        float64 for the headline, float32 for the split-half grams (as the thinning's).

    Returns
    -------
    ndarray of shape (n, n)
    """
    if not halves:
        raise PosdiagError("'splits' must be an int in [1, inf]; got 0")
    # sum_s (X_s + X_s^T) = M + M^T with M = sum_s X_s: the first product is written, the later
    # ones add into it (BLAS beta = 1), and the transpose is taken once, in place (no n x n
    # temporaries: 2 GB each at n = 16,384).
    acc: np.ndarray | None = None
    for ca, cb in halves:
        acc = fast_cross_product(sqrt_rows(ca), sqrt_rows(cb), dtype=dtype, out=acc)
    assert acc is not None
    fast_symmetrize(acc)
    acc /= len(halves)
    return acc


def expected_thinning_bc(
    counts: Matrix,
    n: int | None = None,
    *,
    dtype: type[np.floating] = np.float64,
    rare: type[np.floating] | None = None,
) -> np.ndarray:
    """``BC`` averaged over every thinning of each row (``S -> infinity``), exactly.

    ``E X_ij = <m^A_i, m^B_j>`` for ``i != j`` (rows are thinned independently) and ``E X_ii``
    from each token's hypergeometric share (:mod:`posdiag.geometry._thinning`), so one product
    replaces the ``S`` seeded thinnings, and the split-to-split noise they leave is gone.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size), integer counts
        Rows ``0..n-1`` need ``N_i >= 2`` tokens.
    n : int, optional
        Positions used (default all rows).
    dtype : numpy float type
        Precision of the product's dense BLAS block
        (:func:`posdiag.geometry._gram.symmetric_product`).
        The estimator passes float32 (the block centred on its columns' level) with float64
        ``rare`` tokens: every printed number within 1e-6 of float64
        (tests/geometry/test_longctx_paths.py), the top eigenvalues within 2e-7 at n = 4,096 and
        5.8e-8 at 16,384.
    rare : numpy float type, optional
        Precision of the rare tokens' part (default ``dtype``;
        :func:`posdiag.geometry._gram.symmetric_product`).

    Returns
    -------
    ndarray of shape (n, n)
        Symmetric; the diagonal is ``E X_ii`` (below 1).
    """
    c = sp.csr_matrix(counts)
    n = c.shape[0] if n is None else n
    c = sp.csr_matrix(_first_rows(c, n), dtype=np.int64)
    c.sum_duplicates()
    supports = np.asarray(c.sum(axis=1)).ravel()
    if np.any(supports < 2):
        i = int(np.flatnonzero(supports < 2)[0])
        raise PosdiagError(
            f"cross-fit: position {i} has {int(supports[i])} tokens; thinning needs >= 2"
        )
    ma, mb, diag = expected_halves(c)
    # (M^A M^B^T + M^B M^A^T) / 2 as two Grams' upper triangles: ~0.6 of a product's work.
    bc = symmetric_product(ma, mb, dtype=dtype, rare=rare)
    np.fill_diagonal(bc, diag)
    return bc


def gram_from_bc(bc: np.ndarray) -> np.ndarray:
    """``B_H = 1/2 J BC J``, symmetrised; shape (n, n)."""
    bc = np.ascontiguousarray(bc, dtype=np.float64)
    # One compiled pass writing one new array, in double_center's order of operations (the
    # same numbers): at n = 16,384 each n x n temporary is 2 GB.
    col, row, grand = bc.mean(axis=0), bc.mean(axis=1), bc.mean()
    return centred_half(bc, col, row, float(grand))


def implied_distances(bc: np.ndarray) -> np.ndarray:
    """Distances ``sqrt(max(0, (BC_ii + BC_jj)/2 - BC_ij))`` implied by ``B_H = 1/2 J BC J``.

    ``B_ii + B_jj - 2 B_ij = (BC_ii + BC_jj)/2 - BC_ij`` (the centring terms cancel), so these are
    the distances whose Torgerson Gram is ``B_H``; with a unit diagonal they are ``sqrt(1 - BC)``.
    A negative value (noise around a true distance near 0) is clipped at 0.

    Returns
    -------
    ndarray of shape (n, n), zero diagonal
    """
    bc = np.asarray(bc, dtype=np.float64)
    if bc.shape[0] >= COMPILED_FROM_ROWS and bc.ndim == 2 and bc.shape[0] == bc.shape[1]:
        # One compiled pass, the same numbers as the numpy passes below, without their temporaries.
        return fast_implied_distances(np.ascontiguousarray(bc))
    diag = np.diag(bc)
    # In place on one n x n array (no temporaries: 2 GB each at n = 16,384).
    d = np.add.outer(diag, diag)
    d /= 2.0
    d -= bc
    np.clip(d, 0.0, None, out=d)
    np.sqrt(d, out=d)
    np.fill_diagonal(d, 0.0)
    return fast_symmetrize(d)


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
    the splits are distinct (:func:`split_picks`), so at most :func:`distinct_splits` of them
    (3 for 4 shards: the cross-fit then averages every split once).

    Parameters
    ----------
    shards : sequence of K >= 2 matrices of shape (n_positions, vocab_size)
    """
    k = len(shards)
    if k < 2:
        raise PosdiagError(f"'shards' must be an int >= 2 for a split by sequence; got {k}")
    return stacked_halves(stack_shards(shards, n), n, np.arange(k), splits, rng)


# From this many stored counts in a stack, its halves are summed on the shards' union pattern
# (posdiag.uncertainty._shardsum): faster at long contexts, but not worth loading compiled code
# below.
SHARD_SUMS_FROM_NNZ = 1 << 20


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

    Lets the bootstrap split each replicate's shards without restacking them. A stack of at
    least :data:`SHARD_SUMS_FROM_NNZ` stored counts, or a
    :class:`~posdiag.uncertainty._shardsum.ShardStack`
    made once for many calls, sums its halves on the shards' union pattern; below, by a
    sparse selection product (no compiled code for the bundled corpus). The same draws and
    the same counts either way.
    """
    if not isinstance(stack, ShardStack) and stack.nnz >= SHARD_SUMS_FROM_NNZ:
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
    """The first halves (sorted shard indices ``0..k-1``) of ``min(splits,``
    :func:`distinct_splits` ``(k))`` distinct random splits, drawn lazily from ``rng``.

    A split drawn again, or its mirror, is drawn anew. Drawn independently, a replicate's 2
    splits of 10 shards were the same split 1 time in 126: that replicate was then a 1-split
    cross-fit, whose stress sits higher by the split noise the second split removes (an
    outlier of several sds; benchmarks/NOTES.md, "Distinct splits").
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
    product for ``C^A`` (instead of K sparse additions), ``C^B`` the subset's total minus it."""
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


def thinned_halves(
    counts: Matrix, n: int, splits: int, rng: np.random.Generator
) -> list[tuple[sp.csr_matrix, sp.csr_matrix]]:
    """``splits`` thinnings of the counts: ``C^A`` holds ``floor(N_i/2)`` tokens of each row.

    A random half of the sequences reaching position ``i`` takes a multivariate hypergeometric
    sample of its ``N_i`` tokens, so this is the by-sequence split of each position (the joint
    split across positions differs; see docs/geometry.md for the measured agreement).

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size), integer counts
    """
    c = sp.csr_matrix(counts)[:n]
    c = sp.csr_matrix(c, dtype=np.int64)
    c.sum_duplicates()
    supports = np.asarray(c.sum(axis=1)).ravel()
    if np.any(supports < 2):
        i = int(np.flatnonzero(supports < 2)[0])
        raise PosdiagError(
            f"cross-fit: position {i} has {int(supports[i])} tokens; thinning needs >= 2"
        )
    out = []
    for _ in range(splits):
        if n >= VECTORISED_FLOOR_FROM:
            # All rows at once, same multivariate hypergeometric law (posdiag.geometry._thinning: a
            # compiled selection sampler), where a per-row loop costs O(n V).
            a, b = draw_half(c, rng)
            out.append((a, b))
            continue
        else:
            data_a = np.empty_like(c.data)
            for i in range(n):
                lo, hi = c.indptr[i], c.indptr[i + 1]
                row = c.data[lo:hi]
                data_a[lo:hi] = rng.multivariate_hypergeometric(row, int(supports[i]) // 2)
        # Own copies of the index arrays: eliminate_zeros works in place and must not touch
        # the other half (or the caller's matrix).
        a = sp.csr_matrix((data_a, c.indices.copy(), c.indptr.copy()), shape=c.shape)
        b = sp.csr_matrix((c.data - data_a, c.indices.copy(), c.indptr.copy()), shape=c.shape)
        a.eliminate_zeros()
        b.eliminate_zeros()
        out.append((a, b))
    return out


def _first_rows(c: sp.csr_matrix, n: int) -> sp.csr_matrix:
    """Rows ``0..n-1`` of ``c``: ``c`` itself when that is all of it and in canonical format
    (so the callers' in-place ``sum_duplicates`` and ``sort_indices`` leave it as it is), else
    a copy (slicing copies every row)."""
    if n == c.shape[0] and c.has_canonical_format:
        return c
    return sp.csr_matrix(c[:n])


def _check_thinnable(counts: sp.csr_matrix, n: int) -> None:
    """Every row ``0..n-1`` of ``counts`` has >= 4 tokens: after one thinning each half still
    has the 2 tokens its own inner thinning needs."""
    # Row sums of all rows, then the first n: no copy of the rows.
    supports = np.asarray(counts.sum(axis=1)).ravel()[:n]
    if np.any(supports < 4):
        i = int(np.flatnonzero(supports < 4)[0])
        raise PosdiagError(
            f"cross-fit: position {i} has {int(supports[i])} tokens; split-half thinning needs >= 4"
        )


def _estimate(
    estimator: str, method: str, splits: int, seed: int, bc: np.ndarray, spectrum: bool = True
) -> HellingerEstimate:
    """The estimate from ``BC``, whose memory becomes the gram (``bc`` is overwritten when it is
    a C-contiguous float64 array): two n x n arrays at the end, not three."""
    bc = np.ascontiguousarray(bc, dtype=np.float64)
    distances = implied_distances(bc)
    return _from_gram(estimator, method, splits, seed, _gram_over_bc(bc), distances, spectrum)


def _gram_over_bc(bc: np.ndarray) -> np.ndarray:
    """:func:`gram_from_bc` written over ``bc`` when it is C-contiguous float64 (the kernel reads
    both entries of a pair before it writes them): one n x n array fewer at the peak."""
    bc = np.ascontiguousarray(bc, dtype=np.float64)
    col, row, grand = bc.mean(axis=0), bc.mean(axis=1), float(bc.mean())
    return centred_half(bc, col, row, grand, out=bc)


def _from_gram(
    estimator: str,
    method: str,
    splits: int,
    seed: int,
    gram: np.ndarray,
    distances: np.ndarray,
    spectrum: bool = True,
) -> HellingerEstimate:
    # Every eigenpair up to posdiag.geometry.spectral.FULL_EIGH_MAX positions, the top ones beyond
    # (the stress tail stays exact from ||B_H||_F^2; docs/geometry.md, "Long contexts").
    # No Lanczos for the smallest eigenvalue beyond EIGVALSH_MAX: it converges slowly on the
    # noise cluster at the bottom of B_H; the report says so.
    mds = (
        mds_of_gram(gram, tolerances=HEADLINE_TOLERANCES, bottom=False)
        if spectrum
        else no_spectrum(gram)
    )
    return HellingerEstimate(estimator, method, splits, seed, gram, distances, mds)


def no_spectrum(gram: np.ndarray) -> MDS:
    """``gram`` as an MDS with no eigenpair computed (``total = ||B||_F^2`` only): for callers
    that use the Gram and the distances alone (``inspect --corpus``), no eigensolve."""
    n = gram.shape[0]
    return MDS(
        eigenvalues=np.empty(0),
        vectors=np.empty((n, 0)),
        gram=gram,
        total=float(np.vdot(gram, gram)),
        bottom=math.nan,
    )


def estimate_hellinger(
    counts: Matrix,
    n: int,
    *,
    shards: Sequence[Matrix] = (),
    estimator: str = DEFAULT_ESTIMATOR,
    splits: int = DEFAULT_SPLITS,
    seed: int = 0,
    spectrum: bool = True,
) -> HellingerEstimate:
    """Estimate the Hellinger geometry of positions ``0..n-1``.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
        The whole corpus; rows ``0..n-1`` need tokens.
    n : int
        Positions analysed (``n_eff``), ``2 <= n <= n_positions``.
    shards : sequence of matrices of shape (n_positions, vocab_size), optional
        Counts of random shards of the sequences (summing to ``counts``); with ``>= 2`` of them
        the cross-fit splits by sequence, otherwise by thinning.
    estimator : {"crossfit", "plugin"}
    splits : int
        Random splits ``S >= 1`` of the shards averaged by the cross-fit, distinct, so at most
        :func:`distinct_splits` of the shards (the estimate records how many). Thinning (no shards)
        averages over every split exactly (:func:`expected_thinning_bc`); ``splits`` is then
        only recorded.
    seed : int
        Seed of the splits (``numpy.random.default_rng``).
    spectrum : bool
        False: no eigensolve, ``mds`` holds the gram and ``||B_H||_F^2`` only
        (:func:`no_spectrum`).

    Returns
    -------
    HellingerEstimate
    """
    estimator = check_choice("estimator", estimator, ESTIMATORS)
    c = sp.csr_matrix(counts)
    n = check_int("n_eff", n, 2, c.shape[0], hi_label="n_positions")
    splits = check_int("splits", splits, 1)
    seed = check_int("seed", seed, 0)
    # One BLAS thread for small geometries (posdiag._util.threads).
    with small_blas(n):
        if estimator == "plugin":
            return _estimate("plugin", "none", 0, seed, plugin_bc(c[:n]), spectrum)
        # Own stream: the same --seed also draws the shards and the bootstrap replicates.
        if len(shards) >= 2:
            try:
                halves = shard_halves(shards, n, splits, np.random.default_rng([seed, 1]))
            except PosdiagError:
                pass  # a random half of the shards left a position without tokens: thin instead
            else:
                # Float32 dense blocks centred on the level, as the thinning's below.
                bc = crossfit_bc(halves, dtype=np.float32)
                # len(halves): fewer than asked when the shards have fewer distinct splits.
                return _estimate("crossfit", "shards", len(halves), seed, bc, spectrum)
        # Thinning: the exact average over every thinning, one product (no split noise, no seed).
        # Float32 dense block, centred on its columns' level (posdiag.geometry._gram._level),
        # float64 rare tokens: the top-10 eigenvalues within 2e-7 of float64 at n = 4,096 and 5.8e-8
        # at 16,384 (float32 rare tokens: 9.5e-6 there), in ~0.6 of the time
        # (tests/geometry/test_longctx_paths.py bounds the printed numbers).
        bc = expected_thinning_bc(c, n, dtype=np.float32, rare=np.float64)
        return _estimate("crossfit", "thinning", splits, seed, bc, spectrum)


def restrict(estimate: HellingerEstimate, n: int) -> HellingerEstimate:
    """The estimate on positions ``0..n-1``: the ``BC`` block, re-centred (``B_H`` recomputed).

    ``B_H = 1/2 J BC J`` removes only terms ``1 a^T + a 1^T`` from ``2 B_H``, and double centring
    removes those again, so the block's ``1/2 J_n BC[:n, :n] J_n`` is ``J_n B_H[:n, :n] J_n``:
    computed from the gram, as ``1/2 J_n (2 B_H[:n, :n]) J_n`` (the doubling is exact). The
    distances of a pair do not depend on the other positions: the block of the distances.
    """
    n = check_int("n", n, 2, estimate.n)
    if n == estimate.n:
        return estimate
    twice = estimate.gram[:n, :n] * 2.0
    col, row, grand = twice.mean(axis=0), twice.mean(axis=1), float(twice.mean())
    gram = centred_half(twice, col, row, grand, out=twice)
    distances = np.ascontiguousarray(estimate.distances[:n, :n])
    return _from_gram(
        estimate.estimator, estimate.method, estimate.splits, estimate.seed, gram, distances
    )


@dataclass(frozen=True)
class SplitHalf:
    """Two cross-fitted geometries from disjoint halves of the data, for held-out checks.

    Attributes
    ----------
    grams : tuple of (ndarray, ndarray), each of shape (n, n)
        ``(B_P, B_Q)`` for each outer split: ``P`` and ``Q`` are independent halves of the
        data (by shard, else by thinning), each cross-fitted on its own.
    """

    grams: tuple[tuple[np.ndarray, np.ndarray], ...]


# Outer splits of the split-half grams (outer_splits): 4 below FOUR_OUTER_SPLITS_BELOW
# positions, 2 up to ONE_OUTER_SPLIT_ABOVE, 1 above. Which shards fall in which half moves a
# held-out mds-r figure: on the bundled corpus mds-2 by sd 0.0167 across seeds with 2 outer
# splits, 0.0068 with 4 (docs/geometry.md, "mds-r is scored held-out"), cheaply; at long
# contexts two halves cost as much as the whole cross-fit, and the seeds agree to 1e-4.
FOUR_OUTER_SPLITS_BELOW = 512
ONE_OUTER_SPLIT_ABOVE = 2048


def split_half_grams(
    counts: Matrix,
    n: int,
    *,
    shards: Sequence[Matrix] = (),
    splits: int = DEFAULT_SPLITS,
    seed: int = 0,
    repeats: int | None = None,
) -> SplitHalf:
    """Cross-fitted ``B_H`` of two independent halves of the data, ``repeats`` times.

    ``repeats`` defaults to :func:`outer_splits`: 4 below :data:`FOUR_OUTER_SPLITS_BELOW`
    positions, 2 up to :data:`ONE_OUTER_SPLIT_ABOVE` and 1 above it: there two halves cost two
    of the report's three Gram products, and single
    outer splits gave held-out ``mds-1..3`` within 1.3e-4 of each other at n = 4,096 (6e-4 at
    n = 1,024), below the three printed digits (docs/geometry.md, "Long contexts").
    Each half gets ``max(2, splits // 2)`` inner splits. With ``>= 4`` shards the halves are
    halves of the shards, otherwise a thinning of each position's counts, each half then
    cross-fitted by its exact average over every inner thinning (:func:`expected_thinning_bc`).

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
    n : int
        Positions analysed, ``2 <= n <= n_positions``.
    """
    c = sp.csr_matrix(counts)
    n = check_int("n_eff", n, 2, c.shape[0], hi_label="n_positions")
    out = []
    for sources in _outer_splits(c, n, shards, splits, seed, repeats):
        g_p = _half_gram(sources.pop(0))
        g_q = _half_gram(sources.pop(0))
        out.append((g_p, g_q))
    return SplitHalf(tuple(out))


# A source of one half's gram: ("shards", its inner halves) or ("thinning", its counts).
_HalfSource: TypeAlias = tuple[str, Any]


def _outer_splits(
    c: sp.csr_matrix,
    n: int,
    shards: Sequence[Matrix],
    splits: int,
    seed: int,
    repeats: int | None,
) -> Iterator[list[_HalfSource]]:
    """The outer splits of :func:`split_half_grams`: per split, the sources of ``B_P`` and
    ``B_Q`` (:func:`_half_gram`), drawn in the same order from the same stream.

    A list the caller pops from, so that a half's counts are freed once its gram is made.
    """
    if repeats is None:
        repeats = outer_splits(n)
    repeats = check_int("repeats", repeats, 1)
    rng = np.random.default_rng([check_int("seed", seed, 0), 3])
    inner = max(2, check_int("splits", splits, 1) // 2)
    for _ in range(repeats):
        sources: list[_HalfSource] = []
        if len(shards) >= 4:
            k = len(shards)
            pick = np.zeros(k, dtype=bool)
            pick[rng.choice(k, size=k // 2, replace=False)] = True
            try:
                sources = [
                    (
                        "shards",
                        shard_halves([shards[int(i)] for i in np.flatnonzero(side)], n, inner, rng),
                    )
                    for side in (pick, ~pick)
                ]
            except PosdiagError:
                sources = []  # a quarter of the shards missed a position: thin instead
        if not sources:
            # Thinning: one random split into P and Q (it must be a real draw: held out means
            # independent), each cross-fitted by its exact average over every inner thinning.
            _check_thinnable(c, n)
            sources = [("thinning", h) for h in draw_half(_first_rows(c, n), rng)]
        yield sources


def _half_gram(source: _HalfSource) -> np.ndarray:
    """The cross-fitted ``B_H`` of one half of the data; shape (n, n)."""
    kind, data = source
    # Float32 dense blocks: these grams feed the held-out mds-r scores and the noise bounds
    # only; the effect on them stays below 1e-6 (tests/geometry/test_longctx_paths.py). By shards
    # that is S / 2 products a half, each faster in float32 than in float64 at long contexts.
    if kind == "shards":
        return _gram_over_bc(crossfit_bc(data, dtype=np.float32))
    return _gram_over_bc(expected_thinning_bc(data, dtype=np.float32))


def heldout_mds_stress(halves: SplitHalf, ranks: Sequence[int]) -> dict[int, float]:
    """Held-out stress of the rank-r MDS encoding: fitted on one half of the data, scored on
    the other.

    The in-sample eigenvalue tail is optimistic next to fixed encodings: ``mds-r`` is fitted to
    the noise of the very estimate it is scored against. Here the rank-r Gram ``G_P`` fitted on
    ``B_P`` is scored against the independent half ``B_Q`` (and vice versa,
    :func:`split_half_grams`), on the footing of a fixed encoding scored against the full
    estimate ``B_H``. That score is ``sqrt(1 - cos^2)`` with ``cos = <B_H, G> / (|B_H| |G|)``,
    where ``E <B_H, G> = <E B_H, G>`` and ``E |B_H|^2 = |E B_H|^2 + (noise of the full
    estimate)``. The held-out version keeps both parts: ``<B_Q, G_P>`` (unbiased: ``Q`` is
    independent of the fit) over ``|G_P|`` and ``sqrt(<B_P, B_Q> + e)``, where ``<B_P, B_Q>`` is
    unbiased for the squared norm of the noise-free half-size geometry and ``e`` the bound on
    the full estimate's squared noise (:func:`noise_energy`). Dividing by ``|B_Q|`` instead
    would charge ``mds-r`` with the larger noise of a half-size estimate, which the fixed
    encodings never face (on the bundled corpus that made ``mds-3`` 0.38 instead of ~0.22).
    The result is the mean over both directions and every outer split; the fit itself uses
    half the data, so it still errs on the pessimistic side.

    Parameters
    ----------
    halves : SplitHalf
    ranks : sequence of int, each in [1, n-1]

    Returns
    -------
    dict mapping rank to stress
    """
    n = halves.grams[0][0].shape[0]
    for r in ranks:
        check_int("rank", r, 1, n - 1, hi_label="n_eff-1")
    acc = {int(r): 0.0 for r in ranks}
    top = max(acc)
    noise = float(noise_energy_rows(halves).sum())  # row blocks: no n x n temporary
    start: np.ndarray | None = None
    for g_p, g_q in halves.grams:
        norm = _heldout_norm(float(np.vdot(g_p, g_q)), noise)
        # The four halves estimate one geometry: each fit starts from the previous one's
        # vectors (block Lanczos warm start, ~20% fewer passes at n = 4,096).
        fit_p = _top_mds(g_p, top, start)
        fit_q = _top_mds(g_q, top, fit_p.vectors)
        start = fit_q.vectors
        _add_split(acc, g_p, fit_p.coordinates(top), g_q, fit_q.coordinates(top), norm)
    return {r: v / (2 * len(halves.grams)) for r, v in acc.items()}


def heldout_pair(
    g_p: np.ndarray, x_p: np.ndarray, g_q: np.ndarray, x_q: np.ndarray, ranks: Sequence[int]
) -> dict[int, float]:
    """:func:`heldout_mds_stress` of one outer split whose fits are already made.

    Used by the bootstrap (posdiag.uncertainty.bootstrap): two complementary replicates are an outer
    split of the full data, and the spread of this figure over such pairs is the spread the
    held-out headline owes to which shards went to which half.

    Parameters
    ----------
    g_p, g_q : ndarray of shape (n, n)
        Cross-fitted ``B_P`` and ``B_Q`` of two disjoint halves of the data.
    x_p, x_q : ndarray of shape (n, top)
        Their MDS coordinates (eigenvectors scaled by the square roots of the clipped
        eigenvalues, largest first), ``top >= max(ranks)``.
    ranks : sequence of int, each in [1, top]

    Returns
    -------
    dict mapping rank to stress
    """
    top = min(x_p.shape[1], x_q.shape[1])
    acc = {check_int("rank", r, 1, top, hi_label="fitted ranks"): 0.0 for r in ranks}
    noise = float(noise_energy_rows(SplitHalf(((g_p, g_q),))).sum())
    norm = _heldout_norm(float(np.vdot(g_p, g_q)), noise)
    _add_split(acc, g_p, x_p[:, :top], g_q, x_q[:, :top], norm)
    return {r: v / 2.0 for r, v in acc.items()}


def outer_splits(n: int) -> int:
    """Outer splits the held-out ``mds-r`` figure averages by default at ``n`` positions: 4
    below :data:`FOUR_OUTER_SPLITS_BELOW`, 2 up to :data:`ONE_OUTER_SPLIT_ABOVE`, 1 above it
    (:func:`split_half_grams`)."""
    if n < FOUR_OUTER_SPLITS_BELOW:
        return 4
    return 1 if n > ONE_OUTER_SPLIT_ABOVE else 2


def _heldout_norm(signal: float, noise: float) -> float:
    """``sqrt(<B_P, B_Q> + e)``, standing in for ``||B_H||`` in the held-out scores
    (:func:`heldout_mds_stress`); 0 when the cross product ``signal`` is not positive (noise
    swamping all signal leaves nothing to fit)."""
    return float(np.sqrt(signal + noise)) if signal > 0 else 0.0


def _add_split(
    acc: dict[int, float],
    g_p: np.ndarray,
    x_p: np.ndarray,
    g_q: np.ndarray,
    x_q: np.ndarray,
    norm: float,
) -> None:
    """Add both directions of one outer split to ``acc``: the rank-r fits on ``P``
    (coordinates ``x_p``, shape (n, top)) scored against ``B_Q``, and those on ``Q`` against
    ``B_P``."""
    _add_heldout(acc, *_rank_sums(g_q @ x_p, x_p), norm)
    _add_heldout(acc, *_rank_sums(g_p @ x_q, x_q), norm)


def _add_heldout(acc: dict[int, float], inner: np.ndarray, norms: np.ndarray, norm: float) -> None:
    """Add each rank's scale-fitted stress ``sqrt(1 - cos^2)``, the cosine clipped to [0, 1]
    (:func:`posdiag.geometry.core.stress`), with ``norm`` standing in for ``||target||``; ``inner``
    and ``norms`` by rank (index ``r - 1``)."""
    for r in acc:
        ng = float(norms[r - 1])
        if norm == 0.0 or ng == 0.0:
            acc[r] += 1.0
            continue
        cos = min(1.0, max(0.0, float(inner[r - 1])) / (norm * ng))
        acc[r] += float(np.sqrt(1.0 - cos * cos))


# From this n the held-out fits compute only the top eigenpairs they use (Lanczos), not all.
TOP_MDS_FROM = 512
# Block of the held-out fits' Lanczos (3 pairs): 8 vectors were fastest against 4, 16 and ARPACK
# at 4,096 and 16,384 positions (benchmarks/NOTES.md).
HELDOUT_BLOCK = 8
# Residual of the held-out fits, relative to ||B||_F. The scores are sums over the fitted
# vectors, so an error e in them moves a score by ~e^2: on the n = 4,096 halves 1e-8 moved the
# three scores by at most 8e-13 from 1e-10 (and 1e-7 by 7e-12), in 34 passes instead of 41.
HELDOUT_TOL = 1e-8


def _top_mds(gram: np.ndarray, k: int, start: np.ndarray | None = None) -> MDS:
    """The MDS of ``gram`` as far as rank ``k`` needs: every pair below :data:`TOP_MDS_FROM`
    positions, else the ``k`` largest by block Lanczos (:func:`posdiag.geometry.spectral.top_pairs`,
    residuals within :data:`HELDOUT_TOL` of ``||gram||_F``, warm-started from ``start``
    (n, m) if given; full ``eigh`` calls here were most of a long report's eigensolves)."""
    n = gram.shape[0]
    if n < TOP_MDS_FROM:
        return mds_from_gram(gram)
    spec = top_pairs(gram, min(k, n - 1), tol=HELDOUT_TOL, start=start, block=HELDOUT_BLOCK)
    return MDS(
        eigenvalues=spec.eigenvalues, vectors=_fix_signs(spec.vectors), gram=gram, total=spec.total
    )


def noise_energy(halves: SplitHalf) -> np.ndarray:
    """Squared sampling error of each entry of the full-data cross-fitted ``B_H`` (an upper bound).

    ``B_P - B_Q`` has mean ~0 (equal-size halves share the same shrinkage), so
    ``E (B_P - B_Q)^2 = 2 var_half``; doubling the data at least halves the variance, so the
    full estimate's squared error is at most ``(B_P - B_Q)^2 / 4``, averaged over outer splits.

    Returns
    -------
    ndarray of shape (n, n)
    """
    # Accumulated in place: two n x n arrays whatever the number of outer splits.
    acc = np.zeros_like(halves.grams[0][0])
    for g_p, g_q in halves.grams:
        d = np.subtract(g_p, g_q)
        d *= d
        acc += d
    acc /= 4.0 * len(halves.grams)
    return acc


def noise_energy_rows(halves: SplitHalf, block_bytes: int = 64 << 20) -> np.ndarray:
    """Row sums of :func:`noise_energy`, of shape (n,), without its ``n x n`` array.

    Row blocks of ``block_bytes``: each row's sum is the one ``noise_energy(halves).sum(axis=1)``
    gives, bit for bit (the same products, and numpy sums each row alone either way).
    """
    n = halves.grams[0][0].shape[0]
    step = max(1, block_bytes // (8 * n))
    out = np.empty(n)
    for lo in range(0, n, step):
        rows = slice(lo, min(n, lo + step))
        acc = np.zeros((rows.stop - lo, n))
        for g_p, g_q in halves.grams:
            d = np.subtract(g_p[rows], g_q[rows])
            d *= d
            acc += d
        acc /= 4.0 * len(halves.grams)
        out[rows] = acc.sum(axis=1)
    return out


def negative_eigenvalue_note(eigenvalues: np.ndarray, *, partial: bool = False) -> str | None:
    """One line on the negative eigenvalues of an estimated ``B_H``, or None if there are none.

    Names the most negative eigenvalue, its ratio to ``l_1``, and how many eigenvalues exceed its
    magnitude (the signal rank: directions clearly above the noise the negatives reveal).
    ``partial``: ``eigenvalues`` are the top ``k`` followed by the smallest one (a partial
    spectrum); when all ``k`` exceed its magnitude the count reads "more than k".
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    if lam.size == 0 or lam[0] <= 0:
        return None
    low = float(lam[-1])
    # Rounding-size negatives are not worth a line (the plug-in is exactly Euclidean).
    if low >= -1e-10 * float(lam[0]):
        return None
    signal = int(np.sum(lam > abs(low)))
    count = str(signal)
    if partial and signal >= lam.size - 1:
        count = f"at least {lam.size - 1}"  # every computed one (the last is the bottom)
    return (
        f"most negative eigenvalue {low:.3g} ({low / lam[0]:+.1%} of l_1 = {lam[0]:.3g}); "
        f"{count} eigenvalue{'s' if signal != 1 else ''} exceed its magnitude (signal rank)"
    )


# From this many positions the summary's element-wise passes are compiled
# (posdiag.geometry._summary,
# faster at long contexts); below, numpy does the same operations (the bundled corpus never
# imports numba).
SUMMARY_COMPILED_FROM = COMPILED_FROM_ROWS
# Rows per block of split_half_summary's pass: a few (rows, n) float64 arrays of this size, so
# the pass adds ~0.1 of an n x n array at n = 16,384 (each is 2.1 GB there).
SUMMARY_BLOCK_BYTES = 32 << 20


@dataclass(frozen=True)
class SplitHalfSummary:
    """What a report takes from the split-half grams (:func:`split_half_summary`), without them.

    Attributes
    ----------
    heldout : mapping of int to float
        Held-out stress of ``mds-r`` for each rank asked for (:func:`heldout_mds_stress`).
    energy_rows : ndarray of shape (n,)
        :func:`noise_energy_rows` of the grams.
    partners : ndarray of shape (n,), int64, or None
        Per position, how many others are within their own sampling error of it (the row sums
        of ``posdiag.reports.analysis._pairs_within_noise``'s mask); None when not asked for.
    within : int
        Pairs ``i < j`` within their sampling error (0 when ``partners`` is None).
    first_pairs : tuple of (int, int)
        The first ``max_pairs`` of those pairs, ``i < j`` in row-major order.
    """

    heldout: Mapping[int, float]
    energy_rows: np.ndarray
    partners: np.ndarray | None
    within: int
    first_pairs: tuple[tuple[int, int], ...]


class _Rows:
    """Row blocks of a symmetric gram held whole."""

    def __init__(self, gram: np.ndarray) -> None:
        self.gram = gram
        self.diag = np.diag(gram).copy()

    def block(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``lo..hi-1``: a view of the gram (``out`` unused), else written into ``out``
        of shape (hi - lo, n) by the subclasses."""
        return self.gram[lo:hi]


# Columns per strip of a transposed copy: numpy's strided copy of a whole (rows, n) strip goes
# through memory column by column, 64 columns at a time stay in cache.
_STRIP = 64


def _copy_transposed(out: np.ndarray, src: np.ndarray) -> None:
    """``out[...] = src.T`` by strips of :data:`_STRIP` columns of ``out`` (copies only)."""
    for c0 in range(0, out.shape[1], _STRIP):
        out[:, c0 : c0 + _STRIP] = src[c0 : c0 + _STRIP].T


class _StashedRows(_Rows):
    """Row blocks of a symmetric gram ``G`` whose strict lower triangle was copied into the
    strict lower triangle of another symmetric array ``buf`` (its upper triangle untouched,
    so :func:`posdiag.geometry._gram.mirror_upper` restores it bit for bit) and whose diagonal is
    kept
    apart. Every entry is copied, never computed: the blocks equal ``G``'s rows bit for bit."""

    def __init__(self, gram: np.ndarray, buf: np.ndarray, block_bytes: int) -> None:
        n = gram.shape[0]
        self.gram = buf
        self.diag = np.diag(gram).copy()
        for lo, hi in _row_spans(n, block_bytes):
            # Row lo + i takes the columns j < lo + i: np.tri's k = lo - 1.
            below = np.tri(hi - lo, hi, lo - 1, dtype=bool)
            np.copyto(buf[lo:hi, :hi], gram[lo:hi, :hi], where=below)

    def block(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        buf = self.gram
        if out is None:
            out = np.empty((hi - lo, buf.shape[0]))
        out[:, :lo] = buf[lo:hi, :lo]  # columns left of the block: below the diagonal
        _copy_transposed(out[:, hi:], buf[hi:, lo:hi])  # right of it: G[i, j] = G[j, i]
        tile = buf[lo:hi, lo:hi]
        square = out[:, lo:hi]
        square[...] = tile.T  # above the tile's diagonal: mirrored from below it
        np.copyto(square, tile, where=np.tri(hi - lo, hi - lo, -1, dtype=bool))
        np.fill_diagonal(square, self.diag[lo:hi])
        return out


class _UpperRows(_Rows):
    """Row blocks of a symmetric matrix read from the upper triangle of ``buf`` (diagonal
    included) only: its strict lower triangle may hold a stashed gram (:class:`_StashedRows`)."""

    def __init__(self, buf: np.ndarray) -> None:
        self.gram = buf
        self.diag = np.diag(buf).copy()

    def block(self, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        buf = self.gram
        if out is None:
            out = np.empty((hi - lo, buf.shape[0]))
        out[:, hi:] = buf[lo:hi, hi:]  # right of the block: above the diagonal
        _copy_transposed(out[:, :lo], buf[:lo, lo:hi])  # left of it: B[i, j] = B[j, i]
        tile = buf[lo:hi, lo:hi]
        square = out[:, lo:hi]
        square[...] = tile.T  # below the tile's diagonal: mirrored from above it
        np.copyto(square, tile, where=~np.tri(hi - lo, hi - lo, -1, dtype=bool))
        return out


def _row_spans(n: int, block_bytes: int) -> list[tuple[int, int]]:
    step = max(1, block_bytes // (8 * max(n, 1)))
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def split_half_summary(
    counts: Matrix,
    n: int,
    gram: np.ndarray,
    *,
    shards: Sequence[Matrix] = (),
    splits: int = DEFAULT_SPLITS,
    seed: int = 0,
    repeats: int | None = None,
    ranks: Sequence[int] = (),
    noise: bool = True,
    stash: np.ndarray | None = None,
    max_pairs: int = 100,
    block_bytes: int = SUMMARY_BLOCK_BYTES,
) -> SplitHalfSummary:
    """:func:`heldout_mds_stress`, :func:`noise_energy_rows` and the pairs within their sampling
    error of :func:`split_half_grams`'s grams, made one half at a time and then dropped.

    At long contexts the grams were the largest thing a report held: two ``n x n`` arrays
    beside ``B_H`` and ``D_H`` while the encodings were scored. Here each half's gram is made,
    used and freed: ``B_P`` is fitted (its top eigenpairs) as soon as it exists; with one outer
    split and ``stash`` given, its strict lower triangle then moves into ``stash``'s (a
    symmetric array not read meanwhile: ``gram`` itself, whose rows are then read from its upper
    triangle, or the distances ``D_H``), so only one half's gram is whole while ``B_Q`` is
    made; then one pass over row blocks of both (and of ``gram``) sums everything else, and
    ``stash``'s lower triangle is restored from its upper one.

    Every entry of every block equals the whole grams' (copies only), so ``energy_rows``,
    ``partners``, ``within`` and ``first_pairs`` are bit for bit those of the whole-matrix
    functions; the held-out stresses differ only in the summation order of ``<B_P, B_Q>`` and
    ``B_P X`` over row blocks (~1e-16 relative; tests/geometry/test_split_half_summary.py).

    Parameters
    ----------
    counts, n, shards, splits, seed, repeats
        As for :func:`split_half_grams`.
    gram : ndarray of shape (n, n)
        The full-data ``B_H`` (its squared distances are what sampling error is compared with).
    ranks : sequence of int, each in [1, n-1]
        Held-out ``mds-r`` stresses wanted.
    noise : bool
        Also find the pairs within their sampling error (``partners``, ``within``,
        ``first_pairs``).
    stash : ndarray of shape (n, n), float64, C-contiguous, writeable, exactly symmetric, optional
        Scratch for the first half's gram (used with one outer split only; restored on return).
    max_pairs : int
        Pairs listed in ``first_pairs``.

    Returns
    -------
    SplitHalfSummary
    """
    c = sp.csr_matrix(counts)
    n = check_int("n_eff", n, 2, c.shape[0], hi_label="n_positions")
    ranks = [check_int("rank", r, 1, n - 1, hi_label="n_eff-1") for r in ranks]
    top = max(ranks, default=0)
    gram = np.asarray(gram, dtype=np.float64)
    if repeats is None:
        repeats = outer_splits(n)
    # The stash may be the gram itself: its lower triangle is then read from its upper one.
    rows_h = _UpperRows(gram) if stash is gram else _Rows(gram)
    usable = (
        stash is not None
        and repeats == 1
        and stash.shape == (n, n)
        and stash.dtype == np.float64
        and stash.flags.c_contiguous
        and stash.flags.writeable
    )
    with small_blas(n):
        halves: list[tuple[_Rows, np.ndarray, np.ndarray | None, np.ndarray | None]] = []
        fits: list[tuple[np.ndarray, np.ndarray]] = []  # (<B_Q, G_P>, ||G_P||) by rank, per split
        start: np.ndarray | None = None
        try:
            for sources in _outer_splits(c, n, shards, splits, seed, repeats):
                g_p = _half_gram(sources.pop(0))
                x_p = x_q = None
                if top:
                    fit_p = _top_mds(g_p, top, start)
                    x_p, start = fit_p.coordinates(top), fit_p.vectors
                    del fit_p  # it holds g_p
                rows_p = _StashedRows(g_p, stash, block_bytes) if usable else _Rows(g_p)  # type: ignore[arg-type]
                del g_p
                g_q = _half_gram(sources.pop(0))
                if top:
                    fit_q = _top_mds(g_q, top, start)
                    x_q, start = fit_q.coordinates(top), fit_q.vectors
                    del fit_q
                    assert x_p is not None
                    fits.append(_rank_sums(g_q @ x_p, x_p))
                halves.append((rows_p, g_q, x_q, np.empty((n, top)) if top else None))
            energy, signals, partners, within, first = _summary_pass(
                halves, rows_h, noise, max_pairs, block_bytes
            )
        finally:
            if usable:
                mirror_upper(stash)  # type: ignore[arg-type]
        noise_total = float(energy.sum())
        acc = {r: 0.0 for r in ranks}
        for s, (_, _, x_q, px) in enumerate(halves):
            if not top:
                break
            norm = _heldout_norm(signals[s], noise_total)
            assert x_q is not None and px is not None
            for inner, norms in (fits[s], _rank_sums(px, x_q)):
                _add_heldout(acc, inner, norms, norm)
        heldout = {r: v / (2 * len(halves)) for r, v in acc.items()}
        return SplitHalfSummary(heldout, energy, partners, within, first)


def _rank_sums(product: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``<target, G_r>`` and ``||G_r||_F`` for the Grams ``G_r = X_r X_r^T`` of the rank-r MDS
    coordinates ``x`` (shape (n, top)), r = 1..top, from ``product = target @ x``, without
    forming any ``G_r``.

    ``<B, X X^T> = sum((B X) o X)`` (one pass over ``B`` for every rank: the columns add up) and
    ``||X X^T||_F = ||X^T X||_F`` (an r x r matrix): no n x n product per rank per fit.

    Returns
    -------
    (ndarray of shape (top,), ndarray of shape (top,))
    """
    inner = np.cumsum(np.einsum("ij,ij->j", product, x))
    small = x.T @ x
    norms = np.array([np.linalg.norm(small[:r, :r]) for r in range(1, x.shape[1] + 1)])
    return inner, norms


def _summary_pass(
    halves: Sequence[tuple[_Rows, np.ndarray, np.ndarray | None, np.ndarray | None]],
    rows_h: _Rows,
    noise: bool,
    max_pairs: int,
    block_bytes: int,
) -> tuple[np.ndarray, list[float], np.ndarray | None, int, tuple[tuple[int, int], ...]]:
    """One pass over row blocks of every half's grams: the noise energy of each row, ``<B_P,
    B_Q>``, ``B_P X_Q`` (into each half's last slot) and the pairs within sampling error, each
    entry with :func:`noise_energy_rows`'s and the whole-matrix mask's arithmetic (compiled
    from :data:`SUMMARY_COMPILED_FROM` positions on: :mod:`posdiag.geometry._summary`)."""
    n = rows_h.gram.shape[0]
    energy = np.empty(n)
    signals = [0.0] * len(halves)
    partners = np.zeros(n, dtype=np.int64) if noise else None
    within = 0
    first: list[tuple[int, int]] = []
    diffs = [rows_p.diag - np.diag(g_q) for rows_p, g_q, _, _ in halves]
    diag = rows_h.diag
    scale = 4.0 * len(halves)
    last = len(halves) - 1
    kern = _summary_kernels() if n >= SUMMARY_COMPILED_FROM else None
    spans = _row_spans(n, block_bytes)
    # Scratch blocks reused by every row block: a fresh (rows, n) array per operation cost more
    # than the arithmetic, each of its pages faulted in anew.
    size = (max(hi - lo for lo, hi in spans), n)
    acc_all, rows_all = np.empty(size), np.empty(size)
    acc_m_all = np.empty(size) if noise else None
    upper_all = np.empty(size, dtype=bool) if noise else None
    for lo, hi in spans:
        r = hi - lo
        acc, rows = acc_all[:r], rows_all[:r]
        acc_m = acc_m_all[:r] if acc_m_all is not None else np.empty((0, 0))
        for s, (rows_p, g_q, x_q, px) in enumerate(halves):
            p = rows_p.block(lo, hi, rows)
            q = g_q[lo:hi]
            signals[s] += float(np.vdot(p, q))
            if x_q is not None and px is not None:
                px[lo:hi] = p @ x_q
            if kern is not None:
                kern["differences"](p, q, diffs[s], lo, s == 0, s == last, scale, acc, acc_m, noise)
            else:
                _differences(p, q, diffs[s][lo:hi], diffs[s], s == 0, acc, acc_m, noise)
                if s == last:
                    acc /= scale
        energy[lo:hi] = acc.sum(axis=1)
        if partners is None or upper_all is None:
            continue
        upper = upper_all[:r]
        h = rows_h.block(lo, hi, rows)
        if kern is not None:
            above = np.empty(r, dtype=np.int64)
            kern["within"](acc_m, h, diag, lo, scale, upper, partners[lo:hi], above)
        else:
            acc_m /= scale
            np.sqrt(acc_m, out=acc_m)
            # The squared distances of B_H, written over the block of its rows and acc.
            np.add(diag[lo:hi, None], diag[None, :], out=acc)
            np.subtract(acc, np.multiply(h, 2.0, out=rows), out=acc)
            np.less_equal(acc, acc_m, out=upper)
            upper[np.arange(r), np.arange(lo, hi)] = False
            partners[lo:hi] = upper.sum(axis=1)
            upper &= np.arange(n)[None, :] > np.arange(lo, hi)[:, None]  # i < j
            above = np.count_nonzero(upper, axis=1)
        within += int(above.sum())
        if len(first) < max_pairs:
            # Only the rows holding the pairs still listed (np.nonzero's row-major order).
            take = max_pairs - len(first)
            upto = int(np.searchsorted(np.cumsum(above), take)) + 1
            i, j = np.nonzero(upper[:upto])
            first.extend((int(a) + lo, int(b)) for a, b in zip(i[:take], j[:take], strict=True))
    return energy, signals, partners, within, tuple(first)


def _differences(
    p: np.ndarray,
    q: np.ndarray,
    dd_rows: np.ndarray,
    dd: np.ndarray,
    first: bool,
    acc: np.ndarray,
    acc_m: np.ndarray,
    noise: bool,
) -> None:
    """One half's terms of a row block in numpy (``posdiag.geometry._summary``'s ``differences``
    without the division): ``acc (+)= (p - q)^2``; with ``noise`` ``acc_m (+)= ((dd_i + dd_j)
    - 2 (p - q))^2``, ``dd_rows`` the block's rows of ``dd``."""
    d = p - q
    if noise:
        m = (dd_rows[:, None] + dd[None, :]) - 2.0 * d
        # Squares are never -0.0, so 0.0 + m * m (the first term of a sum) is m * m.
        m *= m
        if first:
            acc_m[...] = m
        else:
            acc_m += m
    if first:
        np.multiply(d, d, out=acc)
    else:
        d *= d
        acc += d


def _summary_kernels() -> dict[str, Any]:
    from ._summary import kernels

    return kernels()
