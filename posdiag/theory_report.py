"""Tables (rich) and JSON documents of ``posdiag diagnose``, ``posdiag inspect`` and
``posdiag synth``."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .diagnostics import Diagnosis, Uncertainty
from .inspect import Inspection, TableFigures
from .report import _fmt, _params, jsonable, print_summary, ranges, spectrum_line

__all__ = [
    "diagnosis_json",
    "inspection_json",
    "print_diagnosis",
    "print_inspection",
    "uncertainty_json",
    "ci_text",
]

SHOWN_RANKS = 10


def ci_text(lo: float, hi: float) -> str:
    """``[lo, hi]`` or ``n/a`` when no interval was computed."""
    return "n/a" if math.isnan(lo) else f"[{lo:.4f}, {hi:.4f}]"


def uncertainty_json(u: Uncertainty) -> dict[str, Any]:
    return jsonable(asdict(u))


def diagnosis_json(d: Diagnosis) -> dict[str, Any]:
    """The ``--json`` document of ``posdiag diagnose``."""
    sp = d.rank.spectrum
    rank = asdict(d.rank)
    rank["spectrum"] = {
        "eigenvalues": sp.eigenvalues,
        "stress_by_rank": sp.stress_by_rank,
        "stress_by_rank_ci": d.uncertainty.stress_by_rank,
        "effective_rank": sp.effective_rank,
        "min_eigenvalue": sp.min_eigenvalue,
        "floor": sp.floor,
        "signal_rank": sp.signal_rank,
        "negative": sp.negative,
        "estimator": sp.estimator,
    }
    return jsonable(
        {
            "corpus": asdict(d.corpus),
            "information": asdict(d.information),
            "noise": asdict(d.noise),
            "shift": asdict(d.shift),
            "rank": rank,
            "encodings": [asdict(e) for e in d.encodings],
            "recommendation": asdict(d.recommendation),
            "uncertainty": uncertainty_json(d.uncertainty),
            "warnings": d.warnings,
        }
    )


def _uncertainty_line(u: Uncertainty) -> str:
    if u.shards == 0:
        return u.note
    return (
        f"intervals: {u.level:.0%} shard bootstrap ({u.shards} shards, {u.replicates} "
        f"replicates, seed {u.seed}), centred on the full-data estimate"
    )


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
        f"({nz.fraction:.1%}); noise share of the geometry ~{nz.noise_share:.0%}"
    )
    if nz.pairs:
        shown = ", ".join(f"({i},{j})" for i, j in nz.pairs[:20])
        more = nz.n_indistinguishable - min(20, len(nz.pairs))
        console.print(f"  pairs: {shown}" + (f" ... (+{more})" if more > 0 else ""))
    if nz.unstable:
        console.print(f"  unstable positions ({len(nz.unstable)}): {ranges(nz.unstable)}")
    t = Table(title="Per position", title_justify="left")
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
    n = d.corpus.n_eff
    step = max(1, n // 16)
    for i in sorted(set(range(0, n, step)) | {n - 1}):
        t.add_row(
            str(i),
            f"{nz.supports[i]:,}",
            f"{info.per_position[i]:.3f}",
            f"{info.per_position_null[i]:.3f}",
            f"{nz.floor[i]:.3f}",
            f"{nz.position_share[i]:.0%}",
        )
    console.print(t)
    console.print(f"  -> {nz.reading}")
    sh = d.shift
    console.print("\n[bold]Shift-equivariance and smoothness[/bold]")
    console.print(
        f"  R^2 = {_fmt(sh.r2, 3)}; mean d_H of neighbours {sh.neighbour_mean:.3f} vs all "
        f"pairs {sh.all_mean:.3f} (ratio {_fmt(sh.smoothness, 3)})"
    )
    console.print(f"  -> {sh.reading}")
    rk = d.rank
    t = Table(title="MDS spectrum (Remark 8)", title_justify="left")
    for col in ("rank", "eigenvalue", "stress of mds-r", "interval"):
        t.add_column(col, justify="right")
    ivs = d.uncertainty.stress_by_rank
    for r in range(1, min(SHOWN_RANKS, len(rk.spectrum.stress_by_rank)) + 1):
        lo, hi = ivs[r - 1] if ivs else (math.nan, math.nan)
        t.add_row(
            str(r),
            f"{rk.spectrum.eigenvalues[r - 1]:.4g}",
            _fmt(rk.spectrum.stress_by_rank[r - 1]),
            ci_text(lo, hi),
        )
    console.print()
    console.print(t)
    console.print(f"  {spectrum_line(rk.spectrum, ' at ')}")
    console.print(f"  -> {rk.reading}")
    t = Table(title="Stress, best first", title_justify="left")
    t.add_column("encoding")
    t.add_column("parameters")
    for col in ("stress", "interval", "params"):
        t.add_column(col, justify="right")
    for e in d.encodings:
        t.add_row(
            e.name,
            _params(e.params),
            _fmt(e.stress),
            ci_text(e.ci_low, e.ci_high),
            f"{e.n_params:,}",
        )
    console.print()
    console.print(t)
    console.print(f"  {_uncertainty_line(d.uncertainty)}")
    console.print(f"\n[bold]Recommendation:[/bold] {d.recommendation.text}")


def _figures_json(f: TableFigures) -> dict[str, Any]:
    out = asdict(f)
    out["separation"]["collapsed"] = [list(p) for p in f.separation.collapsed]
    return out


def inspection_json(x: Inspection) -> dict[str, Any]:
    """The ``--json`` document of ``posdiag inspect``."""
    return jsonable(
        {
            "path": x.path,
            "tensor": x.tensor,
            "table": _figures_json(x.table),
            "baseline": {"seed": x.baseline_seed, **_figures_json(x.baseline)},
            "corpus": asdict(x.corpus) if x.corpus is not None else None,
            "fit": asdict(x.fit) if x.fit is not None else None,
        }
    )


def print_inspection(x: Inspection, console: Console) -> None:
    """Table figures next to the random baseline; the corpus fit when a corpus was given."""
    t = Table(
        # Escaped: '[tensor.name]' and paths with brackets are not rich markup.
        title=escape(
            f"{x.path}{f' [{x.tensor}]' if x.tensor else ''}: {x.table.rows} x {x.table.dim}"
        ),
        title_justify="left",
    )
    t.add_column("figure", style="bold")
    t.add_column("this table", justify="right")
    t.add_column(f"random N(0, 0.02^2), seed {x.baseline_seed}", justify="right")

    def both(label: str, fn: Any) -> None:
        t.add_row(label, fn(x.table), fn(x.baseline))

    both("min / median distance", lambda f: f"{f.separation.ratio:.4f}")
    both("min distance", lambda f: f"{f.separation.min_distance:.4g}")
    both("median distance", lambda f: f"{f.separation.median_distance:.4g}")
    both(
        f"collapsed pairs (<= {x.table.separation.tol:g} x median)",
        lambda f: str(len(f.separation.collapsed)),
    )
    both(
        "row norm min / mean / max",
        lambda f: f"{f.norm_min:.3g} / {f.norm_mean:.3g} / {f.norm_max:.3g}",
    )
    for eps in x.table.effective_rank:
        both(
            f"effective rank at stress {eps:g}",
            lambda f, e=eps: str(f.effective_rank.get(e, "n/a")),
        )
    if x.fit is not None:
        t.add_row("stress vs corpus", _fmt(x.fit.stress), _fmt(x.fit.baseline_stress))
        t.add_row(
            "monotonicity violations (1-tau)/2",
            _fmt(x.fit.violations),
            _fmt(x.fit.baseline_violations),
        )
    console.print(t)
    if x.table.separation.collapsed:
        shown = ", ".join(f"({i},{j}) {d:.3g}" for i, j, d in x.table.separation.collapsed[:20])
        console.print(f"collapsed pairs: {shown}")
    if x.fit is not None and x.corpus is not None:
        console.print(
            f"compared on positions 0..{x.fit.n - 1} of {x.corpus.source} "
            f"(n_eff {x.corpus.n_eff}, view {x.corpus.view})"
        )
