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

from .. import __version__
from .._util.atomic import atomic_outputs
from ..reports.analysis import Spectrum, rank_text
from ..reports.diagnosis import Diagnosis
from ..reports.stress import StressReport
from ._format import effective_ranks, fmt, params, spectrum_rows, summary_rows
from .stress import COLUMNS_LEGEND, RAW_LEGEND

__all__ = ["HtmlReport", "build_report", "render_html", "write_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #111; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; }
th { background: #eee; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
ul.warnings li { color: #8a4b00; } p.recommendation { font-weight: 600; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #ddd; }
figcaption, .note { color: #555; font-size: 0.9em; }
"""


@dataclass(frozen=True)
class HtmlReport:
    """A rendered page; ``plots`` names its inline plots, ``plots_omitted`` says why none."""

    html: str
    plots: tuple[str, ...]
    plots_omitted: str | None = None
    warnings: tuple[str, ...] = ()


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
    recommendation: str | None = None,
) -> str:
    """The page for a stress report; every warning first, as the terminal prints them.

    Parameters
    ----------
    plots : mapping of str to bytes, optional
        Caption -> PNG bytes, embedded inline in this order.
    diagnostics : mapping of str to str, optional
        Extra rows for the diagnostics table (e.g. noise floor, shift-equivariance).
    recommendation : str, optional
        The recommendation with its reason, shown first.
    """
    c = report.corpus
    # The interval note the terminal prints under the stress table (the unstable positions are
    # one of the report's warnings, as in the JSON).
    unc = report.uncertainty
    no_intervals = [_interval_note(report)] if unc is not None and not unc.shards else []
    cautions = [*report.warnings, *no_intervals]
    warn_html = (
        '<ul class="warnings">' + "".join(f"<li>{escape(w)}</li>" for w in cautions) + "</ul>"
        if cautions
        else '<p class="note">none</p>'
    )
    rec_html = (
        ["<h2>Recommendation</h2>", f'<p class="recommendation">{escape(recommendation)}</p>']
        if recommendation
        else []
    )
    figs = [
        f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode("ascii")}"><figcaption>{escape(caption)}</figcaption>'
        "</figure>"
        for caption, png in (plots or {}).items()
    ] or [f'<p class="note">{escape(plots_omitted or "no plots")}</p>']
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
            *rec_html,
            "<h2>Warnings</h2>",
            warn_html,
            "<h2>Summary</h2>",
            _table(("corpus", "value"), summary_rows(c), "summary", (False, False)),
            "<h2>Stress per encoding (best first)</h2>",
            _stress_table(report),
            f'<p class="note legend">{escape(f"{RAW_LEGEND}; {COLUMNS_LEGEND}")}</p>',
            f'<p class="note">{escape(_interval_note(report))}</p>',
            *_spectrum_html(report.spectrum),
            "<h2>Diagnostics</h2>",
            _diagnostics_table(report, positional_info, diagnostics),
            "<h2>Plots</h2>",
            *figs,
            f'<p class="note">posdiag {escape(__version__)}; theory: Cirrincione, "On the '
            'Geometry of Positional Encodings in Transformers", arXiv 2604.05217.</p>',
            "</body></html>",
            "",
        ]
    )


def _stress_table(report: StressReport) -> str:
    """The stress table, with an interval column when any score has one."""
    has_ci = any(math.isfinite(e.ci_high) for e in report.encodings)
    headers = ["encoding", "parameters", "stress"]
    if has_ci:
        headers.append("interval")
    headers += ["raw", "kruskal", "spearman", "params"]
    rows = []
    for e in report.encodings:
        row: list[Any] = [e.label, params(e.params), fmt(e.stress)]
        if has_ci:
            row.append(f"[{fmt(e.ci_low)}, {fmt(e.ci_high)}]")
        row += [fmt(e.raw, 3), fmt(e.kruskal), fmt(e.spearman, 3), f"{e.n_params:,}"]
        rows.append(row)
    numeric = [h not in ("encoding", "parameters") for h in headers]
    return _table(headers, rows, "stress", numeric)


def _spectrum_html(sp: Spectrum) -> list[str]:
    """The spectrum's heading, its first ranks and the effective ranks."""
    headers = ("rank", "eigenvalue", "in-sample stress")
    return [
        "<h2>MDS spectrum</h2>",
        _table(headers, spectrum_rows(sp), "spectrum", (True, True, True)),
        f'<p class="effective-rank">effective rank: {escape(effective_ranks(sp))}</p>',
    ]


def _diagnostics_table(
    report: StressReport, positional_info: float | None, extra: Mapping[str, str] | None
) -> str:
    sp = report.spectrum
    diag: list[tuple[str, str]] = []
    if positional_info is not None:
        bits = f"{positional_info:.4f} bits (positions 0..{report.corpus.n_eff - 1})"
        diag.append(("positional information I(position; token)", bits))
    diag.append(("geometry estimator", sp.estimator))
    for eps, r in sp.effective_rank.items():
        diag.append((f"effective rank at stress <= {eps:g}", rank_text(r, sp.floor, sp.computed)))
    if sp.negative:
        diag.append(("negative eigenvalues", sp.negative))
    diag += list((extra or {}).items())
    return _table(("diagnostic", "value"), diag, "diagnostics", (False, False))


def _interval_note(report: StressReport) -> str:
    unc = report.uncertainty
    if unc is None:
        return "no intervals were computed"
    return unc.note or f"intervals: {unc.describe()}"


_CAPTIONS = {
    "stress.png": "Stress per encoding",
    "hellinger.png": "Hellinger distance between positions",
    "spectrum.png": "MDS spectrum and stress by rank",
    "trajectory_2d.png": "MDS trajectory of positions (2-D)",
    "trajectory_3d.png": "MDS trajectory of positions (3-D)",
    "support.png": "Per-position support",
}


def build_report(d: Diagnosis, *, plots: bool = True) -> HtmlReport:
    """The page of a diagnosis, saying what ``posdiag diagnose`` says (plots inline when
    matplotlib is installed); its ``warnings`` repeat the diagnosis's for the terminal."""
    geo = d.geometry
    report = StressReport(d.corpus, d.rank.spectrum, d.encodings, d.warnings, d.uncertainty, geo)
    pngs: dict[str, bytes] = {}
    omitted = None
    if not plots:
        omitted = "plots were not requested (--no-plots)"
    elif geo is None:
        omitted = (
            f"plots omitted: at n_eff = {d.corpus.n_eff:,} they need the n x n geometry, which "
            "the long-context path does not build (docs/geometry.md, 'Long contexts')"
        )
    elif importlib.util.find_spec("matplotlib") is None:
        omitted = "plots omitted: matplotlib is not installed (pip install 'posdiag[plot]')"
    else:
        from .plots import figures, png_bytes

        makers = figures(geo, report)
        pngs = {_CAPTIONS[k]: png_bytes(makers[k]()) for k in _CAPTIONS if k in makers}
    readings = {
        "information": d.information.reading,
        "noise": d.noise.reading,
        "shift-equivariance": d.shift.reading,
        "rank": d.rank.reading,
    }
    page = render_html(
        report,
        positional_info=d.information.bits,
        plots=pngs,
        plots_omitted=omitted,
        diagnostics=readings,
        recommendation=d.recommendation.text,
    )
    return HtmlReport(page, tuple(pngs), omitted, d.warnings)


def write_html(page: HtmlReport, path: str | Path, *, force: bool = False) -> Path:
    """Write the page atomically (UTF-8); an existing file needs ``force``."""
    with atomic_outputs([path], force) as (tmp,):
        tmp.write_text(page.html, encoding="utf-8")
    return Path(path)
