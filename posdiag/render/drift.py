"""``posdiag diff`` as rich tables and JSON: cross-stress, per-position drift, ranking changes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..reports.drift import Drift
from ._format import jsonable

__all__ = ["drift_json", "print_drift"]


def drift_json(drift: Drift) -> dict[str, Any]:
    """The ``--json`` document of ``posdiag diff``."""
    d = np.asarray(drift.position_hellinger)
    return jsonable(
        {
            "a": asdict(drift.a),
            "b": asdict(drift.b),
            "n": drift.n,
            "tolerance": drift.tolerance,
            "rank_a": drift.rank_a,
            "rank_b": drift.rank_b,
            "rank_given": drift.rank_given,
            "rank_reached_a": drift.rank_reached_a,
            "rank_reached_b": drift.rank_reached_b,
            "floor_a": drift.floor_a,
            "floor_b": drift.floor_b,
            "a_on_b": drift.a_on_b,
            "b_optimum": drift.b_optimum,
            "b_on_a": drift.b_on_a,
            "a_optimum": drift.a_optimum,
            "geometry_stress": drift.geometry_stress,
            "geometry_reference": drift.geometry_reference,
            "geometry_reference_mean": drift.reference_mean,
            "geometry_reference_sd": drift.reference_sd,
            "drift_threshold": drift.drift_threshold,
            "drifted": drift.drifted,
            "verdict": drift.verdict,
            "position_hellinger": drift.position_hellinger,
            "position_hellinger_mean": float(d.mean()),
            "position_hellinger_max": float(d.max()),
            "position_reference": drift.position_reference,
            "position_reference_mean": float(np.mean(drift.position_reference)),
            "above_reference": drift.above_reference,
            "seed": drift.seed,
            "rankings": [{**asdict(r), "changed": r.changed} for r in drift.rankings],
            "changed": [r.name for r in drift.changed],
            "warnings": drift.warnings,
        }
    )


def _num(x: float) -> str:
    """Four decimals, and never "-0.0000": a rounding residue below 5e-5 reads as 0."""
    return f"{round(x, 4) + 0.0:.4f}"


def _rank_note(drift: Drift) -> str:
    """How the cross-stress ranks were chosen, saying where the tolerance is not reached."""
    tol = f"stress <= {drift.tolerance:g}"
    parts = [
        f"{side} {r} ({tol})"
        if ok
        else f"{side} {r} (signal rank: {tol} not reached, floor {fl:.3f})"
        for side, r, ok, fl in (
            ("A", drift.rank_a, drift.rank_reached_a, drift.floor_a),
            ("B", drift.rank_b, drift.rank_reached_b, drift.floor_b),
        )
    ]
    return "ranks " + ", ".join(parts)


def verdict_line(drift: Drift) -> str:
    """The verdict with its numbers: the geometry stress against its no-drift reference."""
    ref = drift.geometry_reference
    return (
        f"verdict: {drift.verdict}: geometry stress {_num(drift.geometry_stress)} vs "
        f"{_num(drift.reference_mean)} ± {_num(drift.reference_sd)} (mean ± sd of {len(ref)} "
        f"random re-splits of A+B into A's and B's sizes, seed {drift.seed}; max "
        f"{_num(max(ref))}); drift needs more than {_num(drift.drift_threshold)} "
        "(every re-split and mean + 3 sd)"
    )


def print_drift(drift: Drift, console: Console) -> None:
    """Human tables of a :class:`Drift` on a rich console."""
    a, b = drift.a, drift.b
    t = Table(title="Corpora", title_justify="left")
    for col in ("", "source", "sequences", "n_eff"):
        t.add_column(col)
    t.add_row("A", escape(a.source), f"{a.sequences:,}", str(a.n_eff))
    t.add_row("B", escape(b.source), f"{b.sequences:,}", str(b.n_eff))
    console.print(t)
    console.print(
        f"tokenizer / view / max_len: {a.tokenizer} / {a.view} / {a.max_len}; "
        f"compared on the common positions 0..{drift.n - 1} (n = min(n_eff A, n_eff B) = "
        f"{drift.n}); min_count {a.min_count}"
    )
    t = Table(
        title="Cross-stress (0 = the other corpus's geometry reproduced)", title_justify="left"
    )
    for col in ("encoding", "on", "rank", "stress", "optimum at rank", "excess"):
        t.add_column(col, justify="right" if col not in ("encoding", "on") else "left")
    for name, on, rank, cross, optimum in (
        ("MDS of A", "B", drift.rank_a, drift.a_on_b, drift.b_optimum),
        ("MDS of B", "A", drift.rank_b, drift.b_on_a, drift.a_optimum),
    ):
        t.add_row(name, on, str(rank), f"{cross:.4f}", f"{optimum:.4f}", _num(cross - optimum))
    console.print(t)
    d = np.asarray(drift.position_hellinger)
    worst = int(np.argmax(d))
    console.print(
        f"geometry stress (B_H of A vs B_H of B, symmetric): {_num(drift.geometry_stress)}; "
        + (f"ranks given by --rank ({drift.rank_a})" if drift.rank_given else _rank_note(drift))
    )
    if drift.geometry_reference:
        console.print(verdict_line(drift), style="bold")
    ref = np.asarray(drift.position_reference)
    console.print(
        f"per-position Hellinger distance A vs B: mean {d.mean():.4f}, max {d[worst]:.4f} at "
        f"position {worst}; without any drift (random re-splits of A+B, seed {drift.seed}) "
        f"expect mean {ref.mean():.4f}: {len(drift.above_reference)} of {drift.n} positions "
        "above that reference"
    )
    t = Table(title="Stress per encoding on the common positions", title_justify="left")
    for col in ("encoding", "stress A", "stress B", "rank A", "rank B", ""):
        t.add_column(col, justify="left" if col == "encoding" else "right")
    for r in drift.rankings:
        t.add_row(
            r.name,
            f"{r.stress_a:.4f}",
            f"{r.stress_b:.4f}",
            str(r.rank_a),
            str(r.rank_b),
            "changed" if r.changed else "",
        )
    console.print(t)
    changed = ", ".join(f"{r.name} {r.rank_a}->{r.rank_b}" for r in drift.changed) or "none"
    console.print(f"ranking changes: {changed}")
