"""posdiag inspect: separation, norms, rank and the corpus fit of an encoding table."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from safetensors.numpy import save_file

from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import count_texts
from posdiag.geometry.core import separation, stress_by_rank
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.inspection import inspect_table, read_encoding_file
from posdiag.synthetic import SynthSpec, synth_texts


def test_separation_flags_a_table_with_two_equal_rows() -> None:
    p = np.random.default_rng(0).standard_normal((8, 5))
    p[5] = p[2]
    sep = separation(p)
    assert sep.min_distance == 0.0 and sep.ratio == 0.0
    assert sep.collapsed[0][:2] == (2, 5)
    assert [c[:2] for c in sep.collapsed] == [(2, 5)]


def test_separation_matches_brute_force() -> None:
    p = np.random.default_rng(1).standard_normal((7, 3))
    dists = {
        (i, j): float(np.linalg.norm(p[i] - p[j])) for i, j in itertools.combinations(range(7), 2)
    }
    med = float(np.median(list(dists.values())))
    sep = separation(p, tol=0.6)
    assert sep.min_distance == pytest.approx(min(dists.values()))
    assert sep.median_distance == pytest.approx(med)
    expected = sorted((k for k, v in dists.items() if v <= 0.6 * med), key=dists.__getitem__)
    assert [c[:2] for c in sep.collapsed] == expected


def _geometry(positions: int = 12):
    spec = SynthSpec(positions=positions, vocab=40, sequences=2_000)
    counts = count_texts(synth_texts(spec), load_tokenizer(), max_len=positions)
    return corpus_geometry(counts, 10)


def test_inspect_with_a_corpus_scores_the_mds_table_like_the_spectrum() -> None:
    geo = _geometry()
    table = (
        geo.mds.coordinates(3)
        @ np.linalg.qr(np.random.default_rng(0).standard_normal((16, 3)))[0].T
    )
    x = inspect_table(table, geo)
    assert x.fit is not None
    assert x.fit.stress == pytest.approx(stress_by_rank(geo.mds.eigenvalues)[2], abs=1e-9)
    assert x.table.effective_rank[0.01] <= 3
    # The random initialisation carries no order: about half the pairs are violated.
    assert 0.35 < x.fit.baseline_violations < 0.65
    assert x.fit.violations < 0.2
    assert x.fit.baseline_stress > x.fit.stress


def test_inspect_compares_on_the_common_prefix() -> None:
    geo = _geometry(12)
    x = inspect_table(np.random.default_rng(2).standard_normal((5, 4)), geo)
    assert x.fit is not None and x.fit.n == 5


def test_read_encoding_file_prefers_posdiag_encoding_tensor(tmp_path: Path) -> None:
    path = tmp_path / "e.safetensors"
    enc = np.arange(12, dtype=np.float32).reshape(4, 3)
    save_file({"A": np.ones((4, 1), np.float32), "encoding": enc}, str(path))
    table, tensor = read_encoding_file(path)
    assert tensor == "encoding" and np.array_equal(table, enc)
    npy = tmp_path / "t.npy"
    np.save(npy, enc)
    assert np.array_equal(read_encoding_file(npy)[0], enc)


def test_cli_inspect_json_and_errors(cli: Callable[..., Result], tmp_path: Path) -> None:
    p = np.random.default_rng(0).standard_normal((10, 6))
    p[7] = p[3]
    path = tmp_path / "t.npy"
    np.save(path, p)
    res = cli(["inspect", str(path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["table"]["separation"]["collapsed"] == [[3, 7, 0.0]]
    assert doc["table"]["rows"] == 10 and doc["baseline"]["rows"] == 10
    assert doc["fit"] is None
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(synth_texts(SynthSpec(positions=12, vocab=40, sequences=400))))
    res = cli(["inspect", str(path), "--corpus", str(corpus), "--min-count", "10"])
    assert res.exit_code == 0, res.output
    assert "monotonicity violations" in res.stdout and "collapsed pairs: (3,7)" in res.stdout
    res = cli(["inspect", str(tmp_path / "missing.npy")])
    assert res.exit_code == 2
    assert res.stderr == f"Error: learned: path '{tmp_path / 'missing.npy'}': no such file\n"
    np.save(tmp_path / "one.npy", np.zeros((1, 4)))
    res = cli(["inspect", str(tmp_path / "one.npy")])
    assert res.exit_code == 2
    assert (
        res.stderr == f"Error: {tmp_path / 'one.npy'}: an encoding table needs >= 2 rows; got 1\n"
    )
