"""``posdiag inspect`` as a rich table and JSON: an encoding table's figures next to a random
baseline, and its fit to a corpus."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..reports.inspection import Inspection, TableFigures
from ._format import corpus_json, fmt, jsonable

__all__ = ["inspection_json", "print_inspection"]


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
            "corpus": corpus_json(x.corpus) if x.corpus is not None else None,
            "fit": asdict(x.fit) if x.fit is not None else None,
            "from_file": dict(x.from_file),
            "warnings": list(x.warnings),
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
        r = x.fit.fitted_rank
        if r is None:
            t.add_row("stress vs corpus", fmt(x.fit.stress), fmt(x.fit.baseline_stress))
        else:
            # Built from this corpus: the fit is in-sample; the stress table shows held-out.
            t.add_row(
                f"in-sample stress (rank {r}, fitted to this corpus)",
                fmt(x.fit.stress),
                fmt(x.fit.baseline_stress),
            )
            if not math.isnan(x.fit.heldout):
                t.add_row(f"held-out stress (the stress table's mds-{r})", fmt(x.fit.heldout), "")
        t.add_row(
            "monotonicity violations (1-tau)/2",
            fmt(x.fit.violations),
            fmt(x.fit.baseline_violations),
        )
    console.print(t)
    if x.table.separation.collapsed:
        shown = ", ".join(f"({i},{j}) {d:.3g}" for i, j, d in x.table.separation.collapsed[:20])
        console.print(f"collapsed pairs: {shown}")
    if x.fit is not None and x.corpus is not None:
        c = x.corpus
        console.print(
            escape(
                f"compared on positions 0..{x.fit.n - 1} of {c.source} (n_eff {c.n_eff}; "
                f"{c.tokenizer} / {c.view}, n={c.max_len}, min_count={c.min_count})"
            )
        )
        if x.from_file:
            told = ", ".join(f"{k}={v}" for k, v in x.from_file.items())
            console.print(escape(f"read as the encoding file was built: {told}"))
