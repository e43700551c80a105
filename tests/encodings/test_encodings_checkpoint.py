"""Learned position tables from small checkpoints built here with real models' tensor names."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from safetensors.numpy import save_file
from scipy.spatial.distance import pdist, squareform

from posdiag.encodings import make_encoding, read_position_table
from posdiag.errors import PosdiagError

N, D = 12, 6


def table(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, D)).astype(np.float32)


def expected(t: np.ndarray, offset: int = 0) -> np.ndarray:
    return squareform(pdist(t[offset : offset + N].astype(np.float64)))


def checkpoint(path: Path, name: str, t: np.ndarray) -> Path:
    # A decoy of the same shape (the token embeddings) must not be picked up.
    save_file(
        {"wte.weight": table(t.shape[0], 99), name: t, "ln_f.bias": np.zeros(D, np.float32)},
        str(path),
    )
    return path


@pytest.mark.parametrize(
    "name,offset",
    [
        ("bert.embeddings.position_embeddings.weight", 0),  # BERT
        ("embeddings.position_embeddings.weight", 0),  # BertModel saved bare
        ("roberta.embeddings.position_embeddings.weight", 2),  # RoBERTa: padding_idx + 1
        ("transformer.wpe.weight", 0),  # GPT-2 LM head model
        ("wpe.weight", 0),  # GPT-2 bare
        ("model.decoder.embed_positions.weight", 2),  # OPT
        ("electra.embeddings.position_embeddings.weight", 0),  # by suffix
    ],
)
def test_position_table_is_found_by_its_common_name(tmp_path: Path, name: str, offset: int) -> None:
    t = table(20)
    f = checkpoint(tmp_path / "model.safetensors", name, t)
    e = make_encoding("learned", N, {"path": str(f)})
    np.testing.assert_allclose(e.delta, expected(t, offset), atol=1e-6)
    assert e.params == {"path": str(f), "tensor": name, "offset": offset}
    assert e.n_params == N * D


def test_explicit_tensor_and_offset_override_the_search(tmp_path: Path) -> None:
    t = table(20)
    f = checkpoint(tmp_path / "m.safetensors", "encoder.pos.weight", t)
    e = make_encoding("learned", N, {"path": str(f), "tensor": "encoder.pos.weight", "offset": 3})
    np.testing.assert_allclose(e.delta, expected(t, 3), atol=1e-6)
    # Whisper stores a table under OPT's name without OPT's offset: offset=0 reads row 0 on.
    g = checkpoint(tmp_path / "w.safetensors", "model.decoder.embed_positions.weight", t)
    e = make_encoding("learned", N, {"path": str(g), "offset": 0})
    np.testing.assert_allclose(e.delta, expected(t), atol=1e-6)


def test_sharded_checkpoint_is_followed_to_the_right_shard(tmp_path: Path) -> None:
    t = table(16)
    save_file({"wte.weight": table(16, 5)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"transformer.wpe.weight": t}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(
        json.dumps(
            {
                "metadata": {"total_size": 1},
                "weight_map": {
                    "wte.weight": "model-00001-of-00002.safetensors",
                    "transformer.wpe.weight": "model-00002-of-00002.safetensors",
                },
            }
        )
    )
    for path in (index, tmp_path):  # the index itself, or the checkpoint directory
        e = make_encoding("learned", N, {"path": str(path)})
        np.testing.assert_allclose(e.delta, expected(t), atol=1e-6)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(PosdiagError) as exc:
        make_encoding("learned", N, {"path": str(index)})
    assert str(exc.value) == (
        f"learned: {index}: shard 'model-00002-of-00002.safetensors' holding "
        "'transformer.wpe.weight' is missing"
    )


def test_npy_table(tmp_path: Path) -> None:
    t = table(15)
    np.save(tmp_path / "pos.npy", t)
    e = make_encoding("learned", N, {"path": str(tmp_path / "pos.npy")})
    np.testing.assert_allclose(e.delta, expected(t), atol=1e-6)


def test_vit_table_with_a_batch_axis(tmp_path: Path) -> None:
    t = table(20)
    f = tmp_path / "vit.safetensors"
    save_file({"vit.embeddings.position_embeddings": t[None]}, str(f))
    np.testing.assert_allclose(
        make_encoding("learned", N, {"path": str(f)}).delta, expected(t), atol=1e-6
    )


def test_bfloat16_checkpoint(tmp_path: Path) -> None:
    # Values with 8 significant bits are exact in bfloat16; write the file by hand (numpy has no
    # bfloat16 to save from).
    t = (np.random.default_rng(1).integers(-64, 64, size=(14, D)) / 8).astype(np.float32)
    data = (t.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = {
        "wpe.weight": {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [0, len(data)]}
    }
    raw = json.dumps(header).encode()
    f = tmp_path / "bf16.safetensors"
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    got = read_position_table(str(f))
    np.testing.assert_array_equal(got.rows, t)
    assert got.tensor == "wpe.weight"


def test_a_table_shorter_than_n_eff_names_both_lengths(tmp_path: Path) -> None:
    f = checkpoint(tmp_path / "gpt2.safetensors", "wpe.weight", table(10))
    with pytest.raises(PosdiagError) as exc:
        make_encoding("learned", N, {"path": str(f)})
    assert (
        str(exc.value) == f"learned: {f}: table 'wpe.weight' has 10 rows; the corpus needs n_eff=12"
    )
    g = checkpoint(tmp_path / "opt.safetensors", "model.decoder.embed_positions.weight", table(13))
    with pytest.raises(PosdiagError) as exc:
        make_encoding("learned", N, {"path": str(g)})
    assert str(exc.value) == (
        f"learned: {g}: table 'model.decoder.embed_positions.weight' has 13 rows "
        "(11 positions after offset 2); the corpus needs n_eff=12"
    )
    np.save(tmp_path / "short.npy", table(5))
    with pytest.raises(PosdiagError) as exc:
        make_encoding("learned", N, {"path": str(tmp_path / "short.npy")})
    assert (
        str(exc.value)
        == f"learned: {tmp_path / 'short.npy'}: table has 5 rows; the corpus needs n_eff=12"
    )


def test_unknown_names_and_bad_files_are_clear_errors(tmp_path: Path) -> None:
    f = tmp_path / "x.safetensors"
    save_file({"a.weight": table(20), "b.weight": table(20)}, str(f))
    with pytest.raises(PosdiagError) as exc:
        make_encoding("learned", N, {"path": str(f)})
    assert str(exc.value) == (
        f"learned: {f}: no position-embedding tensor under a known name; pass tensor=NAME; "
        "tensors: a.weight, b.weight"
    )
    with pytest.raises(PosdiagError) as exc:
        make_encoding("learned", N, {"path": str(f), "tensor": "c"})
    assert str(exc.value) == f"learned: {f}: no tensor 'c'; tensors: a.weight, b.weight"
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x01\x02")
    with pytest.raises(PosdiagError, match=r"not a readable \.safetensors file"):
        make_encoding("learned", N, {"path": str(bad)})
    with pytest.raises(PosdiagError) as exc:
        make_encoding("learned", N, {"path": str(tmp_path)})
    assert str(exc.value) == (
        f"learned: {tmp_path}: directory holds neither model.safetensors nor "
        "model.safetensors.index.json"
    )


def test_learned_reads_posdiag_own_encoding_file(
    cli: Callable[..., Result], tmp_path: Path, synth_corpus: Path
) -> None:
    enc = tmp_path / "e.safetensors"
    args = [str(synth_corpus), "--min-count", "50"]
    assert cli(["build-encoding", *args, "-r", "2", "-d", "8", "-o", str(enc)]).exit_code == 0
    res = cli(
        ["stress", *args, "--shards", "0", "--json", "-e", f"learned:path={enc}", "-e", "mds-2"],
    )
    assert res.exit_code == 0, res.stderr
    rows = {e["name"]: e for e in json.loads(res.stdout)["encodings"]}
    assert rows["learned"]["params"]["tensor"] == "encoding"
    # The file holds the full-data rank-2 MDS coordinates: the in-sample mds-2 figure.
    assert abs(rows["learned"]["stress"] - rows["mds-2"]["in_sample"]) < 1e-5  # float32 file
