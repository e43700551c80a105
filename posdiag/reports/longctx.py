"""``stress``, ``check``, ``build-encoding``, ``diagnose`` and ``report`` at modern context
lengths: from :data:`IMPLICIT_FROM` analysed positions (:func:`takes_implicit`) one implicit
geometry (:func:`implicit_analysis`, :mod:`posdiag.geometry.implicit`) without an ``n x n``
array, else the dense reports. What differs there (docs/geometry.md, "Long contexts"): the
sampled figures carry standard errors, named in one warning line; ``mds-r`` is in-sample; no
intervals, Kruskal, Spearman, plug-in column or per-position partners.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .._util.validate import check_float, check_int
from ..counts.core import Counts
from ..encodings import DEFAULT_DIM, make_encoding
from ..errors import PosdiagError
from ..geometry import implicit, implicit_noise
from ..geometry.core import _fix_signs, mds_coordinates
from ..geometry.estimator import shard_halves, sqrt_rows
from . import stress as dense
from .analysis import (
    CROSSFIT_MIN_TOKENS,
    DEFAULT_ANALYSIS,
    EFFECTIVE_RANK_TOLERANCES,
    IMPLICIT_FROM,
    MAX_PAIRS_LISTED,
    CorpusSummary,
    Progress,
    Spectrum,
    analysed_geometry,
    corpus_summary,
    refuse_identical,
    summary_notes,
    thinning_note,
    top_spectrum,
)
from .diagnosis import (
    DEFAULT_TARGET_STRESS,
    DIAGNOSE_TOLERANCES,
    Diagnosis,
    RankDiagnosis,
    _information,
    _recommend,
    noise_diagnosis,
    rank_diagnosis,
    shift_diagnosis,
)
from .diagnosis import diagnose as dense_diagnose
from .export import LowRankEncoding, check_dims, eigenpair_encoding, low_rank_encoding
from .intervals import (
    UNSTABLE_SHARE,
    Uncertainty,
    _noise_gram_diagonal,
    position_floor,
    position_noise_share,
    unstable_warnings,
)
from .options import Analysis
from .scores import EncodingRequest, EncodingScore, _resolve
from .stress import StressReport

__all__ = [
    "IMPLICIT_FROM",
    "LongAnalysis",
    "build_encoding",
    "diagnose",
    "encoding_line",
    "implicit_encoding",
    "implicit_analysis",
    "implicit_diagnose",
    "implicit_scores",
    "implicit_stress_report",
    "sampled_line",
    "stress_report",
    "takes_implicit",
]


def takes_implicit(counts: Counts, min_count: int) -> bool:
    """Whether the reports analyse ``counts`` by the implicit path: from :data:`IMPLICIT_FROM`
    analysed positions at ``min_count``."""
    # Only inputs that long pay for the summary here (it is computed again on the dense path).
    long = counts.matrix.shape[0] >= IMPLICIT_FROM
    return long and corpus_summary(counts, min_count).n_eff >= IMPLICIT_FROM


def _halves(
    counts: Counts, n: int, estimator: str, splits: int, seed: int
) -> tuple[implicit.ImplicitBC, str]:
    c = counts.matrix.tocsr()
    if estimator == "plugin":
        s = sqrt_rows(c[:n])
        return implicit.from_rows(s), "none"
    if len(counts.shards) >= 2:
        try:
            halves = shard_halves(counts.shards, n, splits, np.random.default_rng([seed, 1]))
        except PosdiagError:
            pass  # a random half of the shards left a position without tokens: thin instead
        else:
            return implicit.from_halves(halves), "shards"
    return implicit.from_thinning(c, n), "thinning"


def sampled_line(geom: implicit.ImplicitGeometry, largest: float) -> str:
    """The one line saying which figures are sampled, and their largest standard error."""
    return (
        f"long context (n_eff = {geom.n:,}): implicit geometry, no n x n matrix; sampled from "
        f"{geom.pairs.rows.size:,} position pairs: ||B_H|| (so every stress) and the table "
        f"encodings' residual share, largest standard error {largest:.4f}; mds-r in-sample; "
        "no intervals, Kruskal or Spearman (docs/geometry.md, 'Long contexts')"
    )


@dataclass(frozen=True)
class LongAnalysis:
    """What every command reads at long n (:func:`implicit_analysis`).

    ``bc``: the factors of ``BC`` the geometry was computed from; ``notes``: the dense path's
    warnings about what was counted, in its words.
    """

    summary: CorpusSummary
    geometry: implicit.ImplicitGeometry
    bc: implicit.ImplicitBC = field(repr=False)
    notes: tuple[str, ...] = ()


def implicit_analysis(
    counts: Counts, analysis: Analysis = DEFAULT_ANALYSIS, *, rank: int = 0
) -> LongAnalysis:
    """The corpus summary and the implicit geometry of ``counts``: one call, so every command
    tells the same story. ``rank``: eigenpairs needed beyond the default (up to 16 the
    Lanczos and the pair sample are those of ``stress``).
    """
    estimator, seed = analysis.estimator, analysis.seed
    summary = corpus_summary(counts, analysis.positions_from)
    n = summary.n_eff
    tokens = np.asarray(summary.supports[:n])
    if estimator == "crossfit" and np.any(tokens < CROSSFIT_MIN_TOKENS):
        i = int(np.flatnonzero(tokens < CROSSFIT_MIN_TOKENS)[0])
        raise PosdiagError(
            f"{summary.source}: the cross-fitted geometry needs >= {CROSSFIT_MIN_TOKENS} tokens "
            f"at every analysed position; position {i} has {int(tokens[i])}"
        )
    refuse_identical(counts, n, summary.source)
    bc, method = _halves(counts, n, estimator, analysis.splits, seed)
    geom = implicit.implicit_geometry(
        bc,
        tolerances=EFFECTIVE_RANK_TOLERANCES,
        min_rank=max(16, rank),
        max_rank=max(rank, implicit.IMPLICIT_MAX_RANK),
        seed=seed,
    )
    # The dense path's eigenvector signs (largest entry positive): the same file either way.
    spec = replace(geom.spectrum, vectors=_fix_signs(geom.spectrum.vectors))
    notes = []
    shards = counts.shards
    if estimator == "crossfit" and len(shards) >= 2 and method == "thinning":
        notes.append(thinning_note(summary.source, len(shards)))
    notes += summary_notes(summary, sharded=bool(shards) or estimator == "plugin")
    return LongAnalysis(summary, replace(geom, spectrum=spec), bc, tuple(notes))


def implicit_scores(
    geom: implicit.ImplicitGeometry,
    encodings: Sequence[EncodingRequest] | None,
    dim: int | None = None,
) -> list[tuple[EncodingScore, float]]:
    """Every encoding's score on ``geom`` with its standard error, in the order asked.

    ``raw``, ``kruskal``, ``spearman`` and the intervals are NaN; ``mds-r`` is in-sample.
    """
    n, top = geom.n, geom.spectrum.eigenvalues.size
    out: list[tuple[EncodingScore, float]] = []
    for name, params, preset in _resolve(encodings, n, dim):
        if name == "mds":
            rank = int(params["rank"])
            if rank > top:
                raise PosdiagError(
                    f"encoding 'mds-{rank}': at n_eff = {n:,} the implicit path computes the top "
                    f"{top} eigenpairs; ask for rank <= {top}"
                )
            s = implicit.mds_stress(geom, rank)
            d = int(params.get("dim", DEFAULT_DIM))
            label, kept, n_params = f"mds-{rank}", {"rank": rank, "dim": d}, rank * (n + d)
            in_sample = s.stress
        else:
            enc = make_encoding(name, n, params)
            if enc.profile is not None:
                s = implicit.score_profile(geom, enc.profile)
            elif enc.vectors is not None:
                s = implicit.score_vectors(geom, enc.vectors)
            else:
                raise PosdiagError(
                    f"encoding {name!r} has neither a lag profile nor position vectors; at "
                    f"n_eff = {n:,} only those are scored (no n x n matrix)"
                )
            label, kept, n_params, in_sample = enc.name, dict(enc.params), enc.n_params, math.nan
        nan = math.nan
        score = EncodingScore(
            label, kept, s.stress, nan, nan, nan, n_params, in_sample=in_sample, preset=preset
        )
        out.append((score, s.se))
    return out


def implicit_stress_report(
    counts: Counts,
    encodings: Sequence[EncodingRequest] | None = None,
    analysis: Analysis = DEFAULT_ANALYSIS,
    *,
    dim: int | None = None,
) -> StressReport:
    """The stress table of ``encodings`` on ``counts`` by the implicit path
    (:func:`implicit_scores`)."""
    run = implicit_analysis(counts, analysis)
    summary, geom = run.summary, run.geometry
    scored = implicit_scores(geom, encodings, dim)
    largest = max((se for _, se in scored), default=0.0)
    scores = sorted((s for s, _ in scored), key=lambda e: e.stress)
    spectrum = _spectrum(geom, analysis.estimator, EFFECTIVE_RANK_TOLERANCES)
    return StressReport(summary, spectrum, tuple(scores), (*run.notes, sampled_line(geom, largest)))


def _spectrum(
    geom: implicit.ImplicitGeometry, estimator: str, tolerances: Sequence[float]
) -> Spectrum:
    """The report's spectrum of the top eigenpairs (effective ranks past them read "> k")."""
    lam = geom.spectrum.eigenvalues
    unknown = (
        f"only the top {lam.size} eigenvalues were computed at n_eff = {geom.n:,} (implicit path: "
        "docs/geometry.md, 'Long contexts')"
    )
    by_rank = geom.spectrum.stress_by_rank()
    return top_spectrum(lam, by_rank, math.nan, 0.0, estimator, tolerances, unknown)


def encoding_line(geom: implicit.ImplicitGeometry, rank: int, se: float) -> str:
    """``build-encoding``'s line at long contexts: what its eigenpairs and stress come from."""
    return (
        f"long context (n_eff = {geom.n:,}): implicit geometry, no n x n matrix; the top "
        f"{geom.spectrum.eigenvalues.size} eigenpairs by Lanczos; the stress is the in-sample "
        f"tail at rank {rank} (the long-n rule: no held-out split), ||B_H|| sampled from "
        f"{geom.pairs.rows.size:,} position pairs, standard error {se:.4f} (docs/geometry.md, "
        "'Long contexts')"
    )


def implicit_encoding(
    counts: Counts, rank: int, dim: int, analysis: Analysis = DEFAULT_ANALYSIS, *, seed: int = 0
) -> LowRankEncoding:
    """:func:`posdiag.reports.export.low_rank_encoding` by the implicit path: coordinates from
    its Lanczos eigenpairs, the in-sample stress with its standard error."""
    n = corpus_summary(counts, analysis.positions_from).n_eff
    rank = check_int("rank", rank, 1, n - 1, hi_label="n_eff-1")
    check_dims(n, rank, dim, seed)  # bad --dim before the pass over the counts
    run = implicit_analysis(counts, analysis, rank=rank)
    summary, geom = run.summary, run.geometry
    s = implicit.mds_stress(geom, rank)
    spec = geom.spectrum
    return eigenpair_encoding(
        summary,
        spec.eigenvalues,
        mds_coordinates(spec.eigenvalues, spec.vectors, rank),
        dim,
        seed=seed,
        stress=s.stress,
        stress_se=s.se,
        warnings=(*run.notes, encoding_line(geom, rank, s.se)),
    )


def build_encoding(
    counts: Counts, rank: int, dim: int, analysis: Analysis = DEFAULT_ANALYSIS, *, seed: int = 0
) -> LowRankEncoding:
    """``posdiag build-encoding``: :func:`low_rank_encoding` of the dense geometry, or from
    :data:`IMPLICIT_FROM` analysed positions :func:`implicit_encoding`."""
    if takes_implicit(counts, analysis.positions_from):
        return implicit_encoding(counts, rank, dim, analysis, seed=seed)
    return low_rank_encoding(analysed_geometry(counts, analysis), rank, dim, seed=seed)


def stress_report(
    counts: Counts,
    encodings: Sequence[EncodingRequest] | None = None,
    analysis: Analysis = DEFAULT_ANALYSIS,
    *,
    dim: int | None = None,
    progress: Progress = None,
    details: bool = True,
) -> StressReport:
    """:func:`posdiag.reports.stress.stress_report`, or from :data:`IMPLICIT_FROM` analysed
    positions :func:`implicit_stress_report` (no intervals)."""
    if takes_implicit(counts, analysis.positions_from):
        return implicit_stress_report(counts, encodings, analysis, dim=dim)
    return dense.stress_report(
        counts, encodings, analysis, dim=dim, progress=progress, details=details
    )


def diagnose_line(
    geom: implicit.ImplicitGeometry,
    largest: float,
    noise: implicit_noise.PairsWithinNoise,
    shift: implicit_noise.ShiftEstimate,
    *,
    plugin: bool = False,
) -> str:
    """``diagnose``'s line at long contexts: what is sampled, with the standard errors."""
    n_pairs = geom.n * (geom.n - 1) // 2
    left_out = (
        "per-position partners (unstable positions from the noise share alone)"
        if plugin
        else "per-position partners or unstable positions"
    )
    return (
        f"long context (n_eff = {geom.n:,}): implicit geometry, no n x n matrix; sampled from "
        f"{geom.pairs.rows.size:,} position pairs: ||B_H|| (so every stress, largest standard "
        f"error {largest:.4f}), the table encodings' residual share, the pairs within the noise "
        f"(standard error {noise.within_se / n_pairs:.2%} of the pairs) and the noise share "
        f"(standard error {noise.share_se:.2%}); shift R^2 from {shift.pairs:,} pairs at every "
        f"lag (standard error {shift.r2_se:.4f}); mds-r in-sample; no intervals, Kruskal, "
        f"Spearman, {left_out} (docs/geometry.md, 'Long contexts')"
    )


def _rank(spectrum: Spectrum, target: float, dim: int, n: int) -> RankDiagnosis:
    """The rank block from the top eigenpairs: the smallest computed rank reaching ``target``,
    else the largest computed one (the lowest stress known)."""
    by_rank = np.asarray(spectrum.stress_by_rank)
    hits = np.flatnonzero(by_rank <= target)
    r = int(hits[0] + 1) if hits.size else int(by_rank.size)
    missed = None
    if not hits.size:
        missed = (
            f"stress <= {target:g} is not reached by the top {r} eigenpairs computed at long "
            f"contexts (rank {r} has stress {by_rank[r - 1]:.3f})"
        )
    return rank_diagnosis(spectrum, target, r, n, dim, missed)


def implicit_diagnose(
    counts: Counts,
    encodings: Sequence[EncodingRequest] | None = None,
    analysis: Analysis = DEFAULT_ANALYSIS,
    *,
    target: float = DEFAULT_TARGET_STRESS,
    dim: int = DEFAULT_DIM,
) -> Diagnosis:
    """:func:`posdiag.reports.diagnosis.diagnose` by the implicit path (docs/geometry.md,
    "Long contexts"): the information and the noise floor as on the dense path; the stresses,
    spectrum and rank as :func:`implicit_stress_report`; the pairs within the noise and the
    noise share from the geometry's pair sample; the shift ``R^2`` from a sample at every lag.
    No intervals; per-position partners and noise shares (and so unstable positions) are not
    computed, except the plug-in's shares, which are exact."""
    target = check_float("target", target, 0.0, 1.0, lo_open=True)
    dim = check_int("dim", dim, 1)
    run = implicit_analysis(counts, analysis)
    summary, geom, notes = run.summary, run.geometry, run.notes
    n, seed = geom.n, analysis.seed
    scored = implicit_scores(geom, encodings, dim)
    largest = max((se for _, se in scored), default=0.0)
    scores = sorted((sc for sc, _ in scored), key=lambda e: e.stress)
    sh = implicit_noise.shift_estimate(geom, run.bc, seed=seed)
    del run  # the full data's BC: the outer split's halves are built after it is freed
    info = _information(counts, n, seed)
    floor = position_floor(counts, n, seed)
    plugin = analysis.estimator == "plugin"
    if plugin:
        noise_trace = float(_noise_gram_diagonal(floor).sum())
        est = implicit_noise.floor_noise(geom, floor, noise_trace, max_pairs=MAX_PAIRS_LISTED)
        share = position_noise_share(implicit_noise.gram_diagonal(geom), floor)
        position_share = tuple(float(x) for x in share)
        unstable = tuple(int(i) for i in np.flatnonzero(share >= UNSTABLE_SHARE))
    else:
        entries = implicit_noise.split_entries(
            counts.matrix,
            n,
            geom.pairs.rows,
            geom.pairs.cols,
            counts.shards,
            splits=analysis.splits,
            seed=seed,
        )
        est = implicit_noise.split_noise(geom, entries, max_pairs=MAX_PAIRS_LISTED)
        position_share, unstable = (), ()
    noise = noise_diagnosis(
        floor,
        summary.supports,
        est.within,
        est.examples,
        (),
        unstable,
        est.share,
        position_share,
        analysis.estimator,
        plugin=plugin,
        sampled=True,
    )
    shift = shift_diagnosis(sh.r2, sh.profile, sh.smoothness, sh.neighbour_mean, sh.all_mean)
    spectrum = _spectrum(geom, analysis.estimator, DIAGNOSE_TOLERANCES)
    rank = _rank(spectrum, target, dim, n)
    rec = _recommend(scores, info, noise, shift, rank)
    why = (
        f"no intervals: at n_eff = {n:,} the implicit path computes no bootstrap "
        "(docs/geometry.md, 'Long contexts')"
    )
    unc = Uncertainty(analysis.coverage, 0, 0, seed, (), noise.floor, unstable, why)
    warnings = (
        *notes,
        diagnose_line(geom, largest, est, sh, plugin=plugin),
        *unstable_warnings(unc, summary),
    )
    return Diagnosis(summary, info, noise, shift, rank, tuple(scores), rec, unc, warnings)


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
    """:func:`posdiag.reports.diagnosis.diagnose`, or from :data:`IMPLICIT_FROM` analysed
    positions :func:`implicit_diagnose` (``progress`` and ``details`` then do nothing)."""
    if takes_implicit(counts, analysis.positions_from):
        return implicit_diagnose(counts, encodings, analysis, target=target, dim=dim)
    return dense_diagnose(
        counts, encodings, analysis, target=target, dim=dim, progress=progress, details=details
    )
