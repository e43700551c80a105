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
from ..geometry.core import (
    MDS,
)
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
from .padding import _ranges as position_ranges
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
        Coverage of every interval (NaN-bounded scores when ``shards == 0``).
    shards, replicates, seed : int
        Shards re-weighted (0: no intervals), bootstrap replicates used, seed.
    stress_by_rank : tuple of (float, float)
        Interval of the rank-r MDS stress, r = 1..n_eff-1 (empty without shards).
    noise_floor : tuple of float
        Split-half ``d_H`` of each position 0..n_eff-1 (empty when a cross-fit report was asked
        for without details, ``stress_report(details=False)``: its unstable positions come from
        the split-half grams, and only ``--verbose`` and the JSON show the floor).
    unstable : tuple of int
        Positions too thinly supported for a stable estimate: within the noise floor of at least
        half of the other positions, or with at least half of their squared distance to the
        centroid due to sampling noise.
    note : str
        Why there are no intervals, when there are none.
    method : str
        How the intervals were read from the replicates: ``"percentile"`` (from 100
        replicates) or ``"t"`` (a Student t interval from their sd, fewer replicates: the
        default from 128 positions); empty without intervals.
    heldout_pairs : int
        Complementary replicate pairs whose held-out ``mds-r`` figures also widened the held-out
        ``mds-r`` intervals, by the spread the figure owes to its random outer split (0: no
        held-out ``mds-r``; :func:`posdiag.uncertainty.bootstrap.bootstrap_stress`, Notes).
    heldout_splits : int
        Outer splits each held-out ``mds-r`` headline averages
        (:func:`posdiag.geometry.estimator.outer_splits`); 0 without a held-out ``mds-r``. With
        ``heldout_pairs`` 0 its intervals are the in-sample replicates' only, too narrow.
    design : str
        How the half-samples were drawn: ``"balanced"`` (rows of a Hadamard matrix and their
        complements) or ``"random"`` (:func:`posdiag.uncertainty.bootstrap.replicate_halves`); empty
        without intervals.
    bias : tuple of float
        Bootstrap bias of each encoding's stress (mean replicate minus estimate), in the order of
        the report's encodings; positive values mean sampling noise inflates that stress.
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
        """``95% shard bootstrap (20 shards, 200 replicates, seed 0)``, naming a balanced design,
        a t interval, the outer splits of the held-out ``mds-r`` and the pairs that widened
        their intervals."""
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


# Rows per block of the noise shares: each block holds a few (rows, n) float64 arrays, so they
# need no n x n temporary (2.1 GB each at n = 16,384).
NOISE_BLOCK_BYTES = 64 << 20


def _row_blocks(n: int) -> list[slice]:
    rows = max(1, NOISE_BLOCK_BYTES // (8 * n))
    return [slice(lo, min(n, lo + rows)) for lo in range(0, n, rows)]


def _noise_pairs(
    geo: CorpusGeometry, floor: np.ndarray
) -> tuple[np.ndarray, int, tuple[tuple[int, int], ...]]:
    """The pairs ``i != j`` whose distance sampling noise could explain: the partners of each
    position (shape (n,)), the pairs ``i < j``, and the first :data:`MAX_PAIRS_LISTED` of them
    in row-major order.

    Cross-fit: the squared distance within its own sampling error, bounded from two
    independent halves of the data (:func:`posdiag.geometry.estimator.split_half_summary`, the
    one place it is computed). Plug-in: ``d_H(i, j)`` at or below the pair floor (two
    estimates of one distribution sit that far apart).
    """
    summary = geo.split_half_summary(noise=True)
    if summary is not None and summary.partners is not None:
        return summary.partners, summary.within, summary.first_pairs
    n = geo.n_eff
    mask = geo.distances <= pair_floor(floor)
    np.fill_diagonal(mask, False)
    # Only the listed pairs become Python tuples (at n = 4,096 a noisy geometry has millions).
    upper = np.triu(mask, k=1)
    first = np.flatnonzero(upper.ravel())[:MAX_PAIRS_LISTED]
    pairs = tuple((int(k // n), int(k % n)) for k in first)
    return mask.sum(axis=1), int(np.count_nonzero(upper)), pairs


def position_floor(counts: Counts, n: int, seed: int) -> np.ndarray:
    """The split-half noise floor of positions ``0..n-1`` (shape (n,)): by halves of the shards
    when there are any, so copies of a sequence stay on one side, else by each position's
    tokens."""
    if len(counts.shards) >= 2:
        return noise_floor_by_shards(counts.shards, n, seed=seed)
    return noise_floor(counts.matrix[:n], seed=seed)


def _noise_gram_diagonal(floor: np.ndarray) -> np.ndarray:
    """The diagonal of ``J diag(e) J`` with ``e_i = floor_i^2 / 4``: what sampling noise adds to
    ``B_H`` (its trace is the sum of this), without the ``n x n`` matrix.

    Noise adds about ``e_i + e_j`` to every squared distance (docs/theory.md, "Noise share");
    ``(J diag(e) J)_ii = e_i (1 - 2/n) + sum(e) / n^2``.
    """
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
    """Share of the geometry due to sampling noise: in total and per position.

    Plug-in: the bias ``J diag(e) J`` noise adds, as a share of ``tr(B_H)`` and of each
    ``B_H[i, i]``. Cross-fit: that bias is gone; what is left is the sampling error of each
    entry, bounded from two independent halves of the data
    (:func:`posdiag.geometry.heldout.noise_energy_rows`), as a share of ``||B_H||_F^2`` and
    of each row's squared norm (the quantities stress is made of).
    """
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
    """Positions within the floor of at least half of the others, or mostly noise themselves.

    ``partners`` (n,): for each position, the others within its floor (:func:`_noise_pairs`).
    """
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
    """Each score with its shard-bootstrap interval (``ci_low``/``ci_high``), and the intervals.

    ``scored`` pairs each score with the encoding it was computed from, on positions
    ``0..n_eff-1``; ``counts`` need at least 2 shards. ``analysis`` and ``full_eigenvalues``
    are those of the geometry scored (see
    :func:`~posdiag.uncertainty.bootstrap.bootstrap_stress`). Held-out ``mds-r`` scores (those with
    an ``in_sample`` figure) get the spread of their outer splits as well.
    """
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
    # A cross-fit's unstable positions come from the split-half grams; without details the
    # per-position floor would only fill the JSON's noise_floor (not asked for), at the cost of
    # a draw per position.
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
        # Only a complete spectrum (a partial one holds the top eigenvalues only); the MDS
        # itself carries exact tails either way.
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
        # A replicate refits mds-r in-sample, so its bias is measured from the in-sample figure
        # (the headline of a held-out mds-r is a different quantity).
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
    """The warning the terminal, the HTML and the JSON all give for unstable positions: which,
    their support, and what it means for the figures: the intervals (where there are any)
    carry the noise, and only more data narrows it. A larger ``--min-count`` is no cure:
    instability is relative to the positions analysed (docs/theory.md)."""
    if not unc.unstable:
        return []
    shown = sorted(unc.unstable)
    # What --min-count counts (sampling units): copies of a sequence do not narrow the noise.
    held = np.asarray(summary.unit_supports)[shown]
    lo, hi = int(held.min()), int(held.max())
    support = f"{lo:,}" + (f"-{hi:,}" if hi > lo else "")
    meaning = "the intervals include this noise, and " if unc.replicates else ""
    return [
        f"{len(shown):,} of {summary.n_eff:,} positions are unstable (mostly sampling noise): "
        f"{position_ranges(shown)} (support {support}); {meaning}only more data reaching these "
        "positions narrows it"
    ]
