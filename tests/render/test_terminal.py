"""What the terminal shows: at 80 columns no table cuts a name users type (secondary columns
give way first), ``raw`` only with --verbose, and two lines that read the stress table."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.corpus.sources import PRESETS
from posdiag.encodings import REGISTRY, describe, preset_specs
from posdiag.render.corpora import corpora_json, print_corpora
from posdiag.render.encodings import print_encoding_detail, print_encodings
from posdiag.render.stress import print_stress
from posdiag.render.takeaway import takeaway
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from posdiag.uncertainty.bootstrap import corpus_counts_sharded

runner = CliRunner()


def _console(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, highlight=False, color_system=None), buf


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    lines = (Path(__file__).resolve().parents[2] / "fixtures" / "corpus_en.txt").read_text()
    path = tmp_path_factory.mktemp("c") / "c.txt"
    path.write_text("\n".join(lines.splitlines()[:600]) + "\n")
    specs = [
        *preset_specs("bert-base"),
        ("scaled-sinusoidal", {}),
        ("rope-yarn", {"factor": 8.0}),
        ("mds", {"rank": 3}),
        ("nope", {}),
    ]
    counted = corpus_counts_sharded(str(path), shards=5, seed=0, max_len=48)
    return stress_report(counted, specs, analysis=Analysis(min_count=50, level=0.95, replicates=20))


def _lines(buf: io.StringIO) -> list[str]:
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100, 160])
def test_stress_table_never_cuts_names(report, width: int) -> None:  # type: ignore[no-untyped-def]
    console, buf = _console(width)
    print_stress(report, console)
    text = buf.getvalue()
    assert all(len(line) <= width for line in _lines(buf))
    rows = [line for line in _lines(buf) if line.startswith("│ ")]
    names = {row.split("│")[1].strip() for row in rows}
    # The corpus table may shorten a long temporary path; no first column is ever cut.
    assert not any("…" in name for name in names)
    # Each label whole on one line (before the fix: 'scaled-sinuso…', 'learne…').
    for label in ("learned-random (bert-base)", "scaled-sinusoidal", "rope-yarn", "mds-3"):
        assert label in names
    flat = " ".join(text.split())
    if width == 160:
        assert "not shown" not in flat
    else:
        # Secondary columns give way; the stress and its interval stay.
        gone = flat.split("(not shown at this width: ")[1].split(";")[0].split(", ")
        assert gone and set(gone) <= {"kruskal", "spearman", "params"}
    assert " stress " in flat and " interval " in flat


def test_every_column_of_the_stress_report_is_explained(report) -> None:  # type: ignore[no-untyped-def]
    console, buf = _console(200)
    print_stress(report, console)
    flat = " ".join(buf.getvalue().split())
    assert (
        "kruskal: Kruskal stress-1 of the distances; spearman: rank correlation of the "
        "distances (one value for every encoding whose distance only grows with |i-j|: they "
        "order the pairs alike; n/a where an encoding's distances are all equal, as nope's); "
        "params: trained parameters (0: a fixed formula; mds-r: r x (n_eff + d), the factors A "
        "and B of P = A B^T; every family's count: posdiag encodings)" in flat
    )
    # The spectrum's tail is in-sample; the table's mds-r rows are held-out: two names, one
    # sentence on why they differ (the same label on both read as a contradiction).
    assert "stress of mds-r" not in flat
    assert " in-sample stress " in flat
    assert "the mds-r rows of the table above are scored held-out, so they differ" in flat


def test_raw_only_with_verbose(report, small_corpus: Path) -> None:  # type: ignore[no-untyped-def]
    console, buf = _console(200)
    print_stress(report, console)
    assert "raw" not in _lines(buf)[0:60] and " raw " not in buf.getvalue()
    console, buf = _console(200)
    print_stress(report, console, verbose=True)
    assert " raw " in buf.getvalue()
    r = runner.invoke(app, ["stress", str(small_corpus), "-v", "--shards", "0"])
    assert r.exit_code == 0 and " raw " in r.stdout
    r = runner.invoke(app, ["stress", str(small_corpus), "--shards", "0"])
    assert r.exit_code == 0 and " raw " not in r.stdout
    doc = json.loads(
        runner.invoke(app, ["stress", str(small_corpus), "--shards", "0", "--json"]).stdout
    )
    assert all("raw" in e for e in doc["encodings"])


def test_reading_lines_follow_the_table(report) -> None:  # type: ignore[no-untyped-def]
    reading, nxt = takeaway(report)
    standard = [e for e in report.encodings if e.name not in ("nope",) and e.name != "mds-3"]
    best = standard[0]
    fam = {"bias": "relative: attention bias", "relative": "relative: rotary"}.get(
        REGISTRY[best.name].kind, REGISTRY[best.name].kind
    )
    assert reading.startswith(
        f"In short: of the standard encodings {best.label} fits best, stress {best.stress:.3f}"
    )
    assert f"(family {fam})" in reading
    eps, rank = next(iter(report.spectrum.effective_rank.items()))
    if rank is None:  # below the cross-fit's floor
        sp = report.spectrum
        assert (
            f"no number of MDS dimensions reaches stress <= {eps:g} (the estimate's floor is "
            f"{sp.floor:.3f}; {sp.signal_rank} dimensions stand above the noise)"
        ) in reading
    else:
        assert (
            f"{rank} MDS dimensions (of at most {report.corpus.n_eff - 1}) reach stress <= {eps:g}"
            in reading
        )
    unstable = report.uncertainty.unstable
    if unstable:
        assert (
            f"sampling noise matters: {len(unstable)} of {report.corpus.n_eff} positions" in reading
        )
    assert nxt.startswith(f"Next: posdiag diagnose {report.corpus.source} ")
    assert "'posdiag docs geometry' defines stress and rank" in nxt
    console, buf = _console(80)
    print_stress(report, console)
    text = " ".join(buf.getvalue().split())
    assert " ".join(reading.split()) in text and " ".join(nxt.split()) in text


def test_encodings_and_corpora_tables_at_80_columns() -> None:
    console, buf = _console(80)
    print_encodings(describe(), console)
    text = buf.getvalue()
    assert "…" not in text and all(len(x) <= 80 for x in _lines(buf))
    firsts = {line.split("│")[1].strip() for line in _lines(buf) if line.startswith("│ ")}
    assert set(REGISTRY) <= firsts
    console, buf = _console(80)
    print_encoding_detail(describe("rope-yarn")[0], console)
    assert "…" not in buf.getvalue()
    assert "original_max_position_embeddings" in buf.getvalue()
    console, buf = _console(80)
    print_corpora(corpora_json(), console)
    text = buf.getvalue()
    assert "…" not in text and all(len(x) <= 80 for x in _lines(buf))
    for p in PRESETS.values():
        assert f" {p.name} " in text and f" {p.dataset} " in text


def test_corpus_rows_say_which_positions_no_sequence_reaches() -> None:
    import dataclasses

    from posdiag.render._format import summary_rows
    from posdiag.reports.analysis import CorpusSummary

    base = CorpusSummary(
        source="c.txt", tokenizer="t", view="text", max_len=12, min_count=3, documents=6,
        sequences=6, tokens=40, vocab_size=50, vocab_seen=20, n_eff=5,
        supports=(6, 6, 6, 5, 4, 2, 1, 0, 0, 0, 0, 0), dropped=(5, 6),
    )  # fmt: skip
    rows = dict(summary_rows(base))
    assert rows["dropped positions"] == "5..6 (2): support below min_count"
    assert rows["unreached positions"] == "7..11 (5): no sequence reaches them"
    # Every position reached: no such row; nothing dropped: "none", counted from n_eff.
    full = dict(summary_rows(dataclasses.replace(base, max_len=7)))
    assert "unreached positions" not in full
    none = dict(summary_rows(dataclasses.replace(base, dropped=())))
    assert none["dropped positions"] == "none"
    assert none["unreached positions"] == "5..11 (7): no sequence reaches them"
    padded = dict(summary_rows(dataclasses.replace(base, support_unit="real tokens")))
    assert padded["unreached positions"] == "7..11 (5): no real token is at them"


def test_equal_spearman_of_encodings_monotone_in_the_lag_as_the_legend_says() -> None:
    # alibi (|i-j|) and alibi-kernel (sqrt(|i-j|)) only grow with the lag: the same order of
    # pairs, so the same Spearman to the last digit; rope's distance is not monotone in |i-j|.
    path = Path(__file__).resolve().parents[2] / "fixtures" / "corpus_en.txt"
    counted = corpus_counts_sharded(str(path), shards=0, seed=0, max_len=64)
    rep = stress_report(counted, analysis=Analysis(min_count=100), details=False)
    by = {s.name: s.spearman for s in rep.encodings}
    assert by["alibi"] == by["alibi-kernel"]
    assert by["rope"] != by["alibi"]


def test_bytes_of_the_bundled_corpus_tell_one_story(bundled_corpus: Path) -> None:
    """Issue 34 item 2: packed bytes carry no positional information. stress must not call a tie
    with nope the "best fixed encoding", and diagnose must not print a noise share above 100%."""
    import re

    args = [str(bundled_corpus), "-t", "bytes", "--view", "packed", "-n", "256", "--shards", "0"]
    runner = CliRunner()
    res = runner.invoke(app, ["stress", *args, "--json"])
    assert res.exit_code == 0, res.stderr
    rows = {e["name"]: e["stress"] for e in json.loads(res.stdout)["encodings"]}
    assert round(rows["sinusoidal"], 3) == round(rows["nope"], 3) == 1.0
    text = " ".join(runner.invoke(app, ["stress", *args]).stdout.split())
    assert "best fixed encoding" not in text
    fixed = {k: v for k, v in rows.items() if not k.startswith("mds") and k != "nope"}
    best = min(fixed, key=fixed.__getitem__)
    assert round(fixed[best], 3) == 1.0
    tie = f"no fixed encoding does better than none ({best} 1.000, nope 1.000)"
    assert f"In short: {tie};" in text
    res = runner.invoke(app, ["diagnose", *args, "--json"])
    doc = json.loads(res.stdout)
    share = doc["noise"]["noise_share"]
    assert share > 1.0 and doc["recommendation"]["encoding"] == "nope"
    text = " ".join(runner.invoke(app, ["diagnose", *args]).stdout.split())
    assert "No positional encoding is needed here" in text
    assert f"noise share of the geometry ~100% (error bound {share:.2g} x the geometry)" in text
    assert (
        "sampling noise can make up all of the geometry (its sampling error bound is "
        f"{share:.2g} x the geometry's squared norm)"
    ) in text
    assert [p for p in re.findall(r"(\d+)%", text) if int(p) > 100] == []
