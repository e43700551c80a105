"""The low-rank MDS encoding file (docs/geometry.md section 7)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from scipy.spatial.distance import pdist

from posdiag.corpus.tokenizers import WhitespaceTokenizer
from posdiag.counts.core import count_texts
from posdiag.errors import PosdiagError
from posdiag.geometry.core import stress_by_rank
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.export import N_LEADING, low_rank_encoding, write_encoding
from tests._data import drift_distributions, sample_texts


@pytest.fixture(scope="module")
def geometry():  # type: ignore[no-untyped-def]
    mu = drift_distributions(10, 25, rank=2, seed=0)
    counts = count_texts(sample_texts(mu, 500, seed=1), WhitespaceTokenizer(), max_len=10)
    return corpus_geometry(counts, min_count=50)


def test_safetensors_file_shapes_metadata_and_distances(geometry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    enc = low_rank_encoding(geometry, 3, 16, seed=5)
    (path,) = write_encoding(enc, tmp_path / "enc.safetensors")
    t = load_file(str(path))
    assert t["encoding"].shape == (10, 16) and t["A"].shape == (10, 3) and t["B"].shape == (16, 3)
    assert all(v.dtype == np.float32 for v in t.values())
    np.testing.assert_allclose(t["B"].T @ t["B"], np.eye(3), atol=1e-6)
    np.testing.assert_allclose(pdist(t["encoding"]), pdist(geometry.mds.coordinates(3)), atol=1e-5)
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as fh:
        meta = fh.metadata()
    assert meta["r"] == "3" and meta["d"] == "16" and meta["n"] == "10" and meta["view"] == "text"
    assert float(meta["stress"]) == pytest.approx(stress_by_rank(geometry.mds.eigenvalues)[2])
    assert json.loads(meta["eigenvalues"])[0] == pytest.approx(geometry.mds.eigenvalues[0])
    assert enc.n_params == 3 * (10 + 16) and enc.dense_params == 160


def test_npy_file_with_json_metadata_is_deterministic(geometry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = write_encoding(low_rank_encoding(geometry, 2, 8, seed=1), tmp_path / "a.npy")
    b = write_encoding(low_rank_encoding(geometry, 2, 8, seed=1), tmp_path / "b.npy")
    assert [p.name for p in a] == ["a.npy", "a.json"]
    assert a[0].read_bytes() == b[0].read_bytes()
    assert json.loads(a[1].read_text())["r"] == 2
    c = low_rank_encoding(geometry, 2, 8, seed=2).encoding
    assert not np.allclose(np.load(a[0]), c)  # another seed, another B ...
    np.testing.assert_allclose(pdist(np.load(a[0])), pdist(c), atol=1e-5)  # ... same geometry


def test_refusals_write_nothing(geometry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    enc = low_rank_encoding(geometry, 2, 8)
    with pytest.raises(PosdiagError, match=r"^'rank' must be an int in \[1, n_eff-1=9\]; got 10$"):
        low_rank_encoding(geometry, 10, 16)
    with pytest.raises(PosdiagError, match=r"^'dim' must be an int in \[rank=3, inf\]; got 2$"):
        low_rank_encoding(geometry, 3, 2)
    with pytest.raises(PosdiagError, match=r"folder '.*nowhere' does not exist$"):
        write_encoding(enc, tmp_path / "nowhere" / "e.npy")
    (tmp_path / "e.json").write_text("keep")
    with pytest.raises(PosdiagError, match=r"e.json: already exists; pass --force to overwrite$"):
        write_encoding(enc, tmp_path / "e.npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.json"]
    assert (tmp_path / "e.json").read_text() == "keep"


def test_interrupt_leaves_no_partial_file(
    geometry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    def boom(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "save", boom)
    with pytest.raises(KeyboardInterrupt):
        write_encoding(low_rank_encoding(geometry, 2, 8), tmp_path / "e.npy")
    assert list(tmp_path.iterdir()) == []


def test_npy_sidecar_holds_json_numbers_and_lists(geometry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from posdiag.encodings.file_meta import read_encoding_meta

    enc = low_rank_encoding(geometry, 2, 8, seed=1)
    npy, side = write_encoding(enc, tmp_path / "a.npy")
    meta = json.loads(side.read_text())
    # Before issue 34: "d": "8", "stress": "0.0123...", "eigenvalues": "[1.2, ...]".
    assert {k: meta[k] for k in ("max_len", "min_count", "n", "r", "d", "seed")} == {
        "max_len": 10,
        "min_count": 50,
        "n": 10,
        "r": 2,
        "d": 8,
        "seed": 1,
    }
    assert meta["stress"] == enc.stress == stress_by_rank(geometry.mds.eigenvalues)[1]
    assert meta["eigenvalues"] == [float(x) for x in geometry.mds.eigenvalues[:N_LEADING]]
    assert meta["view"] == "text" and isinstance(meta["posdiag_version"], str)
    # The safetensors metadata stays strings (the format allows no other); both read the same,
    # and so does a sidecar written as strings by earlier versions.
    (st,) = write_encoding(enc, tmp_path / "a.safetensors")
    old = tmp_path / "old.npy"
    old.write_bytes(npy.read_bytes())
    old.with_suffix(".json").write_text(json.dumps(dict(enc.meta)))
    assert read_encoding_meta(npy) == read_encoding_meta(st) == read_encoding_meta(old)
    assert read_encoding_meta(npy)["d"] == "8"


def test_build_encoding_and_inspect_name_in_sample_and_held_out(
    bundled_corpus: Path, tmp_path: Path
) -> None:
    """Issue 34 item 7: build-encoding and inspect printed 'stress 0.1988' for rank 3 where the
    stress table says mds-3 0.3001: each figure is now named, and both agree with stress."""
    from typer.testing import CliRunner

    from posdiag.cli.app import app

    run = CliRunner().invoke
    corpus = str(bundled_corpus)
    rows = {
        e["name"]: e for e in json.loads(run(app, ["stress", corpus, "--json"]).stdout)["encodings"]
    }
    held, inside = rows["mds-3"]["stress"], rows["mds-3"]["in_sample"]
    assert held > inside + 0.05  # the two really differ
    out = tmp_path / "e.npy"
    res = run(app, ["build-encoding", corpus, "-o", str(out), "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["stress"] == pytest.approx(held, abs=1e-12)
    assert doc["in_sample"] == pytest.approx(inside, abs=1e-12)
    res = run(app, ["build-encoding", corpus, "-o", str(out), "--force"])
    assert (
        f"d=768, held-out stress {held:.4f} (the stress table's mds-3), in-sample stress "
        f"{inside:.4f} (the spectrum's tail at rank 3); parameters"
    ) in " ".join(res.stdout.split())
    res = run(app, ["inspect", str(out), "--corpus", corpus, "--json"])
    fit = json.loads(res.stdout)["fit"]
    assert fit["fitted_rank"] == 3
    assert fit["stress"] == pytest.approx(inside, abs=1e-6)  # a float32 table
    assert fit["heldout"] == pytest.approx(held, abs=1e-12)
    text = run(app, ["inspect", str(out), "--corpus", corpus]).stdout
    lines = [" ".join(ln.strip("│ ").split()) for ln in text.splitlines()]
    base = f"{json.loads(res.stdout)['fit']['baseline_stress']:.4f}"
    assert f"in-sample stress (rank 3, fitted to this corpus) │ {inside:.4f} │ {base}" in lines
    assert f"held-out stress (the stress table's mds-3) │ {held:.4f}" in lines
    # Another table, or another corpus: just its stress against the corpus.
    other = tmp_path / "r.npy"
    np.save(other, np.random.default_rng(0).normal(size=(76, 8)))
    text = run(app, ["inspect", str(other), "--corpus", corpus]).stdout
    assert "stress vs corpus" in text and "held-out" not in text and "in-sample" not in text
