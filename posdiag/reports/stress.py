"""The stress report (``posdiag stress``): the stress table, the spectrum and the intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..counts.core import Counts
from .analysis import (
    DEFAULT_ANALYSIS,
    CorpusGeometry,
    CorpusSummary,
    Progress,
    Spectrum,
    analysed_geometry,
    spectrum,
)
from .intervals import Uncertainty, _with_intervals, unstable_warnings
from .options import Analysis
from .scores import EncodingRequest, EncodingScore, _scored, score_encodings

__all__ = ["StressReport", "stress_report"]


@dataclass(frozen=True)
class StressReport:
    """Everything ``posdiag stress`` prints; ``uncertainty`` is None when not asked for;
    ``geometry`` is kept for plots."""

    corpus: CorpusSummary
    spectrum: Spectrum
    encodings: tuple[EncodingScore, ...]
    warnings: tuple[str, ...] = ()
    uncertainty: Uncertainty | None = None
    geometry: CorpusGeometry | None = field(default=None, repr=False, compare=False)


def stress_report(
    counts: Counts,
    encodings: Sequence[EncodingRequest] | None = None,
    analysis: Analysis = DEFAULT_ANALYSIS,
    *,
    dim: int | None = None,
    progress: Progress = None,
    details: bool = True,
) -> StressReport:
    """The stress table of ``encodings`` (default set when None) on the corpus ``counts``.

    With shards every stress gets a bootstrap interval (``progress(done, replicates)``);
    ``analysis.level`` None with counts that have no shards and say nothing of intervals skips
    the uncertainty part. ``details=False`` skips what only ``--verbose`` and the JSON show
    (the ``plain`` figures, a cross-fit's noise floor).
    """
    geo = analysed_geometry(counts, analysis, plain=details)
    if analysis.level is None and not counts.shards and not counts.no_intervals:
        rows = tuple(score_encodings(geo, encodings, dim=dim))
        return StressReport(geo.summary, spectrum(geo), rows, geo.warnings, geometry=geo)
    scored = _scored(geo, encodings, dim, noise=True)
    scores, unc = _with_intervals(geo, counts, scored, analysis, progress, details=details)
    warned = (*geo.warnings, *unstable_warnings(unc, geo.summary))
    return StressReport(geo.summary, spectrum(geo), tuple(scores), warned, unc, geo)
