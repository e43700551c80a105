"""What the user reads: help texts and report titles keep their square brackets (rich markup
would swallow ``[default: ...]``, ``[@SPLIT]`` or ``[tensor.name]``), and wording of savings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from typer.testing import CliRunner

from posdiag.analysis import saving_phrase
from posdiag.cli import app

runner = CliRunner()


def _help(command: str) -> str:
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert r.exit_code == 0, r.output
    # Help panels wrap and box their lines; join them into one string of words.
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.stdout).split())


@pytest.mark.parametrize(
    ("command", "text"),
    [
        ("stress", "hf:OWNER/NAME[:CONFIG][@SPLIT]"),
        ("stress", "hub data sets [default: $POSDIAG_DATA_DIR]."),
        ("count", "hub data sets [default: $POSDIAG_DATA_DIR]."),
        ("synth", "bump width in tokens [default: n/2]."),
        ("check", "[default: the nearest posdiag.toml, else pyproject.toml with [tool.posdiag],"),
        ("diff", "[default: each corpus's effective rank at --tolerance]"),
    ],
)
def test_help_keeps_square_brackets(command: str, text: str) -> None:
    assert text in _help(command)


def test_inspect_title_names_the_tensor_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a short relative path keeps the title on one line
    path = Path("model.safetensors")
    table = np.random.default_rng(0).normal(0, 0.02, (8, 4)).astype(np.float32)
    save_file({"bert.embeddings.position_embeddings.weight": table}, str(path))
    # Found by its known name: the title and the JSON name it, not a placeholder.
    r = runner.invoke(app, ["inspect", str(path)])
    assert r.exit_code == 0, r.output
    assert f"{path} [bert.embeddings.position_embeddings.weight]: 8 x 4" in r.stdout
    r = runner.invoke(app, ["inspect", str(path), "--json"])
    assert json.loads(r.stdout)["tensor"] == "bert.embeddings.position_embeddings.weight"
    r = runner.invoke(
        app, ["inspect", str(path), "--tensor", "bert.embeddings.position_embeddings.weight"]
    )
    assert f"{path} [bert.embeddings.position_embeddings.weight]: 8 x 4" in r.stdout


def test_corpus_source_with_brackets_is_shown_verbatim(synth_corpus: Path) -> None:
    pattern = str(synth_corpus.parent / "[s]ynth.txt")  # a glob matching the one file
    r = runner.invoke(app, ["stress", pattern, "--min-count", "50", "--shards", "0"])
    assert r.exit_code == 0, r.output
    assert "[s]ynth.txt" in r.stdout


def test_saving_phrase_says_more_when_the_factorisation_costs_more() -> None:
    assert saving_phrase(0.88) == "88% fewer"
    assert saving_phrase(-0.5308) == "53% more"
    assert saving_phrase(0.957, 1) == "95.7% fewer"


def test_diagnose_reading_never_says_negative_fewer(synth_corpus: Path) -> None:
    # n_eff = 12, d = 2: the rank reaching 0.01 costs r(12+2) > 24 parameters.
    args = ["diagnose", str(synth_corpus), "--min-count", "50", "--shards", "0"]
    r = runner.invoke(app, [*args, "--dim", "2", "--target", "0.01", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rank = doc["rank"]
    assert rank["saving"] < 0
    expected = f"{-rank['saving']:.0%} more"
    assert f"({expected}, d=2)" in rank["reading"]
    assert f"({expected} parameters than a full table)" in doc["recommendation"]["text"]
    assert "-" not in rank["reading"].split("(")[-1]
