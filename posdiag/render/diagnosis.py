"""``posdiag diagnose`` as rich tables and JSON: one block per diagnostic, then the
recommendation."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from ..reports.diagnosis import Diagnosis, noise_share_text
from ._fit import Column, print_fitted
from ._format import ci_text, corpus_json, fmt, jsonable, params, ranges, score_json, spectrum_rows
from .stress import SPECTRUM_STRESS, print_summary, spectrum_json, spectrum_line

__all__ = ["diagnosis_json", "print_diagnosis"]


def diagnosis_json(d: Diagnosis) -> dict[str, Any]:
    """The ``--json`` document of ``posdiag diagnose``."""
    rank = asdict(d.rank)
    rank["spectrum"] = spectrum_json(d.rank.spectrum, d.uncertainty.stress_by_rank)
    return jsonable(
        {
            "corpus": corpus_json(d.corpus),
            "information": asdict(d.information),
            "noise": asdict(d.noise),
            "shift": asdict(d.shift),
            "rank": rank,
            "encodings": [score_json(e) for e in d.encodings],
            "recommendation": asdict(d.recommendation),
            "uncertainty": asdict(d.uncertainty),
            "warnings": d.warnings,
        }
    )


# What each column of the per-position table measures (its headers are short).
PER_POSITION_LEGEND = (
    "  KL to pooled: how far position i's token distribution is from all positions pooled; "
    "KL if shuffled: the KL that sampling noise alone gives N_i tokens when the position says "
    "nothing (tokens shuffled across positions), so only the excess is positional information; "
    "noise floor: the Hellinger distance between two halves of position i's own sample; "
    "noise share: the part of position i's geometry that is sampling noise"
)


def per_position_title(n: int, step: int) -> str:
    """The per-position table's title: which of the ``n`` positions it shows."""
    if step == 1:
        return f"Per position (all {n})"
    nth = {2: "2nd", 3: "3rd"}.get(step, f"{step}th")
    return f"Per position (every {nth} of 0..{n - 1}, and the last; --json has all {n})"


def print_diagnosis(d: Diagnosis, console: Console) -> None:
    """The corpus summary, one block per diagnostic with its reading, and the recommendation."""
    print_summary(d.corpus, console)
    info = d.information
    console.print("\n[bold]Positional information[/bold] (Necessity Theorem)")
    console.print(
        f"  I(position; token) = {info.bits:.4f} bits; independent-data level "
        f"{info.null_mean:.4f} ± {info.null_sd:.2g}; excess {info.excess:.4f} (z = {info.z:.1f})"
    )
    console.print(f"  -> {info.reading}")
    nz = d.noise
    console.print("\n[bold]Noise floor[/bold] (split-half d_H; Positional Separation Theorem)")
    console.print(
        f"  indistinguishable pairs: {nz.n_indistinguishable:,} of {nz.n_pairs:,} "
        f"({nz.fraction:.1%}); noise share of the geometry {noise_share_text(nz.noise_share)}"
    )
    if nz.pairs:
        shown = ", ".join(f"({i},{j})" for i, j in nz.pairs[:20])
        more = nz.n_indistinguishable - min(20, len(nz.pairs))
        console.print(f"  pairs: {shown}" + (f" ... (+{more})" if more > 0 else ""))
    if nz.unstable:
        console.print(f"  unstable positions ({len(nz.unstable)}): {ranges(nz.unstable)}")
    n = d.corpus.n_eff
    step = max(1, n // 16)
    t = Table(title=per_position_title(n, step), title_justify="left")
    cols = (
        "position",
        "N_i",
        "KL to pooled (bits)",
        "KL if shuffled",
        "noise floor",
        "noise share",
    )
    for col in cols:
        t.add_column(col, justify="right")
    for i in sorted(set(range(0, n, step)) | {n - 1}):
        t.add_row(
            str(i),
            f"{nz.supports[i]:,}",
            f"{info.per_position[i]:.3f}",
            f"{info.per_position_null[i]:.3f}",
            f"{nz.floor[i]:.3f}",
            # A share cannot pass 100%: beyond, the error bound exceeds the position's row.
            # None at long contexts: per-position shares are not computed there.
            noise_share_text(nz.position_share[i]).split(" ")[0].lstrip("~")
            if nz.position_share
            else "-",
        )
    console.print(t)
    console.print(PER_POSITION_LEGEND)
    console.print(f"  -> {nz.reading}")
    sh = d.shift
    console.print("\n[bold]Shift-equivariance and smoothness[/bold]")
    console.print(
        f"  R^2 = {fmt(sh.r2, 3)}; mean d_H of neighbours {sh.neighbour_mean:.3f} vs all "
        f"pairs {sh.all_mean:.3f} (ratio {fmt(sh.smoothness, 3)})"
    )
    console.print(f"  -> {sh.reading}")
    rk = d.rank
    t = Table(title="MDS spectrum (Remark 8)", title_justify="left")
    for col in ("rank", "eigenvalue", SPECTRUM_STRESS, "interval"):
        t.add_column(col, justify="right")
    ivs = d.uncertainty.stress_by_rank
    for r, row in enumerate(spectrum_rows(rk.spectrum), 1):
        lo, hi = ivs[r - 1] if r <= len(ivs) else (math.nan, math.nan)
        t.add_row(*row, ci_text(lo, hi))
    console.print()
    console.print(t)
    console.print(f"  {spectrum_line(rk.spectrum, ' at ')}")
    console.print(f"  -> {rk.reading}")
    es = d.encodings
    console.print()
    print_fitted(
        "Stress, best first",
        [
            Column("encoding", [e.label for e in es]),
            Column("parameters", [params(e.params) for e in es], prose=True),
            Column("stress", [fmt(e.stress) for e in es], "right"),
            Column("interval", [ci_text(e.ci_low, e.ci_high) for e in es], "right", 60),
            Column("params", [f"{e.n_params:,}" for e in es], "right", 40),
        ],
        console,
        "  ",
    )
    u = d.uncertainty
    how = f"intervals: {u.describe()}, centred on the full-data estimate" if u.shards else u.note
    console.print(f"  {how}")
    console.print(f"\n[bold]Recommendation:[/bold] {d.recommendation.text}")
