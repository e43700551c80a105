"""One self-contained HTML page per corpus (``posdiag report``): summary, stress table,
spectrum, diagnostics and plots.

Self-contained means attachable to a pull request and readable offline: the CSS is inline, the
plots are inline base64 PNGs, and the page references no URL (no scripts, fonts or images from a
network). Without matplotlib the page is written without plots and says so.
"""

from __future__ import annotations

import base64
import importlib.util
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .._io import atomic_outputs
from ..analysis import (
    DEFAULT_MIN_COUNT,
    CorpusGeometry,
    StressReport,
    corpus_geometry,
    geometry_report,
)
from ..counts import Counts
from ..geometry import positional_information, significant_negative
from ._format import SHOWN_RANKS, fmt, params, summary_rows

__all__ = ["HtmlReport", "build_report", "render_html", "write_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #111; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; }
th { background: #eee; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #ddd; }
figcaption, .note { color: #555; font-size: 0.9em; }
"""


@dataclass(frozen=True)
class HtmlReport:
    """A rendered page and what it holds.

    ``plots`` names the inline plots; ``plots_omitted`` says why there are none, if so.
    """

    html: str
    plots: tuple[str, ...]
    plots_omitted: str | None = None


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], cls: str, numeric: Sequence[bool]
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{escape(str(v))}</td>' if num else f"<td>{escape(str(v))}</td>"
            for v, num in zip(row, numeric, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def render_html(
    report: StressReport,
    *,
    positional_info: float | None = None,
    plots: Mapping[str, bytes] | None = None,
    plots_omitted: str | None = None,
    diagnostics: Mapping[str, str] | None = None,
) -> str:
    """The page for a stress report.

    Parameters
    ----------
    plots : mapping of str to bytes, optional
        Caption -> PNG bytes, embedded inline in this order.
    diagnostics : mapping of str to str, optional
        Extra rows for the diagnostics table (e.g. noise floor, shift-equivariance).
    """
    c = report.corpus
    sp = report.spectrum
    summary = _table(
        ("corpus", "value"),
        summary_rows(c),
        "summary",
        (False, False),
    )
    has_ci = any(
        math.isfinite(float(getattr(e, "ci_high", float("nan")))) for e in report.encodings
    )
    headers = ["encoding", "parameters", "stress"]
    if has_ci:
        headers.append("interval")
    headers += ["raw", "kruskal", "spearman", "params"]
    rows = []
    for e in report.encodings:
        row: list[Any] = [e.label, params(e.params), fmt(e.stress)]
        if has_ci:
            lo = float(getattr(e, "ci_low", float("nan")))
            hi = float(getattr(e, "ci_high", float("nan")))
            row.append(f"[{fmt(lo)}, {fmt(hi)}]")
        row += [fmt(e.raw, 3), fmt(e.kruskal), fmt(e.spearman, 3), f"{e.n_params:,}"]
        rows.append(row)
    numeric = [h not in ("encoding", "parameters") for h in headers]
    stress_table = _table(headers, rows, "stress", numeric)
    spec_rows = [
        (str(r), f"{sp.eigenvalues[r - 1]:.4g}", fmt(sp.stress_by_rank[r - 1]))
        for r in range(1, min(SHOWN_RANKS, len(sp.stress_by_rank)) + 1)
    ]
    spec_table = _table(
        ("rank", "eigenvalue", "stress of mds-r"), spec_rows, "spectrum", (True, True, True)
    )
    diag: list[tuple[str, str]] = []
    if positional_info is not None:
        diag.append(
            (
                "positional information I(position; token)",
                f"{positional_info:.4f} bits (positions 0..{c.n_eff - 1})",
            )
        )
    for eps, r in sp.effective_rank.items():
        diag.append((f"effective rank at stress <= {eps:g}", str(r)))
    neg = significant_negative(np.asarray(sp.eigenvalues))
    if neg is not None:
        diag.append(("most negative MDS eigenvalue (below -1e-10 l_1)", f"{neg:.3g}"))
    diag += list((diagnostics or {}).items())
    for w in report.warnings:
        diag.append(("warning", w))
    diag_table = _table(("diagnostic", "value"), diag, "diagnostics", (False, False))
    figs = []
    for caption, png in (plots or {}).items():
        data = base64.b64encode(png).decode("ascii")
        figs.append(
            f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    if not figs:
        figs.append(f'<p class="note">{escape(plots_omitted or "no plots")}</p>')
    title = f"posdiag report: {c.source}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title>",
            f"<style>{_CSS}</style></head><body>",
            f"<h1>{escape(title)}</h1>",
            f'<p class="note">{escape(c.tokenizer)} tokenizer, {escape(c.view)} view, '
            f"n = {c.max_len}, n_eff = {c.n_eff}, min_count = {c.min_count}. Stress: 0 = the "
            "encoding reproduces the corpus geometry, 1 = it carries none of it.</p>",
            "<h2>Summary</h2>",
            summary,
            "<h2>Stress per encoding (best first)</h2>",
            stress_table,
            "<h2>MDS spectrum</h2>",
            spec_table,
            "<h2>Diagnostics</h2>",
            diag_table,
            "<h2>Plots</h2>",
            *figs,
            f'<p class="note">posdiag {escape(__version__)}; theory: Cirrincione, "On the '
            'Geometry of Positional Encodings in Transformers", arXiv 2604.05217.</p>',
            "</body></html>",
            "",
        ]
    )


_CAPTIONS = {
    "stress.png": "Stress per encoding",
    "hellinger.png": "Hellinger distance between positions",
    "spectrum.png": "MDS spectrum and stress by rank",
    "trajectory_2d.png": "MDS trajectory of positions (2-D)",
    "trajectory_3d.png": "MDS trajectory of positions (3-D)",
    "support.png": "Per-position support",
}


def build_report(
    counts: Counts,
    encodings: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
    *,
    min_count: int = DEFAULT_MIN_COUNT,
    plots: bool = True,
    geometry: CorpusGeometry | None = None,
) -> HtmlReport:
    """Analyse ``counts`` and render its page (plots inline when matplotlib is installed)."""
    geo = geometry if geometry is not None else corpus_geometry(counts, min_count)
    report = geometry_report(geo, encodings)
    info, _ = positional_information(counts.matrix[: geo.n_eff])
    pngs: dict[str, bytes] = {}
    omitted = None
    if not plots:
        omitted = "plots were not requested (--no-plots)"
    elif importlib.util.find_spec("matplotlib") is None:
        omitted = "plots omitted: matplotlib is not installed (pip install 'posdiag[plot]')"
    else:
        from .plots import figures, png_bytes

        makers = figures(geo, report)
        order = [k for k in _CAPTIONS if k in makers]
        pngs = {_CAPTIONS[k]: png_bytes(makers[k]()) for k in order}
    page = render_html(report, positional_info=info, plots=pngs, plots_omitted=omitted)
    return HtmlReport(page, tuple(pngs), omitted)


def write_html(page: HtmlReport | str, path: str | Path, *, force: bool = False) -> Path:
    """Write the page atomically (UTF-8); an existing file needs ``force``."""
    text = page.html if isinstance(page, HtmlReport) else page
    with atomic_outputs([path], force) as (tmp,):
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
