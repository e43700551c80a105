"""The two lines printed under the stress table: what the table says in plain words, for a
first-time user, and where to go next; computed from the
:class:`~posdiag.reports.stress.StressReport` alone.
"""

from __future__ import annotations

import shlex

from .._util.userdocs import doc_ref
from ..encodings.families import family
from ..reports.stress import StressReport

__all__ = ["IN_SHORT", "takeaway"]

# The line that reads the table starts with this (printed in bold).
IN_SHORT = "In short: "


def takeaway(report: StressReport) -> list[str]:
    """Two lines: the best standard encoding and its family, how many MDS dimensions the
    geometry needs and whether sampling noise matters; and the next step."""
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
            f"of the standard encodings {best.label} fits best, stress {best.stress:.3f}"
            f"{best.ci_brief} (family {family(best.name)}){why}"
        )
    if sp.effective_rank:
        eps, r = next(iter(sp.effective_rank.items()))
        if r is None:
            # Below the floor the negative eigenvalues leave, no rank reaches eps.
            parts.append(
                f"no number of MDS dimensions reaches stress <= {eps:g} (the estimate's floor "
                f"is {sp.floor:.3f}; {sp.signal_rank} dimensions stand above the noise)"
            )
        else:
            shape = "a low-rank geometry" if r <= 8 else "no low-rank shape"
            parts.append(
                f"{r} MDS dimensions (of at most {c.n_eff - 1}) reach stress <= {eps:g}: {shape}"
            )
    unc = report.uncertainty
    if unc is not None and unc.unstable:
        parts.append(
            f"sampling noise matters: {len(unc.unstable)} of {c.n_eff} positions are mostly noise"
        )
    elif len(standard) >= 2 and standard[0].overlaps(standard[1]):
        parts.append(
            f"sampling noise matters: the intervals of {standard[0].label} and "
            f"{standard[1].label} overlap"
        )
    elif unc is not None and unc.shards:
        parts.append("sampling noise does not reorder the top two (their intervals are apart)")
    else:
        parts.append("sampling noise not assessed (--shards 0)")
    return [
        IN_SHORT + "; ".join(parts) + ".",
        f"Next: posdiag diagnose {shlex.quote(c.source)} explains it; {doc_ref('geometry')} "
        "defines stress and rank.",
    ]
