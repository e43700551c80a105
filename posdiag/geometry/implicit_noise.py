"""What ``diagnose`` estimates at long contexts from an :class:`~.implicit.ImplicitGeometry`,
each with its standard error (docs/geometry.md, "Long contexts: the implicit path").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .implicit import (
    DEFAULT_PAIRS,
    ImplicitBC,
    ImplicitGeometry,
    _low_rank,
    bc_row_means,
    from_halves,
    from_thinning,
    gram_entries,
)

__all__ = [
    "PairsWithinNoise",
    "SHIFT_GROUPS",
    "ShiftEstimate",
    "floor_noise",
    "gram_diagonal",
    "sampled_gram",
    "shift_estimate",
    "split_entries",
    "split_noise",
]


def sampled_gram(geom: ImplicitGeometry) -> np.ndarray:
    """``B_H`` at the pairs of ``geom.pairs`` (the residual plus the low-rank part); shape (m,)."""
    return geom.residual + _low_rank(geom.spectrum, geom.pairs.rows, geom.pairs.cols)


def gram_diagonal(geom: ImplicitGeometry, sampled: np.ndarray | None = None) -> np.ndarray:
    """``B_H[i, i]``, shape (n,), exact (every ``(i, i)`` is sampled); read from ``sampled``
    (:func:`sampled_gram`) when given."""
    s = geom.pairs
    on = np.flatnonzero(s.rows == s.cols)
    diag = np.empty(geom.n)
    diag[s.rows[on]] = (
        sampled[on]
        if sampled is not None
        else geom.residual[on] + _low_rank(geom.spectrum, s.rows[on], s.cols[on])
    )
    return diag


def _squared_distances(geom: ImplicitGeometry) -> tuple[np.ndarray, np.ndarray]:
    """``B_ii + B_jj - 2 B_ij`` at the sampled pairs, and ``B_H``'s diagonal (shape (n,))."""
    s = geom.pairs
    values = sampled_gram(geom)
    diag = gram_diagonal(geom, values)  # the diagonal's low-rank part is in values already
    return diag[s.rows] + diag[s.cols] - 2.0 * values, diag


def split_entries(
    counts: sp.spmatrix,
    n: int,
    rows: np.ndarray,
    cols: np.ndarray,
    shards: Sequence[sp.spmatrix] = (),
    *,
    splits: int = 4,
    seed: int = 0,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``B_P`` and ``B_Q`` at the pairs ``(rows[k], cols[k])`` for each outer split of
    :func:`~.heldout.split_half_summary` (the same draws), each half's ``BC`` implicit and only one
    in memory at a time."""
    from .heldout import _outer_splits

    out = []
    for sources in _outer_splits(sp.csr_matrix(counts), n, shards, splits, seed, None):
        values = []
        while sources:
            kind, data = sources.pop(0)
            bc = from_halves(data) if kind == "shards" else from_thinning(data, n)
            del data
            values.append(gram_entries(bc, bc_row_means(bc), rows, cols))
            del bc
        out.append((values[0], values[1]))
    return out


@dataclass(frozen=True)
class PairsWithinNoise:
    """The pairs ``i < j`` whose distance sampling noise could explain, and the noise's share
    of the geometry, estimated from a pair sample.

    Attributes
    ----------
    within, within_se : float
        Estimated number of such pairs and its standard error.
    examples : tuple of (int, int)
        Sampled pairs within the noise, ``i < j`` in row-major order.
    energy, energy_se : float
        Cross-fit: ``sum_ij (B_P - B_Q)_ij^2 / 4`` (mean over outer splits); NaN for the
        plug-in.
    share, share_se : float
        The noise's share of the geometry (docs/geometry.md section 8) and its standard error.
    """

    within: float
    within_se: float
    examples: tuple[tuple[int, int], ...]
    energy: float
    energy_se: float
    share: float
    share_se: float


def _within(
    geom: ImplicitGeometry, hit: np.ndarray, max_pairs: int
) -> tuple[float, float, tuple[tuple[int, int], ...]]:
    s = geom.pairs
    hit = hit & (s.rows != s.cols)
    y = hit.astype(np.float64)
    # Off-diagonal weights count ordered pairs: half of them are the pairs i < j.
    count = 0.5 * s.total(y)
    se = 0.5 * math.sqrt(max(0.0, s.cov(y, y)))
    i = np.minimum(s.rows[hit], s.cols[hit])
    j = np.maximum(s.rows[hit], s.cols[hit])
    order = np.lexsort((j, i))
    seen = dict.fromkeys((int(i[k]), int(j[k])) for k in order)
    return count, se, tuple(seen)[:max_pairs]


def split_noise(
    geom: ImplicitGeometry,
    entries: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    max_pairs: int = 100,
) -> PairsWithinNoise:
    """The cross-fit's noise from ``B_P`` and ``B_Q`` at ``geom``'s sampled pairs
    (:func:`split_entries`): a pair is within its sampling error when its squared distance is
    at most the rms of ``|D^2_P - D^2_Q| / 2`` over the outer splits (as
    :func:`~.heldout.split_half_summary`); the share is the energy over ``||B_H||_F^2``."""
    s = geom.pairs
    d2, _ = _squared_distances(geom)
    on = s.rows == s.cols
    err2 = np.zeros(s.rows.size)
    energy = np.zeros(s.rows.size)
    for p, q in entries:
        dd = np.empty(geom.n)
        dd[s.rows[on]] = (p - q)[on]
        diff = p - q
        err2 += ((dd[s.rows] + dd[s.cols]) - 2.0 * diff) ** 2
        energy += diff * diff
    scale = 4.0 * len(entries)
    err2 /= scale
    energy /= scale
    count, count_se, examples = _within(geom, d2 <= np.sqrt(err2), max_pairs)
    e = s.total(energy)
    var_e = s.cov(energy, energy)
    t, var_t = geom.total, geom.total_var
    residual2 = geom.residual * geom.residual
    cov = s.cov(energy, residual2)
    share = e / t if t > 0 else math.inf
    var = (var_e - 2.0 * share * cov + share * share * var_t) / (t * t) if t > 0 else 0.0
    return PairsWithinNoise(
        count, count_se, examples, e, math.sqrt(max(0.0, var_e)), share, math.sqrt(max(0.0, var))
    )


def floor_noise(
    geom: ImplicitGeometry, floor: np.ndarray, noise_trace: float, *, max_pairs: int = 100
) -> PairsWithinNoise:
    """The plug-in's noise from the split-half floor ``f`` (n,): a pair is within it when
    ``d_H(i, j) <= sqrt(f_i^2 + f_j^2) / 2``; the share ``noise_trace / tr(B_H)`` is exact,
    ``noise_trace`` the trace ``tr(J diag(f^2 / 4) J)`` the noise adds."""
    s = geom.pairs
    d2, diag = _squared_distances(geom)
    f2 = np.asarray(floor, dtype=np.float64) ** 2
    bound = np.sqrt(f2[s.rows] + f2[s.cols]) / 2.0
    with np.errstate(invalid="ignore"):
        hit = np.sqrt(np.clip(d2, 0.0, None)) <= bound
    count, count_se, examples = _within(geom, hit, max_pairs)
    trace = float(diag.sum())
    share = noise_trace / trace if trace > 0 else math.inf
    return PairsWithinNoise(count, count_se, examples, math.nan, math.nan, share, 0.0)


@dataclass(frozen=True)
class ShiftEstimate:
    """Shift-equivariance of ``D_H`` (:func:`~.core.shift_equivariance`) and its smoothness
    from a sample of pairs at every lag.

    Attributes
    ----------
    r2, r2_se : float
        ``1 - SS_res / SS_tot`` over pairs ``i < j`` (NaN when every distance is equal) and its
        standard error (random groups of lags; 0 when every pair is in the sample).
    profile : ndarray of shape (n-1,)
        Mean distance at each lag ``1..n-1`` (of the sampled pairs at that lag).
    neighbour_mean : float
        Mean distance of ``(i, i+1)``, exact (every neighbour pair is in the sample).
    all_mean : float
        Mean distance over pairs ``i < j``.
    pairs : int
        Pairs evaluated.
    """

    r2: float
    r2_se: float
    profile: np.ndarray
    neighbour_mean: float
    all_mean: float
    pairs: int

    @property
    def smoothness(self) -> float:
        return self.neighbour_mean / self.all_mean if self.all_mean != 0.0 else math.nan


# Groups of lags (interleaved) of the R^2's random-groups standard error.
SHIFT_GROUPS = 8


def _lag_sample(n: int, per_lag: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, lags and whether each lag is enumerated (lag 1 and lags of at most ``per_lag``
    pairs), else ``per_lag`` seeded draws with replacement."""
    rng = np.random.default_rng([seed, 36])
    lags = np.arange(1, n)
    size = n - lags
    full = (size <= per_lag) | (lags == 1)
    rows = [np.arange(n - lag) for lag in lags[full]]
    lag_of = [np.full(n - lag, lag) for lag in lags[full]]
    sampled = lags[~full]
    if sampled.size:
        draws = np.floor(rng.random((sampled.size, per_lag)) * (n - sampled)[:, None])
        rows.append(draws.astype(np.int64).ravel())
        lag_of.append(np.repeat(sampled, per_lag))
    return np.concatenate(rows).astype(np.int64), np.concatenate(lag_of).astype(np.int64), full


def shift_estimate(
    geom: ImplicitGeometry, bc: ImplicitBC, *, pairs: int = DEFAULT_PAIRS, seed: int = 0
) -> ShiftEstimate:
    """:class:`ShiftEstimate` of ``B_H`` from about ``pairs`` pairs over every lag (at least 2
    a lag); exact when ``pairs`` covers them."""
    n = geom.n
    per_lag = max(2, pairs // n)
    rows, lag, full = _lag_sample(n, per_lag, seed)
    b = gram_entries(bc, geom.means, rows, rows + lag)
    diag = gram_diagonal(geom)
    d = np.sqrt(np.clip(diag[rows] + diag[rows + lag] - 2.0 * b, 0.0, None))
    k = lag - 1
    cnt = np.bincount(k, minlength=n - 1).astype(np.float64)
    mean = np.bincount(k, weights=d, minlength=n - 1) / cnt
    sq = np.bincount(k, weights=d * d, minlength=n - 1) / cnt
    dev = np.bincount(k, weights=(d - mean[k]) ** 2, minlength=n - 1)
    size = (n - np.arange(1, n)).astype(np.float64)
    # A sampled lag's residual sum: N_l times its unbiased variance (draws with replacement).
    res = np.where(full, dev, size * dev / np.maximum(cnt - 1.0, 1.0))

    def r2_of(sel: np.ndarray, scale: float) -> float:
        w = np.where(full, 1.0, scale * sel)
        s1, s2 = float(np.sum(w * size * mean)), float(np.sum(w * size * sq))
        tot = s2 - s1 * s1 / float(size.sum())
        if tot <= 1e-24 * max(1.0, s2):
            return math.nan
        return 1.0 - float(np.sum(w * res)) / tot

    r2 = r2_of(np.ones(n - 1, dtype=bool), 1.0)
    se = 0.0
    if not np.all(full) and not math.isnan(r2):
        group = np.arange(n - 1) % SHIFT_GROUPS
        reps = np.array([r2_of(group == g, SHIFT_GROUPS) for g in range(SHIFT_GROUPS)])
        se = float(np.std(reps, ddof=1) / math.sqrt(SHIFT_GROUPS))
    all_mean = float(np.sum(size * mean) / size.sum())
    return ShiftEstimate(r2, se, mean, float(mean[0]), all_mean, int(rows.size))
