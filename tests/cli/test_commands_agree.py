"""Every command tells the same story (issue 34): on one input, ``stress``, ``diagnose``,
``check``, ``diff`` (the corpus against itself), ``report`` and their ``--json`` give the same
figures (each encoding's stress and interval, the floor, the signal and effective ranks, the
warnings) and the same verdicts (the ranking, whether stress <= 0.1 is reached, pass/fail).

Three corpora: the bundled corpus (words; no rank reaches 0.1), a synthetic smooth drift of
rank 2 (the rank is reached; intervals from 20 shards) and the bundled corpus as packed bytes
(no positional information: every stress near 1)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests._data import drift_distributions, sample_texts


def _corpus(kind: str, tmp_path: Path, bundled: Path) -> tuple[str, list[str]]:
    if kind == "words":
        return str(bundled), ["--shards", "0"]
    if kind == "bytes":
        return str(bundled), ["-t", "bytes", "--view", "packed", "-n", "64", "--shards", "0"]
    path = tmp_path / "drift.txt"
    mu = drift_distributions(12, 30, rank=2, seed=1)
    path.write_text("\n".join(sample_texts(mu, 600, seed=2)) + "\n")
    return str(path), ["--min-count", "50", "--replicates", "40"]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _json(cli: Callable[..., Result], args: list[str]) -> dict[str, Any]:
    res = cli([*args, "--json"])
    assert res.exit_code in (0, 1), res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _html_stress_cells(page: str) -> dict[str, str]:
    """encoding -> the stress cell of the HTML report's stress table."""
    table = page.split('<table class="stress">')[1].split("</table>")[0]
    rows = {}
    for tr in table.split("<tr>")[2:]:
        cells = [html.unescape(td.split("</td>")[0]) for td in tr.split(">", 1)[1].split("<td")]
        cells = [c.split(">", 1)[-1] for c in cells if c]
        rows[cells[0]] = cells[2]
    return rows


@pytest.mark.parametrize("kind", ["words", "drift", "bytes"])
def test_every_command_gives_the_same_figures_and_verdicts(
    kind: str, cli: Callable[..., Result], bundled_corpus: Path, tmp_path: Path
) -> None:
    corpus, reading = _corpus(kind, tmp_path, bundled_corpus)
    s = _json(cli, ["stress", corpus, *reading])
    d = _json(cli, ["diagnose", corpus, *reading])
    page_path = tmp_path / "page.html"
    r = _json(cli, ["report", corpus, *reading, "-o", str(page_path), "--no-plots"])
    # diff reads its sides without --shards (it has no intervals): the other options only.
    diff_reading = [a for a in reading if a not in ("--shards", "0", "--replicates", "40")]
    x = _json(cli, ["diff", corpus, corpus, *diff_reading])
    rows = {e["name"]: e for e in s["encodings"]}
    fixed = [n for n in rows if not n.startswith("mds")]
    rules = [a for n in fixed for a in ("-e", n, "--max-stress", repr(rows[n]["stress"]))]
    check_reading = [a for a in reading if a != "--replicates" and a != "40"]
    c = _json(
        cli,
        ["check", corpus, *check_reading, "--no-config", *rules]
        + ["--max-rank-for-stress", "0.1:1000"],
    )

    # Each encoding's stress (and interval): stress = diagnose = check = diff = the HTML cell.
    assert [e["name"] for e in d["encodings"]] == list(rows)  # the same ranking
    for e in d["encodings"]:
        for key in ("stress", "ci_low", "ci_high", "in_sample"):
            assert e[key] == pytest.approx(rows[e["name"]][key], abs=1e-12, nan_ok=True)
    by_rule = {q["target"]: q for q in c["rules"] if q["rule"] == "max-stress"}
    for n in fixed:
        assert by_rule[n]["figure"] == pytest.approx(rows[n]["stress"], abs=1e-12)
        assert by_rule[n]["passed"] is True  # its own figure as the threshold
    for q in x["rankings"]:
        assert q["stress_a"] == pytest.approx(rows[q["name"]]["stress"], abs=1e-12)
    assert [q["name"] for q in x["rankings"]] == list(rows)
    cells = _html_stress_cells(page_path.read_text(encoding="utf-8"))
    assert {n: cells[n] for n in rows} == {n: f"{rows[n]['stress']:.4f}" for n in rows}

    # The spectrum's verdicts: floor, signal rank, effective rank at 0.1, reached or not.
    sp, dsp = s["spectrum"], d["rank"]["spectrum"]
    # One spectrum document: diagnose's keys are stress's plus its rank intervals.
    assert list(dsp) == [*list(sp)[:2], "stress_by_rank_ci", *list(sp)[2:]]
    # The same values, but for the tolerances each command reads effective ranks at.
    assert {k: dsp[k] for k in sp if k != "effective_rank"} == {
        k: v for k, v in sp.items() if k != "effective_rank"
    }
    assert dsp["floor"] == pytest.approx(sp["floor"], abs=1e-12)
    assert dsp["signal_rank"] == sp["signal_rank"]
    eff = sp["effective_rank"]["0.1"]
    assert dsp["effective_rank"]["0.1"] == eff
    assert d["rank"]["reached"] is (eff is not None)
    assert d["recommendation"]["mds_rank"] == eff
    assert x["rank_reached_a"] is (eff is not None)
    assert x["rank_a"] == (eff if eff is not None else sp["signal_rank"])
    assert x["floor_a"] == pytest.approx(sp["floor"], abs=1e-12)
    (rank_rule,) = [q for q in c["rules"] if q["rule"] == "max-rank-for-stress"]
    assert rank_rule["figure"] == eff and rank_rule["passed"] is (eff is not None)
    shown = f"not reached (floor {sp['floor']:.3f})" if eff is None else None
    if shown is not None:
        for args in (["stress", corpus], ["diagnose", corpus]):
            assert shown in _flat(cli([*args, *reading]).stdout)
        assert shown in rank_rule["note"]
        assert f"floor {sp['floor']:.3f}" in " ".join(x["warnings"])

    # The same warnings everywhere (diff adds its own about the ranks it crossed; check judges
    # no position's stability, so it has the geometry's warnings only).
    assert s["warnings"] == d["warnings"] == r["warnings"]
    assert c["warnings"] == [w for w in s["warnings"] if "unstable" not in w]
    assert [w for w in x["warnings"] if "cross-stress" not in w] == [
        w for w in s["warnings"] if "unstable" not in w
    ]
    # A corpus against itself: no drift, whatever its noise.
    assert x["geometry_stress"] == 0.0 and x["verdict"] == "no drift beyond sampling"
    if kind == "bytes":  # no positional information: no encoding beats none by 0.001
        assert d["recommendation"]["encoding"] == "nope"
        best = min(rows[n]["stress"] for n in fixed if n != "nope")
        assert math.isclose(round(best, 2), 1.0)
