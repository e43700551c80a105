"""Where sequences come from, streamed (:func:`open_source`): files, folders and globs,
``save_to_disk`` folders, Hugging Face data sets, and pre-tokenized id files (memory-mapped).

Text sources never hold more than one line, CSV record or ``datasets`` batch in memory (a
``.json`` array is parsed whole); errors name the file (and the line when there is one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob as globlib
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._util.validate import check_choice, check_float, check_int
from ..errors import PosdiagError
from ._datasets import (
    PRESETS,
    HubUnavailable,
    Preset,
    _datafile_texts,
    _disk_texts,
    _hf_columns,
    _hub_texts,
    _load_disk,
    _load_hf,
    _local_copy,
    _parquet_rows,
    _parse_hub,
    hub_offline,
    local_command,
    offline_mode,
)
from ._textfiles import DEFAULT_COLUMN, _file_texts, _first_line

__all__ = [
    "DTYPES",
    "FORMATS",
    "PRESETS",
    "HubUnavailable",
    "Preset",
    "Source",
    "hub_offline",
    "local_command",
    "offline_mode",
    "open_source",
]

TEXT_FORMATS = ("txt", "jsonl", "json", "csv", "tsv")
DATASETS_FORMATS = ("parquet", "arrow")
ID_FORMATS = ("npy", "bin")
FORMATS = TEXT_FORMATS + DATASETS_FORMATS + ID_FORMATS
DTYPES = ("uint16", "uint32")
DATA_DIR_ENV = "POSDIAG_DATA_DIR"


@dataclass(frozen=True)
class Source:
    """A corpus and how to read sequences from it.

    Attributes
    ----------
    name : str
        The corpus as the user gave it (path, glob, preset, ``hf:...``, ``-``); used in messages.
    format : str
        A file format of :data:`FORMATS`, ``disk`` (a ``save_to_disk`` folder) or ``hf`` (a
        data set ``datasets.load_dataset`` reads).
    column, limit, sample, seed, dtype, group_by
        As :func:`open_source` takes them.
    size : int or None
        Total size in bytes of the files, when known.
    files : tuple of str
        The files read, in order (empty for stdin and hub data sets).
    length : int or None
        Documents (ids: tokens) when known cheaply, for the progress bar.
    dataset, config, split : str or None
        For ``hf`` and ``disk``: what ``datasets`` loads (a hub id or a local folder).
    """

    name: str
    format: str
    column: str | None = None
    size: int | None = None
    files: tuple[str, ...] = ()
    length: int | None = None
    limit: int | None = None
    sample: float | None = None
    seed: int = 0
    dataset: str | None = None
    config: str | None = None
    split: str | None = None
    dtype: str | None = None
    group_by: str | None = None

    @property
    def is_ids(self) -> bool:
        """Whether this source holds token ids rather than text."""
        return self.format in ID_FORMATS

    @property
    def expected(self) -> int | None:
        """Documents (ids: tokens) this read will cover, when known; ``sample`` is approximate."""
        if self.length is None:
            return self.limit
        total = self.length if self.limit is None else min(self.length, self.limit)
        return total if self.sample is None else round(total * self.sample)

    def texts(self) -> Iterator[str]:
        """Yield the documents' texts in order, after ``limit`` and ``sample``."""
        if self.is_ids:
            raise PosdiagError(f"{self.name}: holds token ids, not text")
        return _select(self._all_texts(), self.limit, self.sample, self.seed)

    def _all_texts(self) -> Iterator[str]:
        if self.format == "hf":
            yield from _hub_texts(self)
        elif self.format == "disk":
            yield from _disk_texts(self)
        elif self.name == "-":
            yield from _file_texts("-", self.format, self.column, self.group_by)
        else:
            # Runs of consecutive parquet/arrow files go to datasets in one call.
            for fmt, run in itertools.groupby(self.files, key=_format_of):
                if fmt in DATASETS_FORMATS:
                    yield from _datafile_texts(
                        tuple(run), fmt, self.column, self.name, self.group_by
                    )
                else:
                    for f in run:
                        yield from _file_texts(f, fmt, self.column, self.group_by)

    def token_ids(self) -> np.ndarray:
        """The ids as a read-only memory-mapped 1-D array (``npy`` and ``bin`` sources)."""
        if not self.is_ids:
            raise PosdiagError(f"{self.name}: holds text, not token ids")
        path = self.files[0]
        if self.format == "npy":
            return np.load(path, mmap_mode="r", allow_pickle=False).reshape(-1)
        return np.memmap(path, dtype=np.dtype(self.dtype or "uint16"), mode="r")


def _select(
    texts: Iterator[str], limit: int | None, sample: float | None, seed: int
) -> Iterator[str]:
    """The first ``limit`` documents kept by a seeded Bernoulli(``sample``) draw."""
    if sample is not None:
        rng = np.random.default_rng(seed)
        texts = (t for t in texts if rng.random() < sample)
    return itertools.islice(texts, limit)


def _format_of(name: str) -> str:
    base = name[:-3] if name.lower().endswith(".gz") else name
    suffix = Path(base).suffix.lower().lstrip(".")
    if suffix == "ndjson":
        return "jsonl"
    return suffix if suffix in FORMATS else "txt"


def _is_glob(name: str) -> bool:
    return any(c in name for c in "*?[")


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    )


def _listed(path: Path) -> list[str]:
    """Corpus files in a folder (recursively), sorted; hidden files and folders skipped."""
    out = []
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        if _format_of(p.name) != "txt" or p.name.lower().endswith((".txt", ".txt.gz")):
            out.append(str(p))
    return out


def _check_file(name: str) -> None:
    path = Path(name)
    if not path.exists():
        raise PosdiagError(f"{name}: no such file")
    if not os.access(path, os.R_OK):
        raise PosdiagError(f"{name}: cannot read the file (permission denied)")


def open_source(
    name: str,
    column: str | None = None,
    *,
    format: str | None = None,
    limit: int | None = None,
    sample: float | None = None,
    seed: int = 0,
    data_dir: str | None = None,
    dtype: str | None = None,
    group_by: str | None = None,
) -> Source:
    """Check that ``name`` can be read and describe how to read it.

    Parameters
    ----------
    name : str
        A file, a folder or glob of files, a ``save_to_disk`` folder, a preset name
        (``PRESET[@SPLIT]``), ``hf:OWNER/NAME[:CONFIG][@SPLIT]``, or ``-`` for stdin.
    column : str, optional
        Text field (default ``text``, or the preset's column).
    format : str, optional
        Override the format guessed from the suffix (files and stdin).
    limit : int, optional
        Read only the first ``limit`` documents (ids: windows).
    sample : float in (0, 1], optional
        Keep a seeded random fraction of the documents (ids: windows).
    seed : int
        Seed of ``sample``.
    data_dir : str, optional
        Folder holding local copies of presets and hub data sets (else ``$POSDIAG_DATA_DIR``).
    dtype : str, optional
        ``uint16`` (default) or ``uint32``, for raw ``.bin`` token files.
    group_by : str, optional
        Field naming each record's sampling unit (records of ``.jsonl``, ``.json``, ``.csv``,
        ``.tsv``, ``.parquet`` and data sets).
    """
    if limit is not None:
        limit = check_int("limit", limit, 1)
    if sample is not None:
        sample = check_float("sample", sample, 0.0, 1.0, lo_open=True)
    seed = check_int("seed", seed, 0)
    if dtype is not None:
        check_choice("dtype", dtype, DTYPES)
    if format is not None:
        check_choice("format", format, FORMATS)
    common: dict[str, Any] = {"limit": limit, "sample": sample, "seed": seed, "group_by": group_by}

    if name == "-":
        fmt = format or "txt"
        if fmt not in TEXT_FORMATS:
            raise PosdiagError(
                f"stdin: format must be one of {', '.join(TEXT_FORMATS)}; got {fmt!r}"
            )
        _check_column(name, fmt, column)
        _check_group(name, fmt, group_by)
        return Source(name=name, format=fmt, column=column, **common)
    if name.startswith("hf:"):
        dataset, config, split = _parse_hub(name[3:])
        col = column or DEFAULT_COLUMN
        return _hf_source(name, dataset, config, split or "train", col, data_dir, common)
    path = Path(name)
    if not path.exists() and not _is_glob(name):
        base, _, split = name.rpartition("@") if "@" in name else (name, "", "")
        if split and Path(base).is_dir() and _is_saved_dataset(Path(base)):
            return _disk_source(name, base, split, column, common)
        if base in PRESETS:
            return _preset_source(name, PRESETS[base], split or None, column, data_dir, common)
        if not path.suffix and "/" not in name:
            raise PosdiagError(
                f"{name}: no such file, and not a preset (presets: {', '.join(PRESETS)}; "
                "see 'posdiag corpora'; hub data sets: hf:OWNER/NAME)"
            )
        raise PosdiagError(f"{name}: no such file")
    if path.is_dir() and _is_saved_dataset(path):
        return _disk_source(name, str(path), None, column, common)
    return _files_source(name, path, column, format, dtype, common)


def _files_source(
    name: str,
    path: Path,
    column: str | None,
    format: str | None,
    dtype: str | None,
    common: dict[str, Any],
) -> Source:
    """An existing file, or the files of a folder or a glob."""
    # An existing file is itself even when its name has glob characters ('data[1].txt').
    if path.is_dir() or (_is_glob(name) and not path.is_file()):
        files = _listed(path) if path.is_dir() else sorted(globlib.glob(name, recursive=True))
        files = [f for f in files if Path(f).is_file()]
        if not files:
            what = "folder" if path.is_dir() else "glob"
            raise PosdiagError(
                f"{name}: the {what} matches no corpus files "
                f"(.txt, .jsonl, .json, .csv, .tsv, .gz of these, .parquet, .arrow)"
            )
    else:
        files = [name]
    for f in files:
        _check_file(f)
    fmts = {format or _format_of(f) for f in files}
    if fmts & set(ID_FORMATS):
        if len(files) > 1 or files[0] != name:
            raise PosdiagError(
                f"{name}: token id files (.npy, .bin) are read one at a time, by their own path; "
                f"this matches {len(files)} file(s)"
            )
        return _ids_source(name, format or _format_of(name), dtype, column, common)
    if dtype is not None:
        raise PosdiagError(f"{name}: --dtype applies to .bin token files; this is text")
    for fmt in fmts:
        _check_column(name, fmt, column)
        _check_group(name, fmt, common.get("group_by"))
    size = sum(Path(f).stat().st_size for f in files)
    length = sum(_parquet_rows(f, column) for f in files) if fmts == {"parquet"} else None
    fmt = format or (fmts.pop() if len(fmts) == 1 else "mixed")
    return Source(
        name=name, format=fmt, column=column, size=size, files=tuple(files), length=length, **common
    )


def _check_column(name: str, fmt: str, column: str | None) -> None:
    if column is not None and fmt == "txt":
        raise PosdiagError(
            f"{name}: --column applies to .jsonl, .json, .csv, .tsv, .parquet and data sets; "
            f"this is plain text (one sequence per line); got column {column!r}"
        )


def _check_group(name: str, fmt: str, group_by: str | None) -> None:
    if group_by is not None and fmt in ("txt", *ID_FORMATS):
        what = "plain text (one sequence per line)" if fmt == "txt" else "token ids"
        raise PosdiagError(
            f"{name}: --group-by reads a field of .jsonl, .json, .csv, .tsv, .parquet records "
            f"and data sets; this is {what}; got field {group_by!r}"
        )


def _ids_source(
    name: str, fmt: str, dtype: str | None, column: str | None, common: dict[str, Any]
) -> Source:
    if column is not None:
        raise PosdiagError(f"{name}: --column does not apply to token id files")
    size = Path(name).stat().st_size
    if fmt == "npy":
        if dtype is not None:
            raise PosdiagError(f"{name}: --dtype applies to raw .bin files; a .npy has its own")
        try:
            arr = np.load(name, mmap_mode="r", allow_pickle=False)
        except Exception as exc:
            raise PosdiagError(f"{name}: not a valid .npy file ({_first_line(exc)})") from None
        if arr.dtype.kind not in "iu":
            raise PosdiagError(f"{name}: token ids must be integers; got dtype {arr.dtype}")
        return Source(name=name, format="npy", size=size, files=(name,), length=arr.size, **common)
    dt = dtype or "uint16"
    width = np.dtype(dt).itemsize
    if size % width:
        raise PosdiagError(
            f"{name}: size {size:,} bytes is not a multiple of {width} (--dtype {dt})"
        )
    return Source(
        name=name, format="bin", size=size, files=(name,), length=size // width, dtype=dt, **common
    )


def _disk_source(
    name: str, path: str, split: str | None, column: str | None, common: dict[str, Any]
) -> Source:
    ds = _load_disk(name, path, split)
    col = column or DEFAULT_COLUMN
    if col not in ds.column_names:
        raise PosdiagError(f"{name}: no column {col!r}; columns: {', '.join(ds.column_names)}")
    return Source(name, "disk", column, length=len(ds), dataset=path, split=split, **common)


def _preset_source(
    name: str,
    preset: Preset,
    split: str | None,
    column: str | None,
    data_dir_opt: str | None,
    common: dict[str, Any],
) -> Source:
    if split is not None and preset.splits and split not in preset.splits:
        from ..encodings._core import did_you_mean

        raise PosdiagError(
            f"{name}: preset {preset.name} has no split {split!r}; "
            f"{did_you_mean(split, preset.splits)}splits: {', '.join(preset.splits)}"
        )
    return _hf_source(
        name,
        preset.dataset,
        preset.config,
        split or preset.split,
        column or preset.column,
        data_dir_opt,
        common,
        local_names=(preset.name,),
    )


def _hf_source(
    name: str,
    dataset: str,
    config: str | None,
    split: str,
    column: str,
    data_dir_opt: str | None,
    common: dict[str, Any],
    local_names: tuple[str, ...] = (),
) -> Source:
    root = data_dir_opt or os.environ.get(DATA_DIR_ENV) or None  # --data-dir, else the env
    local = _local_copy(dataset, local_names, root)
    if local is not None:
        if local.is_dir() and _is_saved_dataset(local):
            return _disk_source(name, str(local), split, column, common)
        if local.is_dir() and config is not None and (local / config).is_dir():
            local, config = local / config, None  # a hub clone: one folder per config
        if local.is_file():
            return open_source(str(local), column, **common)
        dataset = str(local)
    src = Source(name, "hf", column, dataset=dataset, config=config, split=split, **common)
    ds = _load_hf(src)  # fail now, not in the middle of the progress bar
    cols = _hf_columns(ds)
    if cols is not None and column not in cols:
        raise PosdiagError(f"{name}: no column {column!r}; columns: {', '.join(cols)}")
    length = None
    with contextlib.suppress(Exception):
        length = int(ds.info.splits[split].num_examples) or None
    return dataclasses.replace(src, length=length)
