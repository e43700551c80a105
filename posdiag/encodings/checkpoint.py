"""Learned position tables from real checkpoints: ``.npy``, ``.safetensors``, sharded indexes;
positions ``0..n-1`` are rows ``offset..offset+n-1`` (OPT, BART and RoBERTa: offset 2).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._util.memory import require
from .._util.validate import check_int
from ..errors import PosdiagError

__all__ = ["PositionTable", "read_position_table"]

# (name, offset) under which checkpoints store absolute position tables, most specific first.
# The offset is the row of position 0: OPT/BART (`embed_positions`) and RoBERTa (padding_idx+1).
POSITION_TENSORS: tuple[tuple[str, int], ...] = (
    ("bert.embeddings.position_embeddings.weight", 0),  # BERT
    ("roberta.embeddings.position_embeddings.weight", 2),  # RoBERTa, XLM-R
    ("embeddings.position_embeddings.weight", 0),  # BertModel / ELECTRA / DistilBERT saved bare
    ("distilbert.embeddings.position_embeddings.weight", 0),
    ("transformer.wpe.weight", 0),  # GPT-2 with LM head
    ("wpe.weight", 0),  # GPT-2 bare
    ("model.decoder.embed_positions.weight", 2),  # OPT, BART decoder
    ("decoder.embed_positions.weight", 2),  # OPTModel saved bare
    ("model.encoder.embed_positions.weight", 2),  # BART encoder
    ("vit.embeddings.position_embeddings", 0),  # ViT (1, patches+1, d)
    ("position_embeddings.weight", 0),
    ("position_embeddings", 0),
)
# Suffixes tried when no exact name matches (checkpoints saved under another prefix).
_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("roberta.embeddings.position_embeddings.weight", 2),
    (".embeddings.position_embeddings.weight", 0),
    (".wpe.weight", 0),
    (".embed_positions.weight", 2),
)


@dataclass(frozen=True)
class PositionTable:
    """A position table read from a file.

    Attributes
    ----------
    rows : ndarray of shape (rows, d), float64
        The whole table, offset rows included.
    tensor : str
        The tensor it came from ("" for ``.npy``).
    offset : int
        Row of position 0.
    """

    rows: np.ndarray
    tensor: str
    offset: int


def _list_names(names: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _choose(path: str, names: Sequence[str], tensor: str) -> tuple[str, int]:
    """The tensor to read (``tensor``, else the first known name) and its automatic offset."""
    if tensor:
        if tensor not in names:
            raise PosdiagError(
                f"learned: {path}: no tensor {tensor!r}; tensors: {_list_names(sorted(names))}"
            )
        auto = [off for nm, off in POSITION_TENSORS if nm == tensor]
        auto += [off for suf, off in _SUFFIXES if tensor.endswith(suf)]
        return tensor, auto[0] if auto else 0
    present = set(names)
    for nm, off in POSITION_TENSORS:
        if nm in present:
            return nm, off
    for suf, off in _SUFFIXES:
        for nm in sorted(names):
            if nm.endswith(suf):
                return nm, off
    if "encoding" in present:  # a file written by posdiag build-encoding
        return "encoding", 0
    raise PosdiagError(
        f"learned: {path}: no position-embedding tensor under a known name; "
        f"pass tensor=NAME; tensors: {_list_names(sorted(names))}"
    )


# safetensors refuses headers above 100 MB; so does posdiag, before reading one.
_MAX_HEADER = 100_000_000


def _safetensors_header(file: Path) -> tuple[dict[str, dict[str, object]], int]:
    """The JSON header of a ``.safetensors`` file and where its data starts."""
    total = file.stat().st_size
    with file.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise ValueError("file shorter than the 8-byte header length")
        (size,) = struct.unpack("<Q", raw)
        # Never trust the declared length: it must fit in the file (and safetensors' 100 MB cap).
        if size > total - 8 or size > _MAX_HEADER:
            raise ValueError(
                f"header length {size:,} exceeds the {total - 8:,} bytes after it"
                if size > total - 8
                else f"header length {size:,} exceeds the safetensors limit of {_MAX_HEADER:,}"
            )
        header = json.loads(fh.read(size))
    if not isinstance(header, dict) or not all(isinstance(v, dict) for v in header.values()):
        raise ValueError("the header must be a JSON object of tensor entries")
    header.pop("__metadata__", None)
    return header, 8 + size


def _read_safetensor(file: Path, name: str) -> np.ndarray:
    # safetensors' numpy reader refuses bfloat16; its bits are a float32's top half: widened here.
    header, start = _safetensors_header(file)
    info = header[name]
    if info.get("dtype") == "BF16":
        lo, hi = (int(x) for x in info["data_offsets"])  # type: ignore[attr-defined]
        shape = tuple(int(s) for s in info["shape"])  # type: ignore[attr-defined]
        with file.open("rb") as fh:
            fh.seek(start + lo)
            bits = np.frombuffer(fh.read(hi - lo), dtype="<u2")
        return (bits.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    from safetensors import safe_open

    with safe_open(str(file), framework="np") as fh:
        return np.asarray(fh.get_tensor(name))


def _from_safetensors(path: str, file: Path, tensor: str) -> tuple[np.ndarray, str, int]:
    try:
        header, _ = _safetensors_header(file)
        name, offset = _choose(path, list(header), tensor)
        return _read_safetensor(file, name), name, offset
    except PosdiagError:
        raise
    except Exception as exc:  # a damaged file: struct, json, safetensors errors alike
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PosdiagError(f"learned: {path}: not a readable .safetensors file ({why})") from None


def _from_index(path: str, index: Path, tensor: str) -> tuple[np.ndarray, str, int]:
    """Follow a sharded checkpoint's ``weight_map`` to the shard holding the table."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise PosdiagError(
            f"learned: {path}: not a safetensors index (a JSON object with 'weight_map'): {exc}"
        ) from None
    name, offset = _choose(path, list(weight_map), tensor)
    shard = index.parent / str(weight_map[name])
    if not shard.is_file():
        raise PosdiagError(f"learned: {path}: shard {shard.name!r} holding {name!r} is missing")
    return _from_safetensors(str(shard), shard, name)[0], name, offset


def read_position_table(path: str, tensor: str = "", offset: int = -1) -> PositionTable:
    """Read a learned position table from a file or a checkpoint directory.

    Parameters
    ----------
    path : str
        ``.npy``; ``.safetensors``; a sharded checkpoint's ``*.safetensors.index.json``; or a
        directory holding ``model.safetensors`` or ``model.safetensors.index.json``.
    tensor : str
        Tensor name; empty = find it by the common names (:data:`POSITION_TENSORS`).
    offset : int
        Row of position 0; -1 = automatic (2 for OPT/BART ``embed_positions`` and RoBERTa,
        else 0).

    Returns
    -------
    PositionTable
    """
    offset = check_int("offset", offset, -1)
    p = Path(path)
    if p.is_dir():
        found = [p / c for c in ("model.safetensors", "model.safetensors.index.json")]
        found = [f for f in found if f.is_file()]
        if not found:
            raise PosdiagError(
                f"learned: {path}: directory holds neither model.safetensors nor "
                "model.safetensors.index.json"
            )
        p = found[0]
    if not p.is_file():
        raise PosdiagError(f"learned: path {path!r}: no such file")
    name, auto = "", 0
    if p.suffix == ".npy":
        if tensor:
            raise PosdiagError(
                f"learned: tensor={tensor!r} applies to .safetensors files, not {path}"
            )
        try:
            # Memory-mapped: a header claiming more than the file holds fails before allocating.
            table = np.load(p, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise PosdiagError(f"learned: {path}: not a readable .npy file ({exc})") from None
    elif p.suffix == ".safetensors":
        table, name, auto = _from_safetensors(path, p, tensor)
    elif p.name.endswith(".index.json"):
        table, name, auto = _from_index(path, p, tensor)
    else:
        raise PosdiagError(
            "learned: path must be a .npy, .safetensors, .safetensors.index.json or a checkpoint "
            f"directory; got {path!r}"
        )
    # ViT-style tables carry a leading batch axis of 1.
    while table.ndim > 2 and table.shape[0] == 1:
        table = table[0]
    if table.ndim != 2:
        raise PosdiagError(
            f"learned: {path}: table must be 2-D (positions x d); got shape {tuple(table.shape)}"
        )
    require(f"learned: {path}: a table of shape {tuple(table.shape)}", 3 * 8 * table.size)
    table = np.asarray(table, dtype=np.float64)
    bad = ~np.isfinite(table)
    if bad.any():
        row, col = (int(x) for x in np.argwhere(bad)[0])
        raise PosdiagError(
            f"learned: {path}: table must be finite; got {table[row, col]} at row {row}, "
            f"column {col} ({int(bad.sum())} non-finite values)"
        )
    return PositionTable(table, name, auto if offset < 0 else offset)
