"""The CI formats of ``posdiag check`` (issue 15, item 8), written out in full by hand: text
lines, GitHub workflow commands on passing and failing runs, JSON and every JUnit field."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from posdiag.errors import PosdiagError
from posdiag.render.gate import (
    check_format,
    gate_json,
    github_annotations,
    junit_xml,
    rule_line,
    text_lines,
    write_junit,
)
from posdiag.reports.analysis import CorpusSummary
from posdiag.reports.gate import GateReport, RuleResult

CORPUS = CorpusSummary(
    source="a,b:c.txt",
    tokenizer="gpt2",
    view="docs",
    max_len=8,
    min_count=3,
    documents=5,
    sequences=6,
    tokens=40,
    vocab_size=50,
    vocab_seen=20,
    n_eff=7,
    supports=(6, 6, 6, 6, 5, 4, 3, 1),
    dropped=(7,),
)

STRESS_OK = RuleResult("max-stress", "rope", 0.25, 0.5, "<=", True, "stress", "note 1%")
STRESS_BAD = RuleResult("max-stress", "t5", 0.75, 0.5, "<=", False, "stress")
RANK_BAD = RuleResult("max-rank-for-stress", "0.1", 5.0, 3.0, "<=", False, "MDS rank")
INFO_OK = RuleResult(
    "min-positional-info", "", 0.123456, 0.1, ">=", True, "I(position; token)", "", " bits"
)
SUPPORT_BAD = RuleResult(
    "min-support", "", 1.0, 2.0, ">=", False, "smallest support", "at 7", " sequences"
)


def test_rule_lines_by_hand() -> None:
    assert rule_line(STRESS_OK) == "PASS  max-stress[rope]: stress 0.2500 <= 0.5000 (note 1%)"
    assert rule_line(STRESS_BAD) == "FAIL  max-stress[t5]: stress 0.7500 > 0.5000"
    assert rule_line(RANK_BAD) == "FAIL  max-rank-for-stress[0.1]: MDS rank 5 > 3"
    assert rule_line(INFO_OK) == (
        "PASS  min-positional-info: I(position; token) 0.1235 bits >= 0.1000 bits"
    )
    assert rule_line(SUPPORT_BAD) == (
        "FAIL  min-support: smallest support 1 sequences < 2 sequences (at 7)"
    )


def test_text_lines_header_and_footer() -> None:
    report = GateReport(CORPUS, (STRESS_OK,), True, "posdiag.toml")
    assert text_lines(report) == [
        "posdiag check a,b:c.txt (gpt2 / docs, n=8, n_eff=7, min_count=3, strict; rules from "
        "posdiag.toml)",
        rule_line(STRESS_OK),
        "1 passed, 0 failed of 1 rule",
    ]
    report = GateReport(CORPUS, (STRESS_OK, STRESS_BAD, RANK_BAD), False)
    lines = text_lines(report)
    assert lines[0] == "posdiag check a,b:c.txt (gpt2 / docs, n=8, n_eff=7, min_count=3)"
    assert lines[-1] == "1 passed, 2 failed of 3 rules"


def test_github_annotations_on_a_passing_run_have_no_error() -> None:
    report = GateReport(CORPUS, (STRESS_OK, INFO_OK), False)
    assert github_annotations(report) == [
        "::notice title=posdiag max-stress[rope]::"
        "PASS  max-stress[rope]: stress 0.2500 <= 0.5000 (note 1%25)",
        "::notice title=posdiag min-positional-info::" + rule_line(INFO_OK),
        "::notice::2 passed, 0 failed of 2 rules on a,b:c.txt",
    ]


def test_github_annotations_on_a_failing_run_escape_titles_and_data() -> None:
    bad = RuleResult(
        "max-stress", "rope:base=5,head_dim=8", 0.9, 0.5, "<=", False, "stress", "x\ny"
    )
    report = GateReport(CORPUS, (bad, STRESS_OK), False)
    lines = github_annotations(report)
    assert lines[0] == (
        "::error title=posdiag max-stress[rope%3Abase=5%2Chead_dim=8]::"
        "FAIL  max-stress[rope:base=5,head_dim=8]: stress 0.9000 > 0.5000 (x%0Ay)"
    )
    assert lines[1].startswith("::notice title=posdiag max-stress[rope]::PASS")
    assert lines[2] == "::error::1 passed, 1 failed of 2 rules on a,b:c.txt"
    cr = RuleResult("max-stress", "a", 0.9, 0.5, "<=", False, "stress", "p\rq")
    assert github_annotations(GateReport(CORPUS, (cr,), False))[0].endswith("(p%0Dq)")


def test_gate_json_by_hand() -> None:
    report = GateReport(CORPUS, (STRESS_OK, SUPPORT_BAD), True, "pyproject.toml")
    doc = gate_json(report)
    assert doc["config_file"] == "pyproject.toml"
    assert (doc["strict"], doc["passed"], doc["failures"]) == (True, False, 1)
    assert doc["corpus"]["source"] == "a,b:c.txt" and doc["corpus"]["supports"] == list(
        CORPUS.supports
    )
    assert doc["rules"] == [
        {
            "id": "max-stress[rope]",
            "rule": "max-stress",
            "target": "rope",
            "measure": "stress",
            "figure": 0.25,
            "comparison": "<=",
            "threshold": 0.5,
            "passed": True,
            "note": "note 1%",
            "unit": "",
        },
        {
            "id": "min-support",
            "rule": "min-support",
            "target": "",
            "measure": "smallest support",
            "figure": 1.0,
            "comparison": ">=",
            "threshold": 2.0,
            "passed": False,
            "note": "at 7",
            "unit": "sequences",
        },
    ]
    json.dumps(doc)  # plain data throughout


def test_junit_every_field(tmp_path: Path) -> None:
    report = GateReport(CORPUS, (STRESS_OK, STRESS_BAD), False)
    raw = junit_xml(report)
    assert raw.startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    root = ET.fromstring(raw)
    assert (root.tag, root.attrib) == ("testsuites", {"name": "posdiag check"})
    (suite,) = list(root)
    assert suite.attrib == {
        "name": "posdiag check a,b:c.txt",
        "tests": "2",
        "failures": "1",
        "errors": "0",
        "skipped": "0",
    }
    props, ok, bad = list(suite)
    assert [(p.get("name"), p.get("value")) for p in props] == [
        ("corpus", "a,b:c.txt"),
        ("tokenizer", "gpt2"),
        ("view", "docs"),
        ("max_len", "8"),
        ("n_eff", "7"),
        ("min_count", "3"),
        ("strict", "False"),
    ]
    assert ok.attrib == {"classname": "posdiag.max-stress", "name": "max-stress[rope]"}
    (out,) = list(ok)
    assert (out.tag, out.text) == ("system-out", rule_line(STRESS_OK))
    assert bad.attrib == {"classname": "posdiag.max-stress", "name": "max-stress[t5]"}
    (fail,) = list(bad)
    assert fail.tag == "failure"
    assert fail.attrib == {"message": rule_line(STRESS_BAD), "type": "max-stress"}
    assert fail.text == rule_line(STRESS_BAD)
    path = write_junit(report, tmp_path / "j.xml")
    assert path == tmp_path / "j.xml" and path.read_bytes() == raw
    # Replaced on every run, as pytest's --junitxml (issue 12); missing folders are created.
    write_junit(GateReport(CORPUS, (STRESS_OK,), True), tmp_path / "j.xml")
    assert b'value="True"' in (tmp_path / "j.xml").read_bytes()
    nested = write_junit(report, tmp_path / "reports" / "j.xml")
    assert nested.read_bytes() == raw
    with pytest.raises(PosdiagError):
        write_junit(report, tmp_path)  # a folder is not a report file


def test_check_format() -> None:
    assert check_format("github") == "github" and check_format("text") == "text"
    with pytest.raises(PosdiagError) as exc:
        check_format("junit")
    assert str(exc.value) == "'format' must be one of text, github; got 'junit'"
