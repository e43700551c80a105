"""Bootstrap intervals of the scores and the positions too thinly supported to trust
(docs/theory.md): the uncertainty part of the stress report and the diagnosis.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..counts.core import Counts
from ..encodings import Encoding
from ..geometry import estimator as estimator_module
from ..geometry.core import MDS
from ..uncertainty.bootstrap import (
    StressIntervals,
    bootstrap_stress,
    noise_floor,
    noise_floor_by_shards,
    pair_floor,
    why_no_intervals,
)
from .analysis import MAX_PAIRS_LISTED, CorpusGeometry, CorpusSummary, Progress
from .options import Analysis
from .padding import ranges
from .scores import EncodingScore

__all__ = [
    "Uncertainty",
    "interval_scores",
    "position_floor",
    "position_noise_share",
    "unstable_warnings",
]

# A position whose own noise share (docs/theory.md) reaches this is flagged unstable.
UNSTABLE_SHARE = 0.5


@dataclass(frozen=True)
class Uncertainty:
    """How the intervals were made, and which positions are too thinly supported to trust.

    Attributes
    ----------
    level : float
    shards, replicates, seed : int
        Shards re-weighted (0: no intervals), bootstrap replicates used, seed.
    stress_by_rank : tuple of (float, float)
        Interval of the rank-r MDS stress, r = 1..n_eff-1 (empty without shards).
    noise_floor : tuple of float
        Split-half ``d_H`` of each position 0..n_eff-1 (empty for a cross-fit without details).
    unstable : tuple of int
        Positions within the noise floor of at least half of the others, or mostly noise.
    note : str
        Why there are no intervals, when there are none.
    bias : tuple of float
        Mean replicate stress minus the estimate, per encoding of the report.
    method, heldout_pairs, heldout_splits, design
        As :class:`posdiag.uncertainty.bootstrap.StressIntervals` ("" and 0 without intervals).
    """

    level: float
    shards: int
    replicates: int
    seed: int
    stress_by_rank: tuple[tuple[float, float], ...]
    noise_floor: tuple[float, ...]
    unstable: tuple[int, ...]
    note: str = ""
    bias: tuple[float, ...] = ()
    method: str = ""
    heldout_pairs: int = 0
    heldout_splits: int = 0
    design: str = ""

    def describe(self) -> str:
        """``95% shard bootstrap (20 shards, 200 replicates, seed 0)`` and what else shaped the
        intervals."""
        how = ", t interval from their sd" if self.method == "t" else ""
        kind = " balanced" if self.design == "balanced" else ""
        splits = (
            f"mean of {self.heldout_splits} outer splits"
            if self.heldout_splits > 1
            else "1 outer split"
        )
        if self.heldout_pairs:
            pairs = (
                f"; held-out mds-r: {splits}, spread also from {self.heldout_pairs} replicate pairs"
            )
        elif self.heldout_splits:
            # Rare (most replicates skipped), but the interval is then too narrow: say so.
            pairs = (
                f"; held-out mds-r: {splits}, spread from "
                "in-sample replicates only (fewer than 2 replicate pairs kept: too narrow)"
            )
        else:
            pairs = ""
        return (
            f"{self.level:.0%} shard bootstrap ({self.shards} shards, {self.replicates}{kind} "
            f"replicates{how}, seed {self.seed}{pairs})"
        )


# Rows per block of the noise shares (no n x n temporary).
NOISE_BLOCK_BYTES = 64 << 20


def _row_blocks(n: int) -> list[slice]:
    rows = max(1, NOISE_BLOCK_BYTES // (8 * n))
    return [slice(lo, min(n, lo + rows)) for lo in range(0, n, rows)]


def _noise_pairs(
    geo: CorpusGeometry, floor: np.ndarray
) -> tuple[np.ndarray, int, tuple[tuple[int, int], ...]]:
    """The pairs whose distance sampling noise could explain: the partners of each position
    (n,), the count of pairs ``i < j`` and the first :data:`MAX_PAIRS_LISTED` of them."""
    summary = geo.split_half_summary(noise=True)
    if summary is not None and summary.partners is not None:
        return summary.partners, summary.within, summary.first_pairs
    n = geo.n_eff
    mask = geo.distances <= pair_floor(floor)
    np.fill_diagonal(mask, False)
    upper = np.triu(mask, k=1)
    first = np.flatnonzero(upper.ravel())[:MAX_PAIRS_LISTED]
    pairs = tuple((int(k // n), int(k % n)) for k in first)
    return mask.sum(axis=1), int(np.count_nonzero(upper)), pairs


def position_floor(counts: Counts, n: int, seed: int) -> np.ndarray:
    """The split-half noise floor of positions ``0..n-1`` (n,): by halves of the shards when
    there are any, else by each position's tokens."""
    if len(counts.shards) >= 2:
        return noise_floor_by_shards(counts.shards, n, seed=seed)
    return noise_floor(counts.matrix[:n], seed=seed)


def _noise_gram_diagonal(floor: np.ndarray) -> np.ndarray:
    """The diagonal (n,) of ``J diag(e) J``, ``e_i = floor_i^2 / 4``: what sampling noise adds
    to ``B_H`` (docs/theory.md, "Noise share"), without the ``n x n`` matrix."""
    e = np.nan_to_num(np.asarray(floor, dtype=np.float64)) ** 2 / 4.0
    n = e.size
    return np.asarray(e * (1.0 - 2.0 / n) + e.sum() / (n * n))


def position_noise_share(diag: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Share of each position's squared distance to the centroid (``diag``: ``B_H[i, i]``, shape
    (n,)) due to noise."""
    noise = _noise_gram_diagonal(floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(diag > 0, noise / diag, np.inf)


def _noise_shares(geo: CorpusGeometry, floor: np.ndarray) -> tuple[float, np.ndarray]:
    """Share of the geometry due to sampling noise, in total and per position (n,): plug-in,
    the bias ``J diag(e) J`` over ``tr(B_H)`` and each ``B_H[i, i]``; cross-fit, the split-half
    error bound over ``||B_H||_F^2`` and each row's squared norm."""
    gram = geo.mds.gram
    summary = geo.split_half_summary()
    if summary is None:
        share = float(np.sum(_noise_gram_diagonal(floor)) / np.trace(gram))
        return share, position_noise_share(np.diag(gram), floor)
    energy = summary.energy_rows
    rows = np.concatenate([np.sum(gram[b] * gram[b], axis=1) for b in _row_blocks(len(gram))])
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(rows > 0, energy / rows, np.inf)
    return float(energy.sum() / rows.sum()), per


def _unstable(partners: np.ndarray, share: np.ndarray) -> tuple[int, ...]:
    """Positions within the floor of at least half of the others (``partners`` (n,)), or
    mostly noise themselves (``share`` (n,))."""
    n = partners.shape[0]
    bad = (partners * 2 >= n - 1) | (share >= UNSTABLE_SHARE)
    return tuple(int(i) for i in np.flatnonzero(bad))


def interval_scores(
    counts: Counts,
    n_eff: int,
    scored: Sequence[tuple[EncodingScore, Encoding]],
    analysis: Analysis,
    progress: Progress = None,
    *,
    full_eigenvalues: np.ndarray | None = None,
    full_mds: MDS | None = None,
) -> tuple[list[EncodingScore], StressIntervals]:
    """Each score of ``scored`` (score, encoding) with its shard-bootstrap interval, and the
    intervals (:func:`~posdiag.uncertainty.bootstrap.bootstrap_stress`); ``counts`` need at
    least 2 shards."""
    iv = bootstrap_stress(
        counts,
        n_eff,
        [e for _, e in scored],
        [s.stress for s, _ in scored],
        level=analysis.coverage,
        replicates=analysis.replicates,
        seed=analysis.seed,
        progress=progress,
        estimator=analysis.estimator,
        full_eigenvalues=full_eigenvalues,
        full_mds=full_mds,
        distances=False,
        heldout_splits=(
            estimator_module.outer_splits(n_eff)
            if any(not math.isnan(s.in_sample) for s, _ in scored)
            else 0
        ),
    )
    scores = [
        dataclasses.replace(s, ci_low=lo, ci_high=hi)
        for (s, _), (lo, hi) in zip(scored, iv.encodings, strict=True)
    ]
    return scores, iv


def _with_intervals(
    geometry: CorpusGeometry,
    counts: Counts,
    scored: list[tuple[EncodingScore, Encoding]],
    analysis: Analysis,
    progress: Progress = None,
    *,
    details: bool = True,
) -> tuple[list[EncodingScore], Uncertainty]:
    n, seed = geometry.n_eff, analysis.seed
    # A cross-fit's unstable positions come from the split-half grams: no floor without details.
    floor = None
    if details or geometry.estimator != "crossfit":
        floor = position_floor(counts, n, seed)
    probe = np.full(n, np.nan) if floor is None else floor
    unstable = _unstable(_noise_pairs(geometry, probe)[0], _noise_shares(geometry, probe)[1])
    floors = () if floor is None else tuple(float(x) for x in floor)
    why = why_no_intervals(counts)
    if why:
        note = f"no intervals: {why}"
        unc = Uncertainty(analysis.coverage, 0, 0, seed, (), floors, unstable, note)
        return [s for s, _ in scored], unc
    scores, iv = interval_scores(
        counts,
        n,
        scored,
        analysis,
        progress,
        full_eigenvalues=geometry.mds.eigenvalues if geometry.mds.total is None else None,
        full_mds=geometry.mds,
    )
    unc = Uncertainty(
        iv.level,
        iv.shards,
        iv.replicates,
        seed,
        iv.stress_by_rank,
        floors,
        unstable,
        # A replicate refits mds-r in-sample: its bias is against the in-sample figure.
        bias=tuple(
            b + s.stress - s.in_sample if not math.isnan(s.in_sample) else b
            for b, s in zip(iv.bias, scores, strict=True)
        ),
        method=iv.method,
        heldout_pairs=iv.heldout_pairs,
        heldout_splits=iv.heldout_splits,
        design=iv.design,
    )
    return scores, unc


def unstable_warnings(unc: Uncertainty, summary: CorpusSummary) -> list[str]:
    """The one warning every output gives for unstable positions: which, their support, and
    that only more data narrows their noise."""
    if not unc.unstable:
        return []
    shown = sorted(unc.unstable)
    held = np.asarray(summary.unit_supports)[shown]
    lo, hi = int(held.min()), int(held.max())
    support = f"{lo:,}" + (f"-{hi:,}" if hi > lo else "")
    meaning = "the intervals include this noise, and " if unc.replicates else ""
    return [
        f"{len(shown):,} of {summary.n_eff:,} positions are unstable (mostly sampling noise): "
        f"{ranges(shown)} (support {support}); {meaning}only more data reaching these "
        "positions narrows it"
    ]
