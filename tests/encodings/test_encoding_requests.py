"""How encodings are asked for: rows name the model preset they came from, one ``--dim`` sets
the model dimension of every encoding that has one, and misspelt names get a suggestion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.encodings import DEFAULT_DIM, REGISTRY
from posdiag.encodings._core import DIM_PARAMS

runner = CliRunner()


def _json(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--json", "--shards", "0"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_every_row_names_its_model_preset(small_corpus: Path) -> None:
    doc = _json(
        "stress", str(small_corpus), "--model-preset", "gpt2", "--model-preset", "bert-base"
    )
    rows = doc["encodings"]
    # Both presets expand to the same learned-random table: before, two identical rows.
    assert [(r["name"], r["preset"]) for r in rows] == [
        ("learned-random", "gpt2"),
        ("learned-random", "bert-base"),
    ]
    r = runner.invoke(
        app, ["stress", str(small_corpus), "--model-preset", "bloom-560m", "-e", "rope"]
    )
    assert r.exit_code == 0
    assert "alibi (bloom-560m)" in r.stdout and "alibi-kernel (bloom-560m)" in r.stdout
    # An encoding asked with -e has no preset.
    assert "rope (" not in r.stdout
    doc = _json("stress", str(small_corpus), "-e", "rope")
    assert doc["encodings"][0]["preset"] == ""


def test_one_default_dimension_for_every_dimensioned_encoding() -> None:
    assert {REGISTRY[name].defaults[key] for name, key in DIM_PARAMS.items()} == {DEFAULT_DIM}


def test_dim_applies_to_every_dimensioned_encoding_without_explicit_d(
    small_corpus: Path,
) -> None:
    doc = _json(
        "stress",
        str(small_corpus),
        "-e",
        "sinusoidal",
        "-e",
        "sinusoidal:d=64",
        "-e",
        "learned-random",
        "-e",
        "mds-3",
        "-e",
        "rope",
        "--dim",
        "128",
    )
    got = {(r["name"], r["params"].get("d", r["params"].get("dim"))) for r in doc["encodings"]}
    assert got == {
        ("sinusoidal", 128),
        ("sinusoidal", 64),  # explicit d= wins
        ("learned-random", 128),
        ("mds-3", 128),
        ("rope", None),  # head_dim is per head, not the model dimension
    }
    n = doc["corpus"]["n_eff"]
    by = {(r["name"], r["params"].get("d", r["params"].get("dim"))): r for r in doc["encodings"]}
    assert by[("mds-3", 128)]["n_params"] == 3 * (n + 128)
    assert by[("learned-random", 128)]["n_params"] == n * 128
    # The stress is that of the encoding with d=128 given explicitly (same corpus, same seed).
    explicit = _json("stress", str(small_corpus), "-e", "sinusoidal:d=128", "-e", "sinusoidal:d=64")
    want = {r["params"]["d"]: r["stress"] for r in explicit["encodings"]}
    assert by[("sinusoidal", 128)]["stress"] == pytest.approx(want[128], abs=1e-12)
    assert want[128] != pytest.approx(want[64])  # d matters, so the test can tell them apart


def test_diagnose_dim_reaches_the_table_not_only_the_saving(small_corpus: Path) -> None:
    doc = _json("diagnose", str(small_corpus), "--dim", "128")
    n = doc["corpus"]["n_eff"]
    mds3 = next(r for r in doc["encodings"] if r["name"] == "mds-3")
    assert mds3["params"]["dim"] == 128 and mds3["n_params"] == 3 * (n + 128)
    sin = next(r for r in doc["encodings"] if r["name"] == "sinusoidal")
    assert sin["params"]["d"] == 128


def test_dim_below_a_default_mds_rank_drops_that_rank(synth_corpus: Path) -> None:
    doc = _json("stress", str(synth_corpus), "--dim", "2", "--min-count", "50")
    names = [r["name"] for r in doc["encodings"]]
    assert "mds-1" in names and "mds-2" in names and "mds-3" not in names


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["-e", "sinusodial"], "did you mean 'sinusoidal'?"),
        (["-e", "Rope"], "did you mean 'rope'?"),
        (["-e", "mds3"], "did you mean 'mds-3'?"),
        (["--model-preset", "Gpt2"], "did you mean 'gpt2'?"),
        (["--model-preset", "bert"], "did you mean 'bert-base'?"),
        (["--model-preset", "lama3-8b"], "did you mean 'llama3-8b'?"),
    ],
)
def test_misspelt_names_get_a_suggestion(small_corpus: Path, args: list[str], hint: str) -> None:
    r = runner.invoke(app, ["stress", str(small_corpus), *args])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and hint in r.stderr


def test_no_suggestion_for_a_name_far_from_every_encoding(small_corpus: Path) -> None:
    r = runner.invoke(app, ["stress", str(small_corpus), "-e", "banana"])
    assert r.exit_code == 2 and "did you mean" not in r.stderr
