"""posdiag report: one self-contained HTML page."""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from posdiag.counts.corpus import corpus_counts
from posdiag.geometry.core import positional_information
from posdiag.render.html import build_report
from posdiag.reports.diagnosis import diagnose
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from tests.render.test_plots import PIXELS, png_size


def _stress_rows(page: str) -> list[list[str]]:
    table = re.search(r'<table class="stress">(.*?)</table>', page, re.S)
    assert table is not None
    return [
        re.findall(r"<td[^>]*>(.*?)</td>", row)
        for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))
        if "<td" in row
    ]


def test_report_has_the_stress_table_and_no_external_url(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    res = cli(["report", str(synth_corpus), "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    page = out.read_text(encoding="utf-8")
    # Counted with the shards every command counts (same seed): the same cross-fitted geometry.
    expected = stress_report(corpus_counts(str(synth_corpus), shards=20, shard_seed=0)).encodings
    rows = _stress_rows(page)
    assert [(r[0], r[2]) for r in rows] == [(e.name, f"{e.stress:.4f}") for e in expected]
    # Self-contained: no URL of any scheme, no scripts, stylesheets or frames.
    assert re.search(r"[a-z][a-z0-9+.-]*://", page, re.I) is None
    assert re.search(r"<(script|link|iframe|object|embed)\b", page, re.I) is None
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 6
    for src in sources:
        assert src.startswith("data:image/png;base64,")
        assert png_size(base64.b64decode(src.split(",", 1)[1])) == PIXELS
    assert "6 plots" in res.stdout


def test_report_diagnostics_and_plots_off(synth_corpus: Path, tmp_path: Path) -> None:
    counts = corpus_counts(str(synth_corpus))
    page = build_report(diagnose(counts, ["rope", "nope"], details=False), plots=False)
    assert page.plots == () and "plots were not requested" in page.html
    assert "<img" not in page.html
    bits, _ = positional_information(counts.matrix[:12])
    assert f"{bits:.4f} bits (positions 0..11)" in page.html
    assert [r[0] for r in _stress_rows(page.html)] == ["rope", "nope"]


def test_report_without_matplotlib_says_so(
    synth_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    page = build_report(diagnose(corpus_counts(str(synth_corpus)), ["rope"], details=False))
    assert page.plots == ()
    assert "plots omitted: matplotlib is not installed" in page.html


def test_report_escapes_text(tmp_path: Path) -> None:
    corpus = tmp_path / "a<b>&.txt"
    # 120 distinct lines: copies would count once towards min_count (docs/geometry.md 2b).
    corpus.write_text("".join(f"x{i % 7} y{i % 11} z{i % 13} w{i % 5}\n" for i in range(120)))
    d = diagnose(corpus_counts(str(corpus)), ["rope"], Analysis(min_count=50), details=False)
    page = build_report(d, plots=False)
    assert "a&lt;b&gt;&amp;.txt" in page.html and "a<b>" not in page.html


def test_report_refuses_to_overwrite(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    out.write_text("keep")
    res = cli(["report", str(synth_corpus), "-o", str(out), "--no-plots"])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"Error: {out}: already exists; pass --force to overwrite"
    assert out.read_text() == "keep"
    res = cli(["report", str(synth_corpus), "-o", str(out), "--no-plots", "-f"])
    assert res.exit_code == 0 and out.read_text().startswith("<!DOCTYPE html>")


def test_stress_table_shows_intervals_when_scores_have_them(synth_corpus: Path) -> None:
    from dataclasses import replace

    from posdiag.render.html import render_html

    report = stress_report(corpus_counts(str(synth_corpus)), ["rope", "nope"])
    assert "<th>interval</th>" not in render_html(report)
    rope = report.encodings[0]
    with_ci = replace(rope, ci_low=0.25, ci_high=0.5)
    page = render_html(replace(report, encodings=(with_ci, *report.encodings[1:])))
    rows = _stress_rows(page)
    assert "<th>interval</th>" in page
    assert rows[0][3] == "[0.2500, 0.5000]" and rows[1][3] == "[n/a, n/a]"


def test_stress_table_columns_are_explained_and_intervals_do_not_wrap(synth_corpus: Path) -> None:
    """Issue 34, item 13: raw (e.g. alibi 26731.236), kruskal and spearman are explained under
    the table, and an interval cell stays on one line."""
    from dataclasses import replace

    from posdiag.render.html import render_html

    report = stress_report(corpus_counts(str(synth_corpus)), ["alibi", "rope", "nope"])
    alibi = replace(report.encodings[0], ci_low=0.25, ci_high=0.5)
    page = render_html(replace(report, encodings=(alibi, *report.encodings[1:])))
    headers = re.findall(r"<th>(.*?)</th>", page.split('<table class="stress">')[1])[:8]
    assert headers == [
        "encoding",
        "parameters",
        "stress",
        "interval",
        "raw",
        "kruskal",
        "spearman",
        "params",
    ]
    legend = re.search(r'<p class="note legend">(.*?)</p>', page)
    assert legend is not None
    assert legend.group(1) == (
        "raw: ||B_H - B_E||_F / ||B_H||_F with no fit of the encoding&#x27;s scale, so it "
        "follows the encoding&#x27;s absolute size and can far exceed 1 (the paper&#x27;s "
        "figures are of this kind); stress is the same with the best scale; kruskal: Kruskal "
        "stress-1 of the distances; spearman: rank correlation of the distances (one value for "
        "every encoding whose distance only grows with |i-j|: they order the pairs alike; n/a "
        "where an encoding&#x27;s distances are all equal, as nope&#x27;s); params: trained "
        "parameters (0: a fixed formula; mds-r: r x (n_eff + d), the factors A and B of P = A "
        "B^T; every family&#x27;s count: posdiag encodings)"
    )
    # Every interval cell is a numeric cell, and numeric cells never wrap.
    assert '<td class="num">[0.2500, 0.5000]</td>' in page
    css = re.search(r"td\.num \{([^}]*)\}", page)
    assert css is not None and "white-space: nowrap" in css.group(1)
