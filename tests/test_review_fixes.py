"""Bugs found by the correctness review: each test fails on the code before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from typer.testing import CliRunner

from posdiag.cli import app
from posdiag.geometry import significant_negative

from .conftest import BUNDLED

runner = CliRunner()


def test_identical_positional_distributions_are_one_clear_error(tmp_path: Path) -> None:
    corpus = tmp_path / "same.txt"
    corpus.write_text("a b c\nb c a\nc a b\n")  # every position: a, b, c once each
    message = (
        f"Error: {corpus}: all 3 analysed positions have the same token distribution "
        "(largest Hellinger distance 0); there is no positional geometry to fit\n"
    )
    for cmd in (
        ["stress"],
        ["diagnose"],
        ["build-encoding", "-r", "1", "-o", str(tmp_path / "e.npy")],
    ):
        res = runner.invoke(app, [*cmd, str(corpus), "--min-count", "1"])
        assert (res.exit_code, res.stderr) == (2, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.txt"]


def test_min_support_rule_judges_a_corpus_too_thin_for_a_geometry(tmp_path: Path) -> None:
    corpus = tmp_path / "thin.txt"
    corpus.write_text("a b c\nb c a\nc a\n")
    res = runner.invoke(
        app, ["check", str(corpus), "-n", "3", "--no-config", "--min-support", "10"]
    )
    assert res.exit_code == 1, res.stderr
    assert "FAIL  min-support: smallest support 2 sequences < 10 sequences" in res.stdout


def test_diff_of_stdin_with_itself_is_refused() -> None:
    res = runner.invoke(app, ["diff", "-", "-"], input="a b\nb a\n")
    assert res.exit_code == 2
    assert res.stderr == (
        "Error: '-' (stdin) can be read only once; save it to a file to compare it with itself\n"
    )


def test_model_view_shorter_than_the_special_tokens(tmp_path: Path) -> None:
    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    path = tmp_path / "tok.json"
    tok.save(str(path))
    res = runner.invoke(
        app, ["stress", str(BUNDLED), "-t", str(path), "--view", "model", "-n", "1"]
    )
    assert res.exit_code == 2
    assert res.stderr == (
        f"Error: tokenizer {path}: --max-len 1 is shorter than the 2 special tokens its "
        "post-processor adds in the model view\n"
    )


def test_recommendation_reason_fits_a_relative_winner() -> None:
    res = runner.invoke(
        app, ["diagnose", str(BUNDLED), "-n", "4", "--replicates", "5", "--json", "--quiet"]
    )
    assert res.exit_code == 0, res.stderr
    rec = json.loads(res.stdout)["recommendation"]
    assert rec["family"] == "relative"  # the case the review found
    assert "absolute position matters" not in rec["text"]
    assert "it has the lowest stress, although D_H is not shift-equivariant" in rec["text"]


def test_learned_reads_posdiag_own_encoding_file(tmp_path: Path, synth_corpus: Path) -> None:
    enc = tmp_path / "e.safetensors"
    args = [str(synth_corpus), "--min-count", "50"]
    assert (
        runner.invoke(
            app, ["build-encoding", *args, "-r", "2", "-d", "8", "-o", str(enc)]
        ).exit_code
        == 0
    )
    res = runner.invoke(
        app,
        ["stress", *args, "--shards", "0", "--json", "-e", f"learned:path={enc}", "-e", "mds-2"],
    )
    assert res.exit_code == 0, res.stderr
    rows = {e["name"]: e for e in json.loads(res.stdout)["encodings"]}
    assert rows["learned"]["params"]["tensor"] == "encoding"
    # The file holds the full-data rank-2 MDS coordinates: the in-sample mds-2 figure.
    assert abs(rows["learned"]["stress"] - rows["mds-2"]["in_sample"]) < 1e-5  # float32 file


def test_negative_eigenvalue_reported_only_when_significant(synth_corpus: Path) -> None:
    assert significant_negative(np.array([2.0, 1.0, -1e-15])) is None
    assert significant_negative(np.array([2.0, 1.0, -0.5])) == -0.5
    args = ["stress", str(synth_corpus), "--min-count", "50", "--shards", "0"]
    # The plug-in is Euclidean up to rounding: no line.
    res = runner.invoke(app, [*args, "--estimator", "plugin"])
    assert res.exit_code == 0 and "most negative eigenvalue" not in res.stdout
    # The cross-fit has negative eigenvalues by design: one line, no warning.
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and res.stderr == ""
    assert "most negative eigenvalue" in res.stdout and "signal rank" in res.stdout


def test_two_positions_warn_that_the_comparison_is_empty(tmp_path: Path) -> None:
    corpus = tmp_path / "two.txt"
    corpus.write_text("a b\nb c\nc a\nb a\n")
    # Plug-in: 4 sequences are too few for a cross-fit to say anything (its estimate of the one
    # squared distance may come out negative, and every stress is then 1).
    args = ["stress", str(corpus), "--min-count", "1", "--shards", "0", "--json"]
    res = runner.invoke(app, [*args, "--estimator", "plugin"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["corpus"]["n_eff"] == 2
    assert max(e["stress"] for e in doc["encodings"] if e["name"] != "nope") < 1e-7
    note = (
        f"{corpus}: only 2 positions are analysed (n_eff=2), so every encoding that separates "
        "them has stress 0; lower --min-count or add data to compare encodings"
    )
    assert note in doc["warnings"]
    assert res.stderr == f"Warning: {note}\n"
