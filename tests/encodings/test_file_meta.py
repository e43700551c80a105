"""``inspect`` reads the corpus as the encoding file was built (its metadata: tokenizer, view,
max_len, min_count), options override with the conflict stated, and a table whose row count
differs from the corpus's n_eff is warned about loudly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.encodings.file_meta import read_encoding_meta

runner = CliRunner()


def _ok(*args: str) -> tuple[dict, str]:
    r = runner.invoke(app, [*args])
    assert r.exit_code == 0, r.output
    return (json.loads(r.stdout) if "--json" in args else {}), r.stderr


@pytest.fixture(params=[".safetensors", ".npy"])
def built(request: pytest.FixtureRequest, small_corpus: Path, tmp_path: Path) -> Path:
    out = tmp_path / f"enc{request.param}"
    args = ["build-encoding", str(small_corpus), "-o", str(out), "--view", "model", "-n", "24"]
    _ok(*args, "-r", "2", "--min-count", "50", "--dim", "16")
    return out


def test_inspect_reads_the_corpus_as_the_file_was_built(built: Path, small_corpus: Path) -> None:
    meta = read_encoding_meta(built)
    assert (meta["view"], meta["max_len"], meta["min_count"]) == ("model", "24", "50")
    doc, err = _ok("inspect", str(built), "--corpus", str(small_corpus), "--json")
    c = doc["corpus"]
    assert (c["tokenizer"], c["view"], c["max_len"], c["min_count"]) == (
        "whitespace",
        "model",
        24,
        50,
    )
    assert doc["from_file"] == {
        "tokenizer": "whitespace",
        "view": "model",
        "max_len": "24",
        "min_count": "50",
        "group_prefix": "6",
        "dedup": "false",
    }
    # The same geometry the file was built on: the table's stress is the one it was built with
    # (to float32 storage). Before, inspect read whitespace / text / 512 and got another number.
    assert c["n_eff"] == int(meta["n"])
    assert doc["fit"]["stress"] == pytest.approx(float(meta["stress"]), abs=1e-5)
    assert doc["warnings"] == [] and err == ""


def test_options_override_and_the_conflict_is_stated(built: Path, small_corpus: Path) -> None:
    doc, err = _ok("inspect", str(built), "--corpus", str(small_corpus), "--view", "text", "--json")
    assert doc["corpus"]["view"] == "text" and doc["corpus"]["max_len"] == 24
    assert "view" not in doc["from_file"]
    line = (
        f"{built} was built with view=model; --view text overrides it, so the table is "
        "compared with a geometry it was not built from"
    )
    assert line in doc["warnings"] and f"Warning: {line}\n" in err


def test_row_count_other_than_n_eff_warns(built: Path, small_corpus: Path) -> None:
    doc, err = _ok("inspect", str(built), "--corpus", str(small_corpus), "-n", "12", "--json")
    assert doc["corpus"]["n_eff"] == 12 and doc["fit"]["n"] == 12
    rows = doc["table"]["rows"]
    assert rows == 24
    assert (
        f"Warning: {built} has 24 rows (built on n=24 positions) but the corpus gives n_eff=12 "
        "positions: only positions 0..11 are compared, so the stress describes a prefix of the "
        "table\n"
    ) in err


def test_a_counts_file_counted_otherwise_is_named(
    built: Path, small_corpus: Path, tmp_path: Path
) -> None:
    npz = tmp_path / "text.npz"
    _ok("count", str(small_corpus), "-o", str(npz), "-n", "24")
    doc, err = _ok("inspect", str(built), "--corpus", str(npz), "--json")
    assert doc["corpus"]["view"] == "text"
    assert any(
        "was built with another reading than the counts" in w and "view=model vs text" in w
        for w in doc["warnings"]
    )
    assert "Warning:" in err


def test_a_checkpoint_without_posdiag_metadata_keeps_the_defaults(
    small_corpus: Path, tmp_path: Path
) -> None:
    import numpy as np

    table = tmp_path / "table.npy"
    np.save(table, np.random.default_rng(0).normal(size=(30, 8)))
    assert read_encoding_meta(table) == {}
    doc, _ = _ok("inspect", str(table), "--corpus", str(small_corpus), "--json")
    assert doc["corpus"]["view"] == "text" and doc["corpus"]["max_len"] == 512
    assert doc["from_file"] == {}


def test_inspect_reads_the_sampling_units_the_file_was_built_with(
    small_corpus: Path, tmp_path: Path
) -> None:
    # Every line twice, built with --dedup and --group-prefix 3: inspect counts the same way.
    twice = tmp_path / "twice.txt"
    twice.write_text(small_corpus.read_text(encoding="utf-8") * 2, encoding="utf-8")
    out = tmp_path / "enc.npy"
    _ok("build-encoding", str(twice), "-o", str(out), "-n", "20", "-r", "2", "--dim", "8",
        "--dedup", "--group-prefix", "3")  # fmt: skip
    meta = read_encoding_meta(out)
    assert (meta["dedup"], meta["group_prefix"]) == ("true", "3")
    doc, err = _ok("inspect", str(out), "--corpus", str(twice), "--json")
    assert doc["from_file"]["dedup"] == "true" and doc["from_file"]["group_prefix"] == "3"
    units = doc["corpus"]["units"]
    assert (units["dedup"], units["prefix"], units["dropped"]) == (True, 3, 400)
    assert doc["fit"]["stress"] == pytest.approx(float(meta["stress"]), abs=1e-5)
    assert doc["warnings"] == [] and err == ""
