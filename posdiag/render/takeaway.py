"""The two lines printed under the stress table: what the table says, and where to go next.

A first-time user sees a table of numbers; these lines read it for them: which standard family
fits best, how many MDS dimensions the corpus geometry needs (its effective rank), whether
sampling noise is large enough to reorder the table, and which command and document explain
more. Computed from the :class:`~posdiag.analysis.StressReport` alone.
"""

from __future__ import annotations

import math
import shlex

from ..analysis import EncodingScore, StressReport

__all__ = ["takeaway"]

_FAMILY = {"absolute": "absolute", "relative": "relative", "bias": "relative bias"}


def _family(name: str) -> str:
    from ..encodings import REGISTRY

    spec = REGISTRY.get(name)
    return _FAMILY.get(spec.kind, spec.kind) if spec is not None else "?"


def _ci(s: EncodingScore) -> str:
    return "" if math.isnan(s.ci_low) else f" [{s.ci_low:.3f}, {s.ci_high:.3f}]"


def _overlap(a: EncodingScore, b: EncodingScore) -> bool:
    return not math.isnan(a.ci_high) and b.ci_low <= a.ci_high and a.ci_low <= b.ci_high


def takeaway(report: StressReport) -> list[str]:
    """Two lines: the reading (best family, effective rank, noise), and the next step."""
    scores = report.encodings
    standard = [s for s in scores if not s.name.startswith("mds") and s.name != "nope"]
    sp, c = report.spectrum, report.corpus
    parts = []
    nope = next((s.stress for s in scores if s.name == "nope"), 1.0)  # nope's stress is 1
    if standard and round(standard[0].stress, 3) >= round(nope, 3):
        # A tie with no encoding at all is no "best": diagnose then says none is needed.
        best = standard[0]
        parts.append(
            f"no fixed encoding does better than none ({best.label} {best.stress:.3f}, "
            f"nope {nope:.3f})"
        )
    elif standard:
        best = standard[0]
        why = " (a random table: mostly noise)" if best.name == "learned-random" else ""
        parts.append(
            f"best fixed encoding {best.label} {best.stress:.3f}{_ci(best)} "
            f"({_family(best.name)} family){why}"
        )
    if sp.effective_rank:
        eps, r = next(iter(sp.effective_rank.items()))
        if r is None:
            # Below the floor the negative eigenvalues leave, no rank reaches eps.
            parts.append(
                f"signal rank {sp.signal_rank} (stress {eps:g} is below the floor {sp.floor:.3f})"
            )
        else:
            shape = "low-rank" if r <= 8 else "no low-rank shape"
            parts.append(f"effective rank {r}/{c.n_eff - 1} at stress <= {eps:g} ({shape})")
    unc = report.uncertainty
    if unc is not None and unc.unstable:
        parts.append(f"noise matters: {len(unc.unstable)} of {c.n_eff} positions are mostly noise")
    elif len(standard) >= 2 and _overlap(standard[0], standard[1]):
        parts.append(f"noise matters: the top two overlap ({standard[1].label})")
    elif unc is not None and unc.shards:
        parts.append("noise does not reorder the top (intervals apart)")
    else:
        parts.append("noise not assessed (--shards 0)")
    return [
        "Reading: " + "; ".join(parts) + ".",
        f"Next: posdiag diagnose {shlex.quote(c.source)} explains it; docs/geometry.md "
        "defines stress and rank.",
    ]
