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
from posdiag.synthetic import drift_distributions, sample_texts


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
