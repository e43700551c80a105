"""CI conventions of ``posdiag check``: with ``--format github`` errors (exit 2) are also
``::error`` annotations, and ``--junit`` replaces its report as pytest's ``--junitxml`` does, while
data outputs (counts, encodings) keep refusing to overwrite."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.render.gate import asks_github_format, error_annotation

runner = CliRunner()


def test_errors_are_annotations_with_format_github(synth_corpus: Path) -> None:
    r = runner.invoke(app, ["check", str(synth_corpus), "--no-config", "--format", "github"])
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: no rules to check")
    (line,) = r.stdout.splitlines()
    assert line.startswith("::error title=posdiag check error::no rules to check: give ")
    # Workflow-command escaping: ':' and ',' in the title, '%' and newlines in the message.
    assert error_annotation("a%b\nc") == "::error title=posdiag check error::a%25b%0Ac"
    # A bad data error (the corpus is missing) and a bad option value (click's own exit 2).
    missing = str(synth_corpus.with_name("missing.txt"))
    r = runner.invoke(app, ["check", missing, "--format=github", "--min-support", "1"])
    assert r.exit_code == 2 and r.stdout.startswith("::error title=posdiag check error::")
    assert "missing.txt" in r.stdout
    r = runner.invoke(app, ["check", missing, "--format", "github", "--min-support", "x"])
    assert r.exit_code == 2
    assert r.stdout.startswith("::error title=posdiag check error::Invalid value for")


def test_no_annotation_in_text_format(synth_corpus: Path) -> None:
    r = runner.invoke(app, ["check", str(synth_corpus), "--no-config"])
    assert r.exit_code == 2 and "::error" not in r.stdout + r.stderr
    assert not asks_github_format(["check", "c.txt", "--format", "text", "-e", "github"])
    assert asks_github_format(["check", "c.txt", "--format", "github"])


def test_junit_report_is_replaced_like_pytest_junitxml(synth_corpus: Path, tmp_path: Path) -> None:
    report = tmp_path / "reports" / "posdiag.xml"  # the folder is created, as pytest does
    base = ["check", str(synth_corpus), "--no-config", "-n", "12", "--junit", str(report)]
    r = runner.invoke(app, [*base, "--min-support", "601"])
    assert r.exit_code == 1
    suite = ET.fromstring(report.read_bytes()).find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    # The second run replaces it without --force (before: "already exists", exit 2).
    r = runner.invoke(app, [*base, "--min-support", "1"])
    assert r.exit_code == 0, r.output
    suite = ET.fromstring(report.read_bytes()).find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    # -f is still accepted (existing CI lines), but hidden from the help.
    assert runner.invoke(app, [*base, "--min-support", "1", "-f"]).exit_code == 0
    r = runner.invoke(app, [*base[:-1], str(tmp_path), "--min-support", "1"])
    assert r.exit_code == 2 and "is a directory; expected a file name for --junit" in r.stderr


@pytest.mark.parametrize("kind", ["count", "build-encoding"])
def test_data_outputs_still_refuse_to_overwrite(
    synth_corpus: Path, tmp_path: Path, kind: str
) -> None:
    out = tmp_path / ("c.npz" if kind == "count" else "e.safetensors")
    out.write_bytes(b"keep")
    extra = ["--min-count", "50"] if kind == "build-encoding" else []
    r = runner.invoke(app, [kind, str(synth_corpus), "-o", str(out), *extra])
    assert r.exit_code == 2 and "already exists; pass --force to overwrite" in r.stderr
    assert out.read_bytes() == b"keep"


def test_junit_report_of_a_check_that_ends_in_exit_2_records_the_error(
    synth_corpus: Path, tmp_path: Path
) -> None:
    """Issue 34 item 8: a check that ends with exit 2 left the previous run's passing report in
    place. It now replaces it with a report of the error (as pytest records a collection error)."""
    report = tmp_path / "posdiag.xml"
    base = ["check", str(synth_corpus), "--no-config", "-n", "12", "--junit", str(report)]
    assert runner.invoke(app, [*base, "--min-support", "1"]).exit_code == 0
    assert ET.fromstring(report.read_bytes()).find("testsuite").get("failures") == "0"  # type: ignore[union-attr]
    for bad in (["--min-support", "1", "--min-count", "0"], ["--max-stress", "0.5"]):
        r = runner.invoke(app, [*base, *bad])
        assert r.exit_code == 2
        message = r.stderr.removeprefix("Error: ").rstrip("\n")
        suite = ET.fromstring(report.read_bytes()).find("testsuite")
        assert suite is not None
        assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "1")
        assert suite.get("name") == f"posdiag check {synth_corpus}"
        error = suite.find("testcase/error")
        assert error is not None and error.get("message") == message
        assert error.text == f"posdiag check exited with code 2 or was interrupted: {message}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["posdiag.xml", synth_corpus.name]
