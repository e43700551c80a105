"""Bounded, validated reading of counts ``.npz`` archives made by other people.

Before a byte of array data is decompressed, each member's (bounded) ``.npy`` header must
declare the size its zip entry holds, the CSR shapes must agree and the total must fit the
memory budget; reads are then bounded by those sizes (no deflate bomb). The CSR structure and
the metadata are then validated completely, so no crafted file reaches scipy's sparse kernels.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .._util.memory import require
from ..errors import PosdiagError

__all__ = ["read_counts_arrays"]

_MAX_HEADER = 10_000  # bytes of one .npy header (numpy's own default bound)
_MEMBERS = ("format", "shape", "data", "indices", "indptr", "posdiag_meta")
# Metadata keys and the JSON types they must have when present.
_META_TYPES: dict[str, tuple[type, ...]] = {
    "source": (str,),
    "tokenizer": (str,),
    "tokenizer_fingerprint": (str,),
    "view": (str,),
    "max_len": (int,),
    "vocab_size": (int,),
    "documents": (int,),
    "sequences": (int,),
    "tokens": (int,),
    "posdiag_version": (str,),
    "column": (str,),
    "limit": (int,),
    "sample": (int, float),
    "seed": (int,),
    "merged_from": (list,),
}


def _bad(path: str, why: str) -> PosdiagError:
    return PosdiagError(f"{path}: not a valid posdiag counts file ({why})")


def _header(fh: BinaryIO, path: str, name: str) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """(shape, dtype, header length) of the ``.npy`` stream ``fh``, without reading data."""
    try:
        major, _ = np.lib.format.read_magic(fh)
        read = (
            np.lib.format.read_array_header_1_0
            if major == 1
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read(fh, max_header_size=_MAX_HEADER)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise _bad(path, f"member {name!r} has no readable .npy header: {exc}") from None
    if dtype.hasobject:
        raise _bad(path, f"member {name!r} holds Python objects ({dtype})")
    if fortran and len(shape) > 1:
        raise _bad(path, f"member {name!r} is in Fortran order")
    return tuple(int(s) for s in shape), dtype, fh.tell()


def read_counts_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """The members of a counts archive as arrays, after the size checks.

    Returns
    -------
    dict of str -> ndarray
        ``format``, ``shape``, ``data``, ``indices``, ``indptr``, ``posdiag_meta`` and, when
        present, ``vocab``.

    Raises
    ------
    PosdiagError
        When the file is not a zip of ``.npy`` members, a member is missing, a declared size
        does not match its entry, the shapes disagree, or the arrays would not fit in memory.
    """
    name = str(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _bad(name, f"not a zip archive: {exc}") from None
    with zf:
        infos = {i.filename.removesuffix(".npy"): i for i in zf.infolist()}
        if "posdiag_meta" not in infos:
            raise PosdiagError(f"{name}: not a posdiag counts file (no 'posdiag_meta' entry)")
        missing = [m for m in _MEMBERS if m not in infos]
        if missing:
            raise _bad(name, f"no {missing[0]!r} member")
        wanted = [*_MEMBERS, *(["vocab"] if "vocab" in infos else [])]
        declared: dict[str, tuple[tuple[int, ...], np.dtype[Any], int]] = {}
        total = 0
        for m in wanted:
            info = infos[m]
            try:
                with zf.open(info) as fh:
                    shape, dtype, head = _header(fh, name, m)  # type: ignore[arg-type]
            except (zipfile.BadZipFile, OSError, NotImplementedError) as exc:
                raise _bad(name, f"member {m!r} cannot be read: {exc}") from None
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes != info.file_size - head:
                raise _bad(
                    name,
                    f"member {m!r} declares shape {shape} of {dtype} ({nbytes:,} bytes) "
                    f"but its entry holds {max(info.file_size - head, 0):,} bytes",
                )
            declared[m] = (shape, dtype, head)
            total += nbytes
        _check_declared(name, declared)
        # Reading, converting to int64 and building the CSR matrix hold about three copies.
        require(f"{name}: reading {total:,} bytes of counts", 3 * total)
        arrays: dict[str, np.ndarray] = {}
        for m in wanted:
            shape, dtype, head = declared[m]
            nbytes = math.prod(shape) * dtype.itemsize
            try:
                with zf.open(infos[m]) as fh:
                    fh.read(head)
                    raw = fh.read(nbytes)  # bounded by the checked declaration
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                raise _bad(name, f"member {m!r} is damaged: {exc}") from None
            if len(raw) != nbytes:
                raise _bad(name, f"member {m!r} is truncated")
            arrays[m] = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return arrays


def _check_declared(
    name: str, declared: dict[str, tuple[tuple[int, ...], np.dtype[Any], int]]
) -> None:
    """Shapes and dtypes agree with a CSR matrix, from the headers alone."""
    for m, kinds, ndim in (
        ("shape", "iu", 1),
        ("data", "iuf", 1),
        ("indices", "iu", 1),
        ("indptr", "iu", 1),
        ("format", "U", 0),
        ("posdiag_meta", "U", 0),
    ):
        shape, dtype, _ = declared[m]
        if dtype.kind not in kinds or len(shape) != ndim:
            raise _bad(name, f"member {m!r} has dtype {dtype} and shape {shape}")
    if declared["shape"][0] != (2,):
        raise _bad(name, f"'shape' must hold 2 numbers; got shape {declared['shape'][0]}")
    if declared["data"][0] != declared["indices"][0]:
        raise _bad(
            name,
            f"'data' has {declared['data'][0][0]:,} entries but 'indices' "
            f"{declared['indices'][0][0]:,}",
        )
    if "vocab" in declared:
        shape, dtype, _ = declared["vocab"]
        if dtype.kind != "U" or len(shape) != 1:
            raise _bad(name, f"member 'vocab' has dtype {dtype} and shape {shape}")


def validate_csr(name: str, arrays: dict[str, np.ndarray]) -> tuple[int, int, dict[str, Any]]:
    """Check the CSR structure and metadata; return (rows, columns, meta).

    Raises
    ------
    PosdiagError
        Naming the file and the first rule broken.
    """
    if str(arrays["format"]) != "csr":
        raise _bad(name, f"format must be 'csr'; got {str(arrays['format'])!r}")
    rows, cols = (int(s) for s in arrays["shape"])
    if rows < 1 or cols < 1:
        raise _bad(name, f"shape must be positive; got ({rows}, {cols})")
    indptr, indices, data = arrays["indptr"], arrays["indices"], arrays["data"]
    nnz = int(data.shape[0])
    if indptr.shape[0] != rows + 1:
        raise _bad(
            name,
            f"'indptr' has {indptr.shape[0]:,} entries; shape {rows:,} rows needs {rows + 1:,}",
        )
    ptr = indptr.astype(np.int64)
    if ptr[0] != 0 or ptr[-1] != nnz:
        raise _bad(name, f"'indptr' must run from 0 to nnz={nnz:,}; got {ptr[0]} .. {ptr[-1]}")
    steps = np.diff(ptr)
    if steps.size and steps.min() < 0:
        row = int(np.argmax(steps < 0))
        raise _bad(name, f"'indptr' decreases at row {row}")
    if nnz:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= cols:
            bad = lo if lo < 0 else hi
            raise _bad(
                name, f"column index {bad:,} is outside [0, {cols:,}) of shape {(rows, cols)}"
            )
        if data.dtype.kind == "f":
            if not np.isfinite(data).all():
                raise _bad(name, "counts must be finite; found NaN or infinity")
            if not (data == np.round(data)).all():
                raise _bad(name, "counts must be whole numbers; found a fraction")
        if data.min() < 0:
            raise _bad(name, f"counts must be >= 0; found {data.min()}")
        if data.dtype.kind in "uf" and data.max() > np.iinfo(np.int64).max:
            raise _bad(name, "a count does not fit in int64")
    try:
        meta: Any = json.loads(str(arrays["posdiag_meta"]))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _bad(name, f"'posdiag_meta' is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise _bad(name, f"'posdiag_meta' must be a JSON object; got {type(meta).__name__}")
    for key, types in _META_TYPES.items():
        if key in meta and (not isinstance(meta[key], types) or isinstance(meta[key], bool)):
            want = " or ".join(t.__name__ for t in types)
            got = f"{type(meta[key]).__name__} {meta[key]!r}"
            raise _bad(name, f"metadata {key!r} must be {want}; got {got}"[:200])
    if "vocab_size" in meta and meta["vocab_size"] != cols:
        raise _bad(
            name, f"metadata vocab_size={meta['vocab_size']} but the matrix has {cols} columns"
        )
    if "max_len" in meta and meta["max_len"] != rows:
        raise _bad(name, f"metadata max_len={meta['max_len']} but the matrix has {rows} rows")
    if "vocab" in arrays and arrays["vocab"].shape[0] != cols:
        raise _bad(name, f"'vocab' lists {arrays['vocab'].shape[0]:,} tokens for {cols:,} columns")
    return rows, cols, meta
