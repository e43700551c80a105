"""Piped output is as wide as $COLUMNS says, and 160 columns when it says nothing (issue 34,
item 18)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

ARGS = ["--shards", "0", "--min-count", "50", "-q"]


@pytest.mark.parametrize("columns", [72, 100, 200])
def test_piped_tables_follow_columns(
    cli: Callable[..., Result], synth_corpus: Path, columns: int
) -> None:
    r = cli(["stress", str(synth_corpus), *ARGS], env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    # No line is wider than the width...
    assert max(len(line) for line in lines) <= columns
    # ...and text is wrapped to it: the legend's first line could not take its next word.
    at = next(i for i, line in enumerate(lines) if line.startswith("kruskal: "))
    next_word = lines[at + 1].split()[0]
    assert len(lines[at]) + 1 + len(next_word) > columns


@pytest.mark.parametrize("columns", ["", "0", "wide"])
def test_piped_tables_without_a_usable_columns_are_160_wide(
    cli: Callable[..., Result], synth_corpus: Path, columns: str
) -> None:
    r = cli(["stress", str(synth_corpus), *ARGS], env={"COLUMNS": columns})
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.stdout.splitlines()) == 160


def test_piped_help_follows_columns(cli: Callable[..., Result]) -> None:
    r = cli(["stress", "-h"], env={"COLUMNS": "120"}, prog_name="posdiag")
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.stdout.splitlines()) == 120
