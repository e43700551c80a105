"""The HTML report and the plots say what the terminal says: intervals (--shards), the
recommendation with its reason, the spectrum with its effective ranks, every warning; the
spectrum chart covers the ranks its legend cites, each encoding family keeps one colour, and the
support plot shows the real-token share in the model view."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.counts.corpus import corpus_counts
from posdiag.render.plots import FAMILY_COLOURS, plot_spectrum, plot_stress, plot_support
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report

runner = CliRunner()
BUNDLED = Path(__file__).resolve().parents[2] / "fixtures" / "corpus_en.txt"


def test_report_carries_what_diagnose_says(small_corpus: Path, tmp_path: Path) -> None:
    common = ["--shards", "6", "--replicates", "30", "--min-count", "50", "--seed", "3"]
    diag = runner.invoke(app, ["diagnose", str(small_corpus), *common, "--json"])
    assert diag.exit_code == 0, diag.output
    d = json.loads(diag.stdout)
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(small_corpus), "-o", str(out), *common, "--no-plots"])
    assert r.exit_code == 0, r.output
    page = html.unescape(out.read_text())
    # The recommendation with its reason, word for word.
    assert d["recommendation"]["text"] in page
    # Intervals on every row (before: report took no --shards and showed none).
    assert "<th>interval</th>" in page
    for e in d["encodings"]:
        assert f"[{e['ci_low']:.4f}, {e['ci_high']:.4f}]" in page
    # The spectrum with its effective ranks ("not reached" below the cross-fit's floor).
    spec = d["rank"]["spectrum"]

    def shown(r: int | None) -> str:
        return str(r) if r is not None else f"not reached (floor {spec['floor']:.3f})"

    eff = ", ".join(
        f"{shown(r)} at stress <= {float(k):g}" for k, r in spec["effective_rank"].items()
    )
    assert f"effective rank: {eff}" in page
    # Every warning the terminal shows, and the unstable positions.
    for w in d["warnings"]:
        assert w in page
    unstable = d["uncertainty"]["unstable"]
    if unstable:
        assert f"{len(unstable)} of {d['corpus']['n_eff']} positions are unstable" in page


def test_report_lists_padding_warnings(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    args = ["report", str(BUNDLED), "-o", str(out), "--view", "model", "-n", "96"]
    r = runner.invoke(app, [*args, "--shards", "0", "--no-plots", "--json"])
    assert r.exit_code == 0, r.output
    warnings = json.loads(r.stdout)["warnings"]
    assert any("padding" in w for w in warnings)
    page = html.unescape(out.read_text())
    section = page.split("<h2>Warnings</h2>")[1].split("<h2>")[0]
    for w in warnings:
        assert w in section and w in r.stderr
    assert "no intervals: --shards 0 was given" in section


def test_spectrum_chart_covers_the_ranks_its_legend_cites() -> None:
    # The plug-in geometry of the bundled corpus needs ranks 68 and 73 (issue 12's chart).
    geo = corpus_geometry(corpus_counts(str(BUNDLED)), estimator="plugin")
    fig = plot_spectrum(geo)
    right = fig.axes[1]
    texts = [t.get_text() for t in right.get_legend().get_texts()]
    cited = [int(x.rsplit(" ", 1)[1]) for x in texts if x.rsplit(" ", 1)[1].isdigit()]
    assert max(cited) > 40  # the old chart stopped at rank 40
    assert right.get_xlim()[1] >= max(cited)
    (line,) = [ln for ln in right.get_lines() if len(ln.get_xdata()) > 2]
    assert max(line.get_xdata()) >= max(cited)


def test_each_family_keeps_its_colour(small_corpus: Path) -> None:
    from matplotlib.colors import to_hex

    counts = corpus_counts(str(small_corpus))

    def colours(specs: list[str]) -> dict[str, str]:
        report = stress_report(counts, specs, analysis=Analysis(min_count=50))
        ax = plot_stress(report).axes[0]
        labels = [t.get_text() for t in ax.get_yticklabels()]
        return {lab: to_hex(p.get_facecolor()) for lab, p in zip(labels, ax.patches, strict=False)}

    a = colours(["rope", "sinusoidal", "alibi", "mds-2"])
    b = colours(["alibi", "mds-2", "sinusoidal", "rope"])
    assert a == b  # before: colours followed the order of appearance
    assert a["rope"] == FAMILY_COLOURS["relative: rotary"].lower()
    assert a["sinusoidal"] == FAMILY_COLOURS["absolute"].lower()
    assert a["alibi"] == FAMILY_COLOURS["relative: attention bias"].lower()
    assert a["mds-2"] == FAMILY_COLOURS["optimal: MDS"].lower()


def test_support_plot_shows_real_tokens_in_the_model_view() -> None:
    counts = corpus_counts(str(BUNDLED), view_name="model", max_len=96)
    geo = corpus_geometry(counts)
    fig = plot_support(geo.summary)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    real = lines["real (non-pad) tokens"]
    want = counts.real_supports.astype(float)
    got = np.asarray(real.get_ydata(), dtype=float)
    assert np.allclose(np.nan_to_num(got), np.where(want > 0, want, 0.0))
    # The flat N_i of the model view is still drawn, and the share has its own axis.
    assert np.allclose(np.asarray(lines["N_i"].get_ydata(), dtype=float), 5780.0)
    assert len(fig.axes) == 2
    share = fig.axes[1].get_lines()[0].get_ydata()
    assert np.allclose(share, 100.0 * want / 5780.0)


@pytest.mark.parametrize("shards", ["0", "4"])
def test_plot_draws_intervals_with_shards(
    small_corpus: Path, tmp_path: Path, shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import math

    import posdiag.render.plots as plots

    seen = []
    real_plot = plots.plot_stress

    def spy(report):  # type: ignore[no-untyped-def]
        seen.append(report)
        return real_plot(report)

    monkeypatch.setattr(plots, "plot_stress", spy)
    out = tmp_path / f"p{shards}"
    r = runner.invoke(
        app,
        ["plot", str(small_corpus), "-o", str(out), "--shards", shards, "--replicates", "20"],
    )
    assert r.exit_code == 0, r.output
    assert (out / "stress.png").stat().st_size > 0
    (report,) = seen
    finite = [not math.isnan(e.ci_low) for e in report.encodings]
    # Before: plot took no --shards and the stress chart never had intervals.
    assert all(finite) if shards == "4" else not any(finite)


@pytest.mark.parametrize(
    ("reading", "expected"),
    [
        (
            [],
            "11 of 76 positions are unstable (mostly sampling noise): 36, 38, 41-42, 44-45, 48, "
            "50, 52, 61, 66 (support 200-1,190); only more data reaching these positions "
            "narrows it",
        ),
        (
            ["--view", "model", "-n", "128"],
            f"{BUNDLED}: positions 62-77 are analysed but over 95% "
            "padding, so the pad token shapes their geometry; use --max-len 62 or a higher "
            "--min-count to analyse real tokens only",
        ),
    ],
)
def test_json_warnings_are_what_the_terminal_and_the_html_warn(
    reading: list[str], expected: str, tmp_path: Path
) -> None:
    """Issue 34 item 4: stress, diagnose and report give the same warnings on the terminal
    (Warning: lines), in --json and in the HTML's Warnings list; the unstable positions too."""
    args = [str(BUNDLED), "--shards", "0", *reading]
    seen = []
    # No plots: they carry no warning, and drawing them doubled each report run's time.
    report = ["report", "-o", str(tmp_path / "r.html"), "--force", "--no-plots"]
    for cmd in (["stress"], ["diagnose"], report):
        res = runner.invoke(app, [*cmd, *args, "--json"])
        assert res.exit_code == 0, res.stderr
        warned = json.loads(res.stdout)["warnings"]
        assert expected in warned
        assert res.stderr == "".join(f"Warning: {w}\n" for w in warned)
        text = runner.invoke(app, [*cmd, *args])
        assert text.stderr == res.stderr
        seen.append(warned)
    assert seen[0] == seen[1] == seen[2]
    # check: the geometry's warnings too (it judges no position's stability).
    rules = ["--no-config", "-e", "alibi", "--max-stress", "1"]
    res = runner.invoke(app, ["check", *args, *rules, "--json"])
    geometric = [w for w in seen[0] if "unstable" not in w]
    assert json.loads(res.stdout)["warnings"] == geometric
    assert res.stderr == "".join(f"Warning: {w}\n" for w in geometric)
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    listed = page.split('<ul class="warnings">')[1].split("</ul>")[0]
    items = [html.unescape(li.split("</li>")[0]) for li in listed.split("<li>")[1:]]
    assert items[: len(seen[0])] == seen[0]


@pytest.mark.parametrize("shards", ["20", "0"])
def test_unstable_warning_gives_their_support_and_what_narrows_it(shards: str) -> None:
    """The warning names the unstable positions' support as --min-count counts it (sampling
    units, from the JSON's own tally: copies do not count) and says the intervals carry their
    noise only when there are any."""
    res = runner.invoke(app, ["stress", str(BUNDLED), "--shards", shards, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    unstable = doc["uncertainty"]["unstable"]
    assert len(unstable) >= 2
    units = np.minimum(doc["corpus"]["supports"], doc["corpus"]["units"]["unit_supports"])
    lo, hi = int(units[unstable].min()), int(units[unstable].max())
    assert lo < hi
    (warning,) = [w for w in doc["warnings"] if "unstable" in w]
    intervals = "the intervals include this noise, and " if shards != "0" else ""
    assert warning.endswith(
        f" (support {lo:,}-{hi:,}); {intervals}only more data reaching these positions narrows it"
    )
    assert doc["uncertainty"]["replicates"] == (0 if shards == "0" else 200)
