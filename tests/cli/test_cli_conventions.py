"""Conventions a CLI user expects: -h, python -m posdiag, shell completion, a --version that does
not load numpy and scipy, flags without a type in the help, option groups."""

from __future__ import annotations

import re
import subprocess
import sys
import traceback

import pytest
from typer.testing import CliRunner

from posdiag import __version__
from posdiag.cli.app import app

runner = CliRunner()


def _help(*args: str) -> str:
    r = runner.invoke(app, [*args], terminal_width=200, env={"COLUMNS": "200"}, prog_name="posdiag")
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("args", [["-h"], ["stress", "-h"], ["check", "-h"], ["diff", "-h"]])
def test_dash_h_is_help(args: list[str]) -> None:
    assert "Usage: posdiag" in _help(*args)


def test_python_dash_m_posdiag() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "posdiag", "--version"], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0 and r.stdout == f"posdiag {__version__}\n"


def test_version_and_help_do_not_import_numpy_or_scipy() -> None:
    # What made --version take 1.5 s: every command's library imported with the CLI.
    code = (
        "import sys; import posdiag.cli.app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(posdiag.cli.app.app, ['stress', '--help']); "
        "assert r.exit_code == 0; "
        "print(sorted(m for m in ('numpy', 'scipy', 'datasets', 'matplotlib') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    # The package still offers its API, loaded on first use.
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import posdiag, sys; print('scipy' in sys.modules); "
            "posdiag.stress_report; print('scipy' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.stdout.split() == ["False", "True"], r.stderr


def test_unknown_package_attribute_is_an_attribute_error() -> None:
    import posdiag

    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        posdiag.nothing  # noqa: B018


def test_shell_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer.completion

    assert "--install-completion" in _help("--help")
    # typer detects the shell from the process tree (shellingham), which a test run started
    # without a shell ancestor lacks: "Shell  not supported". Name it, as a bash would.
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    r = runner.invoke(app, ["--show-completion"], prog_name="posdiag")
    assert r.exit_code == 0 and "_posdiag_completion" in r.stdout, (
        r.output,
        "".join(traceback.format_exception(*r.exc_info)) if r.exc_info else None,
    )
    env = {"_POSDIAG_COMPLETE": "complete_bash", "COMP_WORDS": "posdiag stre", "COMP_CWORD": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "posdiag"],
        capture_output=True,
        text=True,
        check=False,
        env={**__import__("os").environ, **env},
    )
    assert r.stdout.split() == ["stress"]


@pytest.mark.parametrize(
    ("words", "cword", "want"),
    [
        ("posdiag stress c.txt -e rope-y", "4", ["rope-yarn"]),
        ("posdiag diagnose c.txt -e mds-", "4", ["mds-1", "mds-2", "mds-3"]),
        ("posdiag stress c.txt --model-preset llama3", "4", ["llama3-8b", "llama3-8b-noscale"]),
    ],
)
def test_names_complete_in_the_shell(words: str, cword: str, want: list[str]) -> None:
    import os

    env = {**os.environ, "_POSDIAG_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = cword
    r = subprocess.run(
        [sys.executable, "-m", "posdiag"], capture_output=True, text=True, check=False, env=env
    )
    assert r.stdout.split() == want


@pytest.mark.parametrize("command", ["stress", "check", "report", "encodings", "diff"])
def test_flags_show_no_type(command: str) -> None:
    text = _help(command, "--help")
    assert "<bool>" not in text
    assert re.search(r"--json\s{2,}Print one JSON object", text)


def test_option_groups() -> None:
    text = _help("stress", "--help")
    for panel in ("Reading the corpus", "Encodings", "Uncertainty", "Output"):
        assert f"─ {panel} ─" in text
