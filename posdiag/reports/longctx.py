"""``posdiag stress`` at modern context lengths: the report from the implicit geometry (issue 35).

From :data:`IMPLICIT_FROM` analysed positions the dense path no longer fits this class of machine
(at 16,384 positions it peaks at 8.5 GB; at 32,768 its ``n x n`` float64 arrays alone would be
~34 GB), so :func:`stress_report` hands the corpus to
:func:`implicit_stress_report`: the same estimator (cross-fit by shards or thinning, or the
plug-in), computed by :mod:`posdiag.geometry.implicit` without an ``n x n`` array. What differs
there (docs/geometry.md, "Long contexts: the implicit path"):

- ``||B_H||_F^2`` (every stress's denominator) and a table encoding's residual share are
  estimated from a seeded pair sample: every such figure carries a standard error, and one line
  (:attr:`StressReport.warnings`, so on screen and in the JSON) names them and the largest;
- ``mds-r`` is the in-sample eigenvalue tail (the long-n rule: no held-out split), and no
  bootstrap intervals, Kruskal, Spearman or plug-in column are computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..counts.core import Counts
from ..encodings import DEFAULT_DIM, make_encoding
from ..geometry import implicit
from ..geometry.estimator import shard_halves
from . import stress as dense
from .analysis import (
    CROSSFIT_MIN_TOKENS,
    DEFAULT_ANALYSIS,
    EFFECTIVE_RANK_TOLERANCES,
    Progress,
    Spectrum,
    corpus_summary,
)
from .options import Analysis
from .scores import EncodingRequest, EncodingScore, _resolve
from .stress import StressReport

__all__ = [
    "IMPLICIT_FROM",
    "implicit_stress_report",
    "sampled_line",
    "stress_report",
    "uses_implicit",
]

# Analysed positions from which `stress` runs the implicit path: the dense path's largest
# measured size is 16,384 (94 s, 8.5 GB); at 32,768 its n x n arrays alone exceed this machine.
IMPLICIT_FROM = 16_385


def uses_implicit(n_eff: int) -> bool:
    """Whether a report of ``n_eff`` positions runs the implicit path."""
    return n_eff >= IMPLICIT_FROM


def _halves(
    counts: Counts, n: int, estimator: str, splits: int, seed: int
) -> tuple[implicit.ImplicitBC, str]:
    from ..errors import PosdiagError
    from ..geometry.estimator import sqrt_rows

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


def implicit_stress_report(
    counts: Counts,
    encodings: Sequence[EncodingRequest] | None = None,
    analysis: Analysis = DEFAULT_ANALYSIS,
    *,
    dim: int | None = None,
) -> StressReport:
    """The stress table of ``encodings`` on ``counts`` (a ``Counts``) by the implicit path.

    Every score's ``stress`` is the figure of docs/geometry.md section 4 on the same estimate the
    dense path computes, within its standard error (listed in the warning line); ``raw``,
    ``kruskal``, ``spearman``, ``plain`` and the intervals are NaN.
    """
    from ..errors import PosdiagError

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
    bc, _ = _halves(counts, n, estimator, analysis.splits, seed)
    geom = implicit.implicit_geometry(bc, tolerances=EFFECTIVE_RANK_TOLERANCES, seed=seed)
    del bc
    scores: list[EncodingScore] = []
    largest = 0.0
    for name, params, preset in _resolve(encodings, n, dim):
        if name == "mds":
            rank = int(params["rank"])
            if rank > geom.spectrum.eigenvalues.size:
                raise PosdiagError(
                    f"encoding 'mds-{rank}': at n_eff = {n:,} the implicit path computes the top "
                    f"{geom.spectrum.eigenvalues.size} eigenpairs; ask for rank <= "
                    f"{geom.spectrum.eigenvalues.size}"
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
        largest = max(largest, s.se)
        nan = math.nan
        scores.append(
            EncodingScore(
                label, kept, s.stress, nan, nan, nan, n_params, in_sample=in_sample, preset=preset
            )
        )
    scores.sort(key=lambda e: e.stress)
    spec = geom.spectrum
    lam = spec.eigenvalues
    by_rank = spec.stress_by_rank()
    eff: dict[float, int | None] = {}
    for t in EFFECTIVE_RANK_TOLERANCES:
        hits = np.flatnonzero(by_rank <= t)
        eff[float(t)] = int(hits[0] + 1) if hits.size else lam.size + 1
    spectrum = Spectrum(
        eigenvalues=tuple(float(x) for x in lam),
        stress_by_rank=tuple(float(x) for x in by_rank),
        effective_rank=eff,
        min_eigenvalue=math.nan,
        floor=0.0,
        signal_rank=0,
        negative=(
            f"only the top {lam.size} eigenvalues were computed at n_eff = {n:,} (implicit path: "
            "docs/geometry.md, 'Long contexts')"
        ),
        estimator=estimator,
        computed=int(lam.size),
    )
    return StressReport(summary, spectrum, tuple(scores), (sampled_line(geom, largest),))


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
    positions :func:`implicit_stress_report` (the intervals' options then do nothing: no
    bootstrap at long contexts, docs/geometry.md "Long contexts")."""
    # Only inputs that long pay for the summary here (it is computed again on the dense path).
    if counts.matrix.shape[0] >= IMPLICIT_FROM and uses_implicit(
        corpus_summary(counts, analysis.positions_from).n_eff
    ):
        return implicit_stress_report(counts, encodings, analysis, dim=dim)
    return dense.stress_report(
        counts, encodings, analysis, dim=dim, progress=progress, details=details
    )
