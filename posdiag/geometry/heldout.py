"""Held-out checks of the cross-fit: two geometries from disjoint halves ``P``, ``Q`` of the data.

``mds-r`` fitted on ``P`` is scored against ``Q`` (the held-out stress), and ``(B_P - B_Q)^2 / 4``
bounds the full estimate's squared sampling error per entry (the noise energy).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import scipy.sparse as sp

from .._util.threads import small_blas
from .._util.validate import check_int
from ..errors import PosdiagError
from ._compiled import COMPILED_FROM
from ._square import mirror_upper
from ._thinning import draw_half
from .core import MDS, _fix_signs, mds_from_gram
from .crossfit import (
    DEFAULT_SPLITS,
    Matrix,
    check_thinnable,
    crossfit_bc,
    expected_thinning_bc,
    first_rows,
    gram_from_bc,
    shard_halves,
)
from .spectral import PARTIAL_FROM, top_pairs

__all__ = [
    "SplitHalf",
    "SplitHalfSummary",
    "heldout_pair",
    "noise_energy_rows",
    "outer_splits",
    "split_half_summary",
]


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


# Outer splits of the split-half grams (outer_splits): more where they are cheap and halve the
# split noise, one at long contexts (docs/geometry.md, "mds-r is scored held-out").
FOUR_OUTER_SPLITS_BELOW = 512
ONE_OUTER_SPLIT_ABOVE = 2048


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
    """Per outer split, the sources of ``B_P`` and ``B_Q`` (:func:`_half_gram`) as a list the caller
    pops from. ``repeats`` defaults to :func:`outer_splits`; each half gets ``max(2, splits // 2)``
    inner splits; with ``>= 4`` shards the halves are halves of the shards, else a thinning, each
    half then cross-fitted by its exact average over every inner thinning."""
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
            # Thinning: one random split (held out means independent), each half cross-fitted
            # by its exact average over every inner thinning.
            check_thinnable(c, n)
            sources = [("thinning", h) for h in draw_half(first_rows(c, n), rng)]
        yield sources


def _half_gram(source: _HalfSource) -> np.ndarray:
    """The cross-fitted ``B_H`` of one half of the data; shape (n, n)."""
    kind, data = source
    # Float32 dense blocks: the held-out scores and noise bounds move by < 1e-6 (tested).
    if kind == "shards":
        return gram_from_bc(crossfit_bc(data, dtype=np.float32), overwrite=True)
    return gram_from_bc(expected_thinning_bc(data, dtype=np.float32), overwrite=True)


def heldout_pair(
    g_p: np.ndarray, x_p: np.ndarray, g_q: np.ndarray, x_q: np.ndarray, ranks: Sequence[int]
) -> dict[int, float]:
    """The held-out stress of one outer split whose fits are already made (the bootstrap's
    complementary replicates).

    Parameters
    ----------
    g_p, g_q : ndarray of shape (n, n)
        Cross-fitted ``B_P`` and ``B_Q`` of two disjoint halves of the data.
    x_p, x_q : ndarray of shape (n, top)
        Their MDS coordinates, ``top >= max(ranks)``.
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
    """Outer splits the held-out ``mds-r`` averages by default at ``n`` positions: 4 below
    :data:`FOUR_OUTER_SPLITS_BELOW`, 2 up to :data:`ONE_OUTER_SPLIT_ABOVE`, 1 above it."""
    if n < FOUR_OUTER_SPLITS_BELOW:
        return 4
    return 1 if n > ONE_OUTER_SPLIT_ABOVE else 2


def _heldout_norm(signal: float, noise: float) -> float:
    """``sqrt(<B_P, B_Q> + e)``, standing in for ``||B_H||`` in the held-out stress; 0 when
    ``signal`` is not positive (noise swamps all signal)."""
    return float(np.sqrt(signal + noise)) if signal > 0 else 0.0


def _add_split(
    acc: dict[int, float],
    g_p: np.ndarray,
    x_p: np.ndarray,
    g_q: np.ndarray,
    x_q: np.ndarray,
    norm: float,
) -> None:
    """Add both directions of one outer split to ``acc``: the fits on ``P`` (coordinates
    ``x_p``, (n, top)) scored against ``B_Q``, and those on ``Q`` against ``B_P``."""
    _add_heldout(acc, *_rank_sums(g_q @ x_p, x_p), norm)
    _add_heldout(acc, *_rank_sums(g_p @ x_q, x_q), norm)


def _add_heldout(acc: dict[int, float], inner: np.ndarray, norms: np.ndarray, norm: float) -> None:
    """Add each rank's scale-fitted stress ``sqrt(1 - cos^2)`` (:func:`~.core.stress`) with
    ``norm`` standing in for ``||target||``; ``inner``, ``norms`` by rank (index ``r - 1``)."""
    for r in acc:
        ng = float(norms[r - 1])
        if norm == 0.0 or ng == 0.0:
            acc[r] += 1.0
            continue
        cos = min(1.0, max(0.0, float(inner[r - 1])) / (norm * ng))
        acc[r] += float(np.sqrt(1.0 - cos * cos))


# Block of the held-out fits' Lanczos (3 pairs; benchmarks/NOTES.md).
HELDOUT_BLOCK = 8
# Residual of the held-out fits relative to ||B||_F: a vector error e moves a score by ~e^2.
HELDOUT_TOL = 1e-8


def _top_mds(
    gram: np.ndarray, k: int, start: np.ndarray | None = None, partial_from: int = PARTIAL_FROM
) -> MDS:
    """The MDS of ``gram`` as far as rank ``k`` needs: every pair below ``partial_from``
    positions, else the top ``k`` by block Lanczos (warm-started from ``start`` (n, m))."""
    n = gram.shape[0]
    if n < partial_from:
        return mds_from_gram(gram)
    spec = top_pairs(gram, min(k, n - 1), tol=HELDOUT_TOL, start=start, block=HELDOUT_BLOCK)
    return MDS(
        eigenvalues=spec.eigenvalues, vectors=_fix_signs(spec.vectors), gram=gram, total=spec.total
    )


def noise_energy_rows(halves: SplitHalf, block_bytes: int = 64 << 20) -> np.ndarray:
    """Row sums of the noise energy, of shape (n,), without its ``n x n`` array.

    Row blocks of ``block_bytes`` (:func:`_summary_pass`); each row's sum is bit for bit the
    whole array's.
    """
    split: list[_Half] = [(_Rows(g_p), g_q, None, None) for g_p, g_q in halves.grams]
    return _summary_pass(split, split[0][0], False, 0, block_bytes)[0]


# Rows per block of split_half_summary's pass: a few (rows, n) float64 arrays of this size.
SUMMARY_BLOCK_BYTES = 32 << 20


@dataclass(frozen=True)
class SplitHalfSummary:
    """What a report takes from the split-half grams (:func:`split_half_summary`), without them.

    Attributes
    ----------
    heldout : mapping of int to float
        Held-out stress of ``mds-r`` for each rank asked for.
    energy_rows : ndarray of shape (n,)
        :func:`noise_energy_rows` of the grams.
    partners : ndarray of shape (n,), int64, or None
        Per position, how many others are within their own sampling error of it; None when
        not asked for.
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
        """Rows ``lo..hi-1`` (hi - lo, n): a view of the gram, or written into ``out``."""
        return self.gram[lo:hi]


# Columns per strip of a transposed copy: 64 columns at a time stay in cache.
_STRIP = 64


def _copy_transposed(out: np.ndarray, src: np.ndarray) -> None:
    """``out[...] = src.T`` by strips of :data:`_STRIP` columns of ``out`` (copies only)."""
    for c0 in range(0, out.shape[1], _STRIP):
        out[:, c0 : c0 + _STRIP] = src[c0 : c0 + _STRIP].T


class _StashedRows(_Rows):
    """Row blocks of a symmetric gram ``G`` whose strict lower triangle was copied into the
    strict lower triangle of a symmetric ``buf`` (restored by :func:`mirror_upper`), its
    diagonal kept apart. Blocks are copies, so they equal ``G``'s rows bit for bit."""

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
    """Row blocks of a symmetric matrix read from its upper triangle and diagonal only."""

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
    """The held-out stress, :func:`noise_energy_rows` and the pairs within their sampling error of
    the split-half grams, each half's gram made, used and freed (with one outer split and ``stash``,
    ``B_P``'s lower triangle waits in ``stash`` while ``B_Q`` is made). Equal to the whole-matrix
    computations bit for bit, but for the held-out stresses' summation order.

    Parameters
    ----------
    counts, n, shards, splits, seed, repeats
        The counts (n_positions, vocab_size), ``n`` positions analysed and the outer splits
        (:func:`_outer_splits`).
    gram : ndarray of shape (n, n)
        The full-data ``B_H``.
    ranks : sequence of int, each in [1, n-1]
        Held-out ``mds-r`` stresses wanted.
    noise : bool
        Also find the pairs within their sampling error.
    stash : ndarray of shape (n, n), float64, C-contiguous, writeable, exactly symmetric, optional
        Scratch for the first half's gram (``gram`` itself or ``D_H``; restored on return).
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
    rows_h = _UpperRows(gram) if stash is gram else _Rows(gram)
    usable = _usable_stash(stash, n) and repeats == 1
    with small_blas(n):
        halves: list[_Half] = []
        fits: list[tuple[np.ndarray, np.ndarray]] = []  # (<B_Q, G_P>, ||G_P||) by rank, per split
        try:
            start: np.ndarray | None = None
            for sources in _outer_splits(c, n, shards, splits, seed, repeats):
                g_p = _half_gram(sources.pop(0))
                x_p = None
                if top:
                    x_p, start = _fit(g_p, top, start)
                rows_p = _StashedRows(g_p, stash, block_bytes) if usable else _Rows(g_p)  # type: ignore[arg-type]
                del g_p
                g_q = _half_gram(sources.pop(0))
                x_q = None
                if top:
                    x_q, start = _fit(g_q, top, start)
                    assert x_p is not None
                    fits.append(_rank_sums(g_q @ x_p, x_p))
                halves.append((rows_p, g_q, x_q, np.empty((n, top)) if top else None))
            energy, signals, partners, within, first = _summary_pass(
                halves, rows_h, noise, max_pairs, block_bytes
            )
        finally:
            if usable:
                mirror_upper(stash)  # type: ignore[arg-type]
        heldout = _heldout_of(halves, fits, signals, float(energy.sum()), ranks)
        return SplitHalfSummary(heldout, energy, partners, within, first)


# One half's rows, the other half's gram, its fitted coordinates and the product P X_Q.
_Half: TypeAlias = tuple["_Rows", np.ndarray, np.ndarray | None, np.ndarray | None]


def _usable_stash(stash: np.ndarray | None, n: int) -> bool:
    """Whether ``stash`` can hold a half's strict lower triangle (and be restored)."""
    return (
        stash is not None
        and stash.shape == (n, n)
        and stash.dtype == np.float64
        and stash.flags.c_contiguous
        and stash.flags.writeable
    )


def _fit(gram: np.ndarray, top: int, start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The rank-``top`` MDS coordinates of ``gram`` and its eigenvectors (the next start)."""
    fit = _top_mds(gram, top, start)
    return fit.coordinates(top), fit.vectors


def _heldout_of(
    halves: Sequence[_Half],
    fits: Sequence[tuple[np.ndarray, np.ndarray]],
    signals: Sequence[float],
    noise_total: float,
    ranks: Sequence[int],
) -> dict[int, float]:
    """The held-out stress of each rank, both directions of every outer split averaged."""
    acc = {r: 0.0 for r in ranks}
    if not acc:
        return acc
    for s, (_, _, x_q, px) in enumerate(halves):
        norm = _heldout_norm(signals[s], noise_total)
        assert x_q is not None and px is not None
        for inner, norms in (fits[s], _rank_sums(px, x_q)):
            _add_heldout(acc, inner, norms, norm)
    return {r: v / (2 * len(halves)) for r, v in acc.items()}


def _rank_sums(product: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``<target, G_r>`` and ``||G_r||_F`` for ``G_r = X_r X_r^T``, r = 1..top, from ``product =
    target @ x`` (x: (n, top)), without forming any ``G_r``; two arrays of shape (top,).

    ``<B, X X^T> = sum((B X) o X)`` and ``||X X^T||_F = ||X^T X||_F``.
    """
    inner = np.cumsum(np.einsum("ij,ij->j", product, x))
    small = x.T @ x
    norms = np.array([np.linalg.norm(small[:r, :r]) for r in range(1, x.shape[1] + 1)])
    return inner, norms


def _summary_pass(
    halves: Sequence[_Half],
    rows_h: _Rows,
    noise: bool,
    max_pairs: int,
    block_bytes: int,
) -> tuple[np.ndarray, list[float], np.ndarray | None, int, tuple[tuple[int, int], ...]]:
    """One pass over row blocks of every half's grams: each row's noise energy, ``<B_P, B_Q>``,
    ``B_P X_Q`` (into each half's last slot) and the pairs within sampling error (compiled from
    :data:`~._compiled.COMPILED_FROM` positions on: :mod:`._summary`)."""
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
    kern = _summary_kernels() if n >= COMPILED_FROM else None
    spans = _row_spans(n, block_bytes)
    # Scratch blocks reused by every row block: fresh pages cost more than the arithmetic.
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
            np.add(diag[lo:hi, None], diag[None, :], out=acc)
            np.subtract(acc, np.multiply(h, 2.0, out=rows), out=acc)
            np.less_equal(acc, acc_m, out=upper)
            upper[np.arange(r), np.arange(lo, hi)] = False
            partners[lo:hi] = upper.sum(axis=1)
            upper &= np.arange(n)[None, :] > np.arange(lo, hi)[:, None]  # i < j
            above = np.count_nonzero(upper, axis=1)
        within += int(above.sum())
        if len(first) < max_pairs:
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
    """One half's terms of a row block (``_summary``'s ``differences`` without the division):
    ``acc (+)= (p - q)^2``; with ``noise`` ``acc_m (+)= ((dd_i + dd_j) - 2 (p - q))^2``."""
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
