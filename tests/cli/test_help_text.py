"""Every command's --help at 80 columns (a terminal's default, and what a pipe gets): whole option
names, one placeholder style, one default style (issue 34, item 11)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from posdiag.cli.app import app

runner = CliRunner()
GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)  # type: ignore[attr-defined]


def _help(command: str, columns: int = 80) -> str:
    r = runner.invoke(
        app,
        [command, "-h"],
        terminal_width=columns,
        env={"COLUMNS": str(columns)},
        prog_name="posdiag",
    )
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_at_80_columns_names_every_option_whole(command: str) -> None:
    text = _help(command)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    opts = [
        o
        for p in GROUP.commands[command].params
        if not getattr(p, "hidden", False)
        for o in (*p.opts, *p.secondary_opts)
    ]  # type: ignore[attr-defined]
    for opt in opts:
        if opt.startswith("--"):
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), opt


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_plain_placeholders_and_one_default_style(command: str) -> None:
    text = _help(command, 250)
    for placeholder in ("{", "<str>", "<int>", "<float>", "<path>", "<list[", "<bool>"):
        assert placeholder not in text, placeholder
    assert "(default" not in text  # every default reads [default: x]


def test_check_help_usage_and_types() -> None:
    text = _help("check")
    assert "Usage: posdiag check [OPTIONS] CORPUS" in text
    assert re.search(r"--max-rank-for-stress +TEXT", text)
    assert re.search(r"--max-stress +FLOAT", text)
    assert re.search(r"--junit +PATH", text)


def test_optional_argument_usage() -> None:
    assert "Usage: posdiag encodings [OPTIONS] [NAME]" in _help("encodings")
    assert "Usage: posdiag merge [OPTIONS] INPUTS..." in _help("merge")


def test_replicates_shows_its_default() -> None:
    words = " ".join(re.sub(r"[│╭╮╰╯─]", " ", _help("stress", 250)).split())
    assert "[default: 200; from 128 positions 38 balanced half-samples" in words
    assert "--max-len -n INT Positions counted, n [default: 512]." in words
    assert "--tokenizer -t TEXT 'whitespace', 'bytes'" in words
    assert "[default: whitespace]." in words
