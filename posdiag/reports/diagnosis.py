"""``posdiag diagnose``: the theory's checks on one corpus (docs/geometry.md section 8,
docs/theory.md): information, noise, shift-equivariance, rank and a recommendation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._util.validate import check_float, check_int
from ..counts.core import Counts
from ..encodings import DEFAULT_DIM
from ..encodings.families import family as family_of
from ..encodings.families import is_relative
from ..geometry.core import (
    parameter_saving,
    positional_information,
    reached_rank,
    shift_equivariance,
    smoothness,
)
from ..uncertainty.bootstrap import information_null
from .analysis import (
    DEFAULT_ANALYSIS,
    CorpusGeometry,
    CorpusSummary,
    Progress,
    Spectrum,
    analysed_geometry,
    spectrum,
)
from .intervals import (
    Uncertainty,
    _noise_pairs,
    _noise_shares,
    _unstable,
    _with_intervals,
    unstable_warnings,
)
from .options import Analysis
from .scores import EncodingRequest, EncodingScore, _scored

__all__ = [
    "DEFAULT_TARGET_STRESS",
    "Diagnosis",
    "InformationDiagnosis",
    "NoiseDiagnosis",
    "RankDiagnosis",
    "Recommendation",
    "ShiftDiagnosis",
    "diagnose",
    "noise_share_text",
    "saving_phrase",
    "shift_diagnosis",
]

DIAGNOSE_TOLERANCES = (0.2, 0.1, 0.05, 0.01)
DEFAULT_TARGET_STRESS = 0.1
INFORMATION_Z = 3.0  # z above the independence null from which information is real
SHIFT_R2 = 0.9  # shift-equivariance R^2 from which relative encodings are recommended
# The pairs within the noise and the noise share from which noise is said to dominate.
NOISY_FRACTION = 0.5
NOISY_SHARE = 0.25


@dataclass(frozen=True)
class InformationDiagnosis:
    """Positional information ``I(position; token)`` against its noise level, in bits.

    ``per_position[i]`` is ``KL(mu_i || mu_bar)`` and ``per_position_null[i]`` its mean under
    independence; ``z = (bits - null_mean) / null_sd``.
    """

    bits: float
    null_mean: float
    null_sd: float
    excess: float
    z: float
    significant: bool
    per_position: tuple[float, ...]
    per_position_null: tuple[float, ...]
    reading: str


@dataclass(frozen=True)
class NoiseDiagnosis:
    """Split-half noise floor per position and the pairs it makes indistinguishable.

    ``pairs``: at most :data:`MAX_PAIRS_LISTED` pairs ``(i, j)``, ``i < j``, of the
    ``n_indistinguishable``; ``per_position[i]``: the partners of ``i``. ``noise_share`` and
    ``position_share[i]``: the share of the geometry (and of position ``i``'s part) sampling
    noise makes up (:func:`posdiag.reports.intervals._noise_shares`, docs/theory.md).
    """

    floor: tuple[float, ...]
    supports: tuple[int, ...]
    n_pairs: int
    n_indistinguishable: int
    fraction: float
    pairs: tuple[tuple[int, int], ...]
    per_position: tuple[int, ...]
    unstable: tuple[int, ...]
    noise_share: float
    position_share: tuple[float, ...]
    reading: str
    estimator: str = "plugin"


@dataclass(frozen=True)
class ShiftDiagnosis:
    """Shift-equivariance ``R^2`` and smoothness of ``D_H`` (NaN when undefined)."""

    r2: float
    profile: tuple[float, ...]
    smoothness: float
    neighbour_mean: float
    all_mean: float
    reading: str


@dataclass(frozen=True)
class RankDiagnosis:
    """The spectrum, effective ranks and the parameter saving at the recommended rank: the
    smallest MDS rank with stress <= ``target``, else (``reached`` False) the signal rank.
    ``saving`` is ``1 - rank (n + dim) / (n dim)``.
    """

    spectrum: Spectrum
    target: float
    rank: int
    rank_stress: float
    rank_interval: tuple[float, float]
    n: int
    dim: int
    n_params: int
    dense_params: int
    saving: float
    reading: str
    reached: bool = True


@dataclass(frozen=True)
class Recommendation:
    """Which encoding family fits best, the MDS rank reaching the target (None when no rank
    reaches it: :attr:`RankDiagnosis.rank` is then the signal rank), and why."""

    family: str
    encoding: str
    stress: float
    ci_low: float
    ci_high: float
    mds_rank: int | None
    text: str


@dataclass(frozen=True)
class Diagnosis:
    """Everything ``posdiag diagnose`` prints."""

    corpus: CorpusSummary
    information: InformationDiagnosis
    noise: NoiseDiagnosis
    shift: ShiftDiagnosis
    rank: RankDiagnosis
    encodings: tuple[EncodingScore, ...]
    recommendation: Recommendation
    uncertainty: Uncertainty
    warnings: tuple[str, ...] = ()
    geometry: CorpusGeometry | None = field(default=None, repr=False, compare=False)


def _information(counts: Counts, n: int, seed: int) -> InformationDiagnosis:
    m = counts.matrix[:n]
    bits, kl = positional_information(m)
    null = information_null(m, seed=seed)
    excess = bits - null.mean
    z = excess / null.sd if null.sd > 0 else (math.inf if excess > 0 else 0.0)
    significant = z >= INFORMATION_Z and excess > 0
    top = int(np.argmax(kl))
    if significant:
        reading = (
            f"word order is informative: I = {bits:.4g} bits, {excess:.4g} above the "
            f"{null.mean:.4g}-bit level of independent data (z = {z:.1f}); position {top} "
            f"differs most from the pooled distribution (KL {kl[top]:.3g} bits)"
        )
    else:
        reading = (
            f"no measurable positional information: I = {bits:.4g} bits is within the noise of "
            f"independent data ({null.mean:.4g} ± {null.sd:.2g} bits, z = {z:.1f})"
        )
    return InformationDiagnosis(
        bits,
        null.mean,
        null.sd,
        excess,
        float(z),
        significant,
        tuple(float(x) for x in kl),
        tuple(float(x) for x in null.per_position),
        reading,
    )


def _noise(geo: CorpusGeometry, floor: tuple[float, ...]) -> NoiseDiagnosis:
    f = np.array(floor)
    partners, count, pairs = _noise_pairs(geo, f)
    share, position_share = _noise_shares(geo, f)
    unstable = _unstable(partners, position_share)
    return noise_diagnosis(
        f,
        geo.summary.supports,
        count,
        pairs,
        partners,
        unstable,
        share,
        position_share,
        geo.estimator,
        plugin=not geo.has_split_half(),
    )


def noise_diagnosis(
    floor: np.ndarray,
    supports: Sequence[int],
    within: float,
    pairs: tuple[tuple[int, int], ...],
    partners: Iterable[int],
    unstable: tuple[int, ...],
    share: float,
    position_share: Iterable[float],
    estimator: str,
    *,
    plugin: bool,
    sampled: bool = False,
) -> NoiseDiagnosis:
    """The noise block of the floor (n,) and the pairs ``within`` the noise (a count, or an
    estimate from a sample when ``sampled``, at long contexts: its count then reads ``~N``),
    with its reading."""
    n = floor.size
    n_pairs = n * (n - 1) // 2
    count, frac = int(round(within)), within / n_pairs
    last = n - 1
    what = "variance" if plugin else "squared norm (sampling error bound)"
    near = "within the floor" if plugin else "within their own sampling error"
    about = "~" if sampled else ""
    reading = (
        f"{_share_of(share, what)}; floor {floor[0]:.2f} at "
        f"position 0 (N={supports[0]:,}), {floor[last]:.2f} at position {last} "
        f"(N={supports[last]:,}); {frac:.1%} of position pairs ({about}{count:,} of "
        f"{n_pairs:,}) are {near}"
    )
    if unstable:
        reading += f"; {len(unstable)} of {n} positions unstable (mostly noise)"
    if frac >= NOISY_FRACTION or share >= NOISY_SHARE:
        reading += ": much of this geometry is sampling noise"
    return NoiseDiagnosis(
        tuple(float(x) for x in floor),
        tuple(int(s) for s in supports[:n]),
        n_pairs,
        count,
        frac,
        pairs,
        tuple(int(x) for x in partners),
        unstable,
        share,
        tuple(float(x) for x in position_share),
        reading,
        estimator,
    )


def _share_of(share: float, what: str) -> str:
    """What sampling noise makes up of the geometry, never more than all of it."""
    if share <= 1.0:
        return f"sampling noise makes up ~{share:.0%} of the geometry's {what}"
    return (
        "sampling noise can make up all of the geometry (its sampling error bound is "
        f"{share:.2g} x the geometry's squared norm)"
    )


def _shift(d_h: np.ndarray) -> ShiftDiagnosis:
    fit = shift_equivariance(d_h)
    iu = np.triu_indices(d_h.shape[0], k=1)
    all_mean = float(d_h[iu].mean())
    neigh = float(np.diagonal(d_h, 1).mean())
    return shift_diagnosis(fit.r2, fit.profile, smoothness(d_h), neigh, all_mean)


def shift_diagnosis(
    r2: float, profile: np.ndarray, smooth: float, neighbours: float, all_mean: float
) -> ShiftDiagnosis:
    """The shift block from its figures (exact, or estimated at long contexts), with its
    reading."""
    if math.isnan(r2):
        kind = "undefined (all distances equal)"
    elif r2 >= SHIFT_R2:
        kind = "nearly a function of |i-j|: relative encodings suit this corpus"
    elif r2 >= 0.5:
        kind = "partly a function of |i-j|"
    else:
        kind = "not a function of |i-j|: absolute position matters"
    texture = "a smooth drift" if smooth < 0.5 else "neighbours nearly as far apart as any pair"
    reading = (
        f"shift-equivariance R^2 = {r2:.2f}: D_H is {kind}; neighbours are "
        f"{smooth:.2f} x the mean distance ({texture})"
    )
    return ShiftDiagnosis(
        r2, tuple(float(x) for x in profile), smooth, neighbours, all_mean, reading
    )


def noise_share_text(share: float) -> str:
    """``'~45%'``; from 100% on, what it is: the cross-fit's sampling error bound exceeding the
    geometry, ``'all of it (error bound 1.9 x the geometry)'``: a share cannot pass 100%."""
    return f"~{share:.0%}" if share <= 1.0 else f"~100% (error bound {share:.2g} x the geometry)"


def saving_phrase(saving: float, digits: int = 0) -> str:
    """``'88% fewer'``, or ``'53% more'`` when the factorisation costs more than a full table.

    A rank close to ``n`` with a small ``d`` makes ``r(n+d) > n d``; "-53% fewer" reads badly.
    """
    word = "fewer" if saving >= 0 else "more"
    return f"{abs(saving):.{digits}%} {word}"


def rank_diagnosis(
    spec: Spectrum,
    target: float,
    r: int,
    n: int,
    dim: int,
    missed: str | None,
    interval: tuple[float, float] = (math.nan, math.nan),
) -> RankDiagnosis:
    """The rank block of rank ``r``: the reading (``missed`` when ``r`` does not reach ``target``,
    None when it does) and the cost as ``P = A B^T``."""
    st = float(spec.stress_by_rank[r - 1])
    saving = parameter_saving(r, n, dim)
    reading = f"rank {r} reaches stress {st:.3f} <= {target:g}" if missed is None else missed
    reading += (
        f"; as P = A B^T it costs r(n+d) = {r * (n + dim):,} parameters vs n*d = {n * dim:,} "
        f"({saving_phrase(saving)}, d={dim})"
    )
    reached = missed is None
    return RankDiagnosis(
        spec, target, r, st, interval, n, dim, r * (n + dim), n * dim, saving, reading, reached
    )


def _rank(geo: CorpusGeometry, unc: Uncertainty, target: float, dim: int) -> RankDiagnosis:
    sp_ = spectrum(geo, DIAGNOSE_TOLERANCES)
    if geo.mds.total is None:
        hit = reached_rank(geo.mds.eigenvalues, target)
    else:
        # A partial spectrum: reached within the computed ranks, or treated as not reached.
        known = np.flatnonzero(np.asarray(sp_.stress_by_rank) <= target)
        hit = int(known[0] + 1) if known.size else None
    # Not reached: the signal rank (the ranks after it fit noise and only creep to the floor).
    r = hit if hit is not None else max(1, min(sp_.signal_rank, len(sp_.stress_by_rank)))
    # Rank intervals stop at the replicates' computed ranks at long contexts.
    iv = unc.stress_by_rank[r - 1] if r <= len(unc.stress_by_rank) else (math.nan, math.nan)
    missed = None
    if hit is None:
        missed = (
            f"stress <= {target:g} is not reached (floor {sp_.floor:.3f}: negative eigenvalues "
            f"of the estimate); the signal rank {r} has stress {sp_.stress_by_rank[r - 1]:.3f}"
        )
    return rank_diagnosis(sp_, target, r, geo.n_eff, dim, missed, iv)


def _recommend(
    scores: Sequence[EncodingScore],
    info: InformationDiagnosis,
    noise: NoiseDiagnosis,
    shift: ShiftDiagnosis,
    rank: RankDiagnosis,
) -> Recommendation:
    standard = [s for s in scores if not s.name.startswith("mds") and s.name != "nope"]
    best = standard[0] if standard else scores[0]
    # Unreached, ``rank.rank`` is the signal rank: a fallback, not a recommendation.
    mds_rank = rank.rank if rank.reached else None
    if rank.reached:
        mds = f"an MDS encoding reaches stress <= {rank.target:g} at rank {rank.rank}"
    elif math.isnan(rank.spectrum.min_eigenvalue):
        # Only the top eigenpairs are known (long contexts): no floor, no signal rank.
        mds = (
            f"no MDS rank up to {rank.rank} reaches stress <= {rank.target:g} (rank "
            f"{rank.rank} has {rank.rank_stress:.3f}; only the top {rank.spectrum.computed} "
            "eigenpairs are computed at long contexts)"
        )
    else:
        mds = (
            f"no MDS rank reaches stress <= {rank.target:g} (the estimate's floor is "
            f"{rank.spectrum.floor:.3f}; the signal rank {rank.rank} has {rank.rank_stress:.3f})"
        )
    if not info.significant:
        nope = next((s for s in scores if s.name == "nope"), best)
        return Recommendation(
            "none",
            "nope",
            nope.stress,
            nope.ci_low,
            nope.ci_high,
            mds_rank,
            f"No positional encoding is needed here: I(position; token) = {info.bits:.3g} bits "
            f"is within the noise of independent data ({info.null_mean:.3g} bits), so any "
            "geometry found is sampling noise.",
        )
    top = best
    if not math.isnan(shift.r2) and shift.r2 >= SHIFT_R2:
        rel = [s for s in standard if is_relative(s.name)]
        if rel:
            best = rel[0]
        why = f"D_H is nearly a function of |i-j| (R^2 = {shift.r2:.2f})"
    elif math.isnan(shift.r2):
        why = "it has the lowest stress (shift-equivariance is undefined: all distances are equal)"
    elif is_relative(best.name):
        why = (
            f"it has the lowest stress, although D_H is not shift-equivariant "
            f"(R^2 = {shift.r2:.2f})"
        )
    else:
        why = f"D_H is not shift-equivariant (R^2 = {shift.r2:.2f}), so absolute position matters"
    family = family_of(best.name)
    if best is top:
        runner = next((s for s in standard if s is not best), None)
        text = (
            f"{best.name} ({family}) fits best among standard encodings with stress "
            f"{best.stress:.3f}{best.ci_brief}"
        )
    else:
        # Shift-equivariance favours a relative encoding that does not have the lowest stress.
        runner = top
        text = f"{best.name} ({family}) is recommended with stress {best.stress:.3f}{best.ci_brief}"
    if runner is not None:
        text += f" vs {runner.name} {runner.stress:.3f}"
        if best.overlaps(runner):
            text += " (intervals overlap)"
    # The saving belongs to an MDS encoding that reaches the target; the signal rank does not.
    saving = f" ({saving_phrase(rank.saving)} parameters than a full table)" if rank.reached else ""
    text += f", because {why}; {mds}{saving}."
    if noise.fraction >= NOISY_FRACTION or noise.noise_share >= NOISY_SHARE:
        share = noise.noise_share
        if share > 1.0:  # the cross-fit's error bound exceeds the geometry: no share above 100%
            fact = f"sampling noise can make up all of the geometry (error bound {share:.2g} x it)"
        elif share >= NOISY_SHARE:
            fact = f"sampling noise makes up ~{share:.0%} of the geometry"
        else:
            fact = f"{noise.fraction:.0%} of position pairs are within the sampling noise"
        # Only the plug-in's noise is biased towards full-rank tables; the cross-fit's is not.
        bias = " (it favours full-rank tables)" if noise.estimator == "plugin" else ""
        text += (
            f" Caution: {fact}, so noise shapes this ranking{bias}: add data or raise --min-count."
        )
    return Recommendation(family, best.name, best.stress, best.ci_low, best.ci_high, mds_rank, text)


def diagnose(
    counts: Counts,
    encodings: Sequence[EncodingRequest] | None = None,
    analysis: Analysis = DEFAULT_ANALYSIS,
    *,
    target: float = DEFAULT_TARGET_STRESS,
    dim: int = DEFAULT_DIM,
    progress: Progress = None,
    details: bool = True,
) -> Diagnosis:
    """Run every theory diagnostic on a corpus (docs/geometry.md section 8, docs/theory.md).

    Parameters
    ----------
    counts : Counts
        With shards, every stress carries a bootstrap interval.
    target : float
        Stress the recommended MDS rank must reach, in (0, 1).
    dim : int
        Model dimension ``d``: of the parameter saving ``r(n+d)`` vs ``n d``, and of every
        encoding that has one and was not given it explicitly (``sinusoidal:d=512`` keeps 512).
    analysis : Analysis
        min_count, estimator, seed, level, replicates, splits
        (:class:`~posdiag.reports.options.Analysis`).
    progress : callable, optional
        Called with (done, replicates) during the bootstrap.
    details : bool
        False skips each score's plug-in figure (``plain``, then NaN), which only the JSON
        shows: one Gram product and one eigensolve fewer. The noise floor is computed either
        way (the report prints it).
    """
    target = check_float("target", target, 0.0, 1.0, lo_open=True)
    dim = check_int("dim", dim, 1)
    geo = analysed_geometry(counts, analysis, plain=details)
    scored = _scored(geo, encodings, dim, noise=True)
    scores, unc = _with_intervals(geo, counts, scored, analysis, progress)
    info = _information(counts, geo.n_eff, analysis.seed)
    noise = _noise(geo, unc.noise_floor)
    shift = _shift(geo.distances)
    rank = _rank(geo, unc, target, dim)
    rec = _recommend(scores, info, noise, shift, rank)
    return Diagnosis(
        geo.summary,
        info,
        noise,
        shift,
        rank,
        tuple(scores),
        rec,
        unc,
        (*geo.warnings, *unstable_warnings(unc, geo.summary)),
        geo,
    )
