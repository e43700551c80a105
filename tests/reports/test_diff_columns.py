"""``diff`` gives corpus B its own text column (``--column-b``), and a counts file counted with
another column says what to do."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.counts.corpus import corpus_counts
from posdiag.reports.drift import corpus_drift

runner = CliRunner()


@pytest.fixture
def tables(synth_corpus: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A.tsv holds the corpus in 'text', B.tsv the same lines in 'sentence' (SST-2's name)."""
    lines = synth_corpus.read_text().splitlines()
    paths = []
    for name, col in (("A.tsv", "text"), ("B.tsv", "sentence")):
        p = tmp_path / name
        with p.open("w", newline="") as fh:
            w = csv.writer(fh, delimiter="\t")
            w.writerow(["label", col])
            w.writerows([i % 2, line] for i, line in enumerate(lines))
        paths.append(p)
    return paths[0], paths[1]


def _diff(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["diff", *args, "--min-count", "50", "--json"])
    return r.exit_code, r.stdout, r.stderr


def test_column_b_reads_each_side_from_its_own_column(
    tables: tuple[Path, Path], synth_corpus: Path
) -> None:
    a, b = tables
    # One --column for both sides cannot read B (before: the only way).
    code, _, err = _diff(str(a), str(b), "--column", "text")
    assert code == 2 and "no column 'text'" in err
    code, out, err = _diff(str(a), str(b), "--column", "text", "--column-b", "sentence")
    assert code == 0, err
    doc = json.loads(out)
    # Same lines on both sides: the drift equals that of the plain text file against itself.
    want = corpus_drift(corpus_counts(str(synth_corpus)), corpus_counts(str(synth_corpus)))
    assert doc["a"]["n_eff"] == doc["b"]["n_eff"] == want.a.n_eff
    assert np.allclose(doc["position_hellinger"], want.position_hellinger, atol=1e-12)


def test_two_columns_of_one_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    p = tmp_path / "pairs.tsv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh, delimiter="\t")
        w.writerow(["question", "answer"])
        for _ in range(300):
            q = " ".join(rng.choice(["what", "is", "the", "a", "why"], size=8))
            r = " ".join(rng.choice(["yes", "no", "it", "is", "the"], size=8))
            w.writerow([q, r])
    code, out, err = _diff(str(p), str(p), "--column", "question", "--column-b", "answer")
    assert code == 0, err
    doc = json.loads(out)
    # Different vocabularies per column: the sides differ at every position.
    assert min(doc["position_hellinger"]) > 0.5


def test_counts_file_of_another_column_says_what_to_do(
    tables: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = tables
    npz = tmp_path / "b.npz"
    r = runner.invoke(app, ["count", str(b), "--column", "sentence", "-o", str(npz)])
    assert r.exit_code == 0, r.output
    code, _, err = _diff(str(a), str(npz), "--column", "text")
    assert code == 2
    assert err == (
        f"Error: {npz}: was counted with column='sentence', not column='text'; drop --column to "
        f"use {npz} as counted, or count the corpus again with --column text (posdiag diff: "
        "--column-b sets corpus B's column on its own)\n"
    )
    # Following the advice works.
    code, _, err = _diff(str(a), str(npz), "--column", "text", "--column-b", "sentence")
    assert code == 0, err
