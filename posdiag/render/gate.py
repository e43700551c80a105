"""``posdiag check`` verdicts in the CI formats: text lines, GitHub annotations, JSON, JUnit XML."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .._util.atomic import atomic_outputs
from .._util.validate import check_choice
from ..errors import PosdiagError
from ..reports.gate import GateReport, RuleResult
from ._format import corpus_json, jsonable

__all__ = [
    "FORMATS",
    "check_format",
    "gate_json",
    "github_annotations",
    "junit_xml",
    "rule_line",
    "text_lines",
    "write_junit",
]

FORMATS = ("text", "github")
# Rules whose figure and threshold are counts, shown without decimals.
_INTEGER_RULES = ("max-rank-for-stress", "min-support")


def _num(x: float, whole: bool) -> str:
    if math.isinf(x):
        # A max-rank-for-stress tolerance below the cross-fit's stress floor: no rank reaches it.
        return "not reached"
    return f"{int(x)}" if whole else f"{x:.4f}"


def rule_line(r: RuleResult) -> str:
    """``PASS  id: measure figure <= threshold (note)``, or FAIL with the violated comparison."""
    verdict = "PASS" if r.passed else "FAIL"
    op = r.comparison if r.passed else {"<=": ">", ">=": "<"}[r.comparison]
    note = f" ({r.note})" if r.note else ""
    whole = r.rule in _INTEGER_RULES
    return (
        f"{verdict}  {r.id}: {r.measure} {_num(r.figure, whole)}{r.unit} {op} "
        f"{_num(r.threshold, whole)}{r.unit}{note}"
    )


def _header(report: GateReport) -> str:
    c = report.corpus
    cfg = f"; rules from {report.config_file}" if report.config_file else ""
    return (
        f"posdiag check {c.source} ({c.tokenizer} / {c.view}, n={c.max_len}, n_eff={c.n_eff}, "
        f"min_count={c.min_count}{', strict' if report.strict else ''}{cfg})"
    )


def _footer(report: GateReport) -> str:
    n = len(report.results)
    rules = "rule" if n == 1 else "rules"
    return f"{n - report.failures} passed, {report.failures} failed of {n} {rules}"


def text_lines(report: GateReport) -> list[str]:
    """Header, one PASS/FAIL line per rule, and a count."""
    return [_header(report), *(rule_line(r) for r in report.results), _footer(report)]


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotations(report: GateReport) -> list[str]:
    """GitHub Actions workflow commands: ``::error`` per failing rule, ``::notice`` per pass."""
    lines = []
    for r in report.results:
        level = "notice" if r.passed else "error"
        title = _escape_property(f"posdiag {r.id}")
        lines.append(f"::{level} title={title}::{_escape_data(rule_line(r))}")
    summary = f"{_footer(report)} on {report.corpus.source}"
    lines.append(f"::{'notice' if report.passed else 'error'}::{_escape_data(summary)}")
    return lines


def gate_json(report: GateReport) -> dict[str, Any]:
    """The ``--json`` document of ``posdiag check``."""
    return jsonable(
        {
            "corpus": corpus_json(report.corpus),
            "config_file": report.config_file,
            "strict": report.strict,
            "passed": report.passed,
            "failures": report.failures,
            "rules": [
                {
                    "id": r.id,
                    "rule": r.rule,
                    "target": r.target,
                    "measure": r.measure,
                    "figure": r.figure,
                    "comparison": r.comparison,
                    "threshold": r.threshold,
                    "passed": r.passed,
                    "note": r.note,
                    "unit": r.unit.strip(),
                }
                for r in report.results
            ],
            "warnings": report.warnings,
        }
    )


def _suites(corpus: str, tests: int, failures: int, errors: int) -> tuple[ET.Element, ET.Element]:
    """The ``testsuites`` root of a JUnit report and its one ``testsuite``."""
    suites = ET.Element("testsuites", name="posdiag check")
    numbers = {"tests": tests, "failures": failures, "errors": errors, "skipped": 0}
    attrs = {"name": f"posdiag check {corpus}", **{k: str(v) for k, v in numbers.items()}}
    return suites, ET.SubElement(suites, "testsuite", attrs)


def junit_xml(report: GateReport) -> bytes:
    """A JUnit XML report: one ``testcase`` per rule, ``failure`` on the failing ones."""
    suites, suite = _suites(report.corpus.source, len(report.results), report.failures, 0)
    props = ET.SubElement(suite, "properties")
    c = report.corpus
    for k, v in (
        ("corpus", c.source),
        ("tokenizer", c.tokenizer),
        ("view", c.view),
        ("max_len", c.max_len),
        ("n_eff", c.n_eff),
        ("min_count", c.min_count),
        ("strict", report.strict),
    ):
        ET.SubElement(props, "property", name=k, value=str(v))
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"posdiag.{r.rule}", name=r.id)
        line = rule_line(r)
        if r.passed:
            ET.SubElement(case, "system-out").text = line
        else:
            ET.SubElement(case, "failure", message=line, type=r.rule).text = line
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def junit_error_xml(corpus: str, message: str) -> bytes:
    """A JUnit XML report of a check that could not run (exit 2): one ``testcase`` with an
    ``error``, as pytest's ``--junitxml`` records an error outside the tests."""
    suites, suite = _suites(corpus, 1, 0, 1)
    case = ET.SubElement(suite, "testcase", classname="posdiag.check", name="check")
    err = ET.SubElement(case, "error", message=message, type="error")
    err.text = f"posdiag check exited with code 2 or was interrupted: {message}"
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def check_junit_path(path: str | Path) -> Path:
    """Refuse a JUnit target that is a folder, before a pass over the corpus."""
    p = Path(path)
    if p.is_dir():
        raise PosdiagError(f"{path}: is a directory; expected a file name for --junit")
    return p


def write_junit(report: GateReport | bytes, path: str | Path) -> Path:
    """Write :func:`junit_xml` of ``report`` (or an XML document) atomically, replacing an
    existing file and creating missing folders, as pytest's ``--junitxml`` does: the report is a
    CI artifact rewritten on every run (data outputs such as encodings and counts are never
    overwritten without --force)."""
    p = check_junit_path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_outputs([p], True) as (tmp,):
        tmp.write_bytes(report if isinstance(report, bytes) else junit_xml(report))
    return p


def asks_github_format(argv: list[str] | None) -> bool:
    """Whether a command line asks for ``--format github`` (read from the raw arguments, so an
    error raised before the options are parsed still gets its annotation)."""
    args = list(argv or ())
    for i, a in enumerate(args):
        if a == "--format=github" or (a == "--format" and args[i + 1 : i + 2] == ["github"]):
            return True
    return False


def error_annotation(message: str) -> str:
    """A GitHub Actions ``::error`` workflow command for an error that stops ``posdiag check``
    (exit 2), so a broken gate shows on the PR like a failing rule does."""
    title = _escape_property("posdiag check error")
    return f"::error title={title}::{_escape_data(message)}"


def check_format(fmt: str) -> str:
    return check_choice("format", fmt, FORMATS)
