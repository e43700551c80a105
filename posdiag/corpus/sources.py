"""Where sequences come from, streamed: local files, folders and globs, Hugging Face data sets,
and pre-tokenized id files.

Text sources yield one string per document and never hold more than one line, CSV record or
``datasets`` batch in memory (a ``.json`` array file is the one exception: it is parsed whole).
Id sources (``.npy``, ``.bin``) are memory-mapped. Errors name the file (and the line when there
is one).

Kinds of corpus (see :func:`open_source`):

- files: ``.txt``, ``.jsonl``/``.ndjson``, ``.json``, ``.csv``, ``.tsv`` (each also ``.gz``),
  ``.parquet`` and ``.arrow`` (read by ``datasets``); a folder or a glob of such files, read in
  sorted order; ``-`` for stdin;
- a ``Dataset.save_to_disk`` folder (read by ``datasets.load_from_disk``);
- Hugging Face data sets: a preset (``posdiag corpora``) or ``hf:OWNER/NAME[:CONFIG][@SPLIT]``,
  streamed with ``datasets`` (``streaming=True``); offline, the ``datasets`` cache is used;
- pre-tokenized ids: ``.npy`` or raw ``.bin`` (nanoGPT style) token files.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import glob as globlib
import gzip
import json
import os
import shlex
import socket
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO
from urllib.parse import urlparse

import numpy as np

from .._util.memory import available_memory, require
from .._util.validate import check_choice, check_float, check_int
from ..errors import PosdiagError
from .units import Grouped

__all__ = [
    "DTYPES",
    "FORMATS",
    "PRESETS",
    "HubUnavailable",
    "Preset",
    "Source",
    "hub_offline",
    "open_source",
]

TEXT_FORMATS = ("txt", "jsonl", "json", "csv", "tsv")
DATASETS_FORMATS = ("parquet", "arrow")
ID_FORMATS = ("npy", "bin")
FORMATS = TEXT_FORMATS + DATASETS_FORMATS + ID_FORMATS
DTYPES = ("uint16", "uint32")
DEFAULT_COLUMN = "text"
DATA_DIR_ENV = "POSDIAG_DATA_DIR"
# Rows per datasets batch: large enough to amortise Arrow -> Python conversion, small in memory.
_HF_BATCH = 1000
# Seconds to wait for the Hub before declaring it unreachable (instead of datasets' long retries).
_HUB_TIMEOUT = 3.0


@dataclass(frozen=True)
class Preset:
    """A named Hugging Face data set: where it lives and which column holds the text."""

    name: str
    dataset: str
    config: str | None
    split: str
    column: str
    summary: str
    # The data set's splits (those of its config), checked before the Hub is asked.
    splits: tuple[str, ...] = ()


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "sst2",
            "stanfordnlp/sst2",
            None,
            "train",
            "sentence",
            "SST-2 movie-review sentences",
            ("train", "validation", "test"),
        ),
        Preset(
            "imdb",
            "stanfordnlp/imdb",
            None,
            "train",
            "text",
            "IMDb movie reviews",
            ("train", "test", "unsupervised"),
        ),
        Preset(
            "wikitext-2",
            "Salesforce/wikitext",
            "wikitext-2-raw-v1",
            "train",
            "text",
            "WikiText-2 (raw), one line per row",
            ("train", "validation", "test"),
        ),
        Preset(
            "wikitext-103",
            "Salesforce/wikitext",
            "wikitext-103-raw-v1",
            "train",
            "text",
            "WikiText-103 (raw), one line per row",
            ("train", "validation", "test"),
        ),
        Preset(
            "tinystories",
            "roneneldan/TinyStories",
            None,
            "train",
            "text",
            "TinyStories",
            ("train", "validation"),
        ),
        Preset(
            "c4-en",
            "allenai/c4",
            "en",
            "validation",
            "text",
            "C4 English, validation split",
            ("train", "validation"),
        ),
    )
}


class HubUnavailable(PosdiagError):
    """A hub data set or tokenizer cannot be reached and is not in the local cache.

    For a data set, ``corpus`` is the corpus as the user gave it, ``local`` the file name the
    message suggests for a local copy and ``column`` its text column; :meth:`message_for` then
    rewrites the user's own command line to read that copy (``str(exc)`` says
    ``posdiag <command>``).
    """

    def __init__(
        self,
        message: str,
        *,
        corpus: str | None = None,
        local: str | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.corpus, self.local, self.column = corpus, local, column

    def message_for(self, argv: Sequence[str] | None) -> str:
        """The message with ``posdiag <command> ...`` replaced by ``argv`` (the arguments after
        ``posdiag``, command first) with the corpus swapped for the local copy and ``--column``
        set; every other option is kept as typed."""
        text = str(self)
        if not argv or self.corpus is None or self.local is None:
            return text
        old = _template_command(self.local, self.column)
        return text.replace(old, local_command(argv, self.corpus, self.local, self.column))


_COMMAND_PLACEHOLDER = "posdiag <command>"


def _template_command(local: str, column: str | None) -> str:
    col = f" --column {shlex.quote(column)}" if column else ""
    return f"{_COMMAND_PLACEHOLDER} {shlex.quote(local)}{col}"


def local_command(argv: Sequence[str], corpus: str, local: str, column: str | None = None) -> str:
    """``posdiag`` + ``argv`` with the argument ``corpus`` replaced by ``local`` and
    ``--column`` set to ``column`` (an existing ``--column`` is replaced), shell-quoted."""
    out: list[str] = []
    skip = False
    replaced = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if column is not None and arg == "--column" and i + 1 < len(argv):
            skip = True
            continue
        if column is not None and arg.startswith("--column="):
            continue
        if not replaced and arg == corpus:
            out.append(local)
            replaced = True
            continue
        out.append(arg)
    if column is not None:
        out += ["--column", column]
    return "posdiag " + shlex.join(out)


@dataclass(frozen=True)
class Source:
    """A corpus and how to read sequences from it.

    Attributes
    ----------
    name : str
        The corpus as the user gave it (path, glob, preset, ``hf:...``, ``-``); used in messages.
    format : str
        ``txt``, ``jsonl``, ``json``, ``csv``, ``tsv``, ``parquet``, ``arrow`` (files),
        ``disk`` (a ``save_to_disk`` folder), ``hf`` (a hub data set or a local data set folder
        read by ``datasets.load_dataset``), ``npy`` or ``bin`` (pre-tokenized ids).
    column : str or None
        Field holding the text (all formats but ``txt`` and ids); None means the default.
    size : int or None
        Total size in bytes of the files, when known.
    files : tuple of str
        The files read, in order (empty for stdin and hub data sets).
    length : int or None
        Number of documents (for ids: tokens) when known cheaply; used for progress and ETA.
    limit : int or None
        Read only the first ``limit`` documents (ids: windows).
    sample : float or None
        Keep each document (ids: window) with this probability, seeded by ``seed``.
    seed : int
    dataset, config, split : str or None
        For ``hf`` and ``disk``: what ``datasets`` loads (a hub id or a local folder).
    dtype : str or None
        For ``bin``: ``uint16`` or ``uint32``.
    group_by : str or None
        Field whose value names each record's sampling unit (``--group-by``): the texts are then
        :class:`~posdiag.corpus.units.Grouped`, carrying it.
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
            i = 0
            while i < len(self.files):
                fmt = _format_of(self.files[i])
                if fmt in DATASETS_FORMATS:
                    j = i
                    while j < len(self.files) and _format_of(self.files[j]) == fmt:
                        j += 1
                    yield from _datafile_texts(
                        self.files[i:j], fmt, self.column, self.name, self.group_by
                    )
                    i = j
                else:
                    yield from _file_texts(self.files[i], fmt, self.column, self.group_by)
                    i += 1

    def token_ids(self) -> np.ndarray:
        """The ids as a read-only memory-mapped 1-D array (``npy`` and ``bin`` sources)."""
        if not self.is_ids:
            raise PosdiagError(f"{self.name}: holds text, not token ids")
        path = self.files[0]
        if self.format == "npy":
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            return arr.reshape(-1)
        return np.memmap(path, dtype=np.dtype(self.dtype or "uint16"), mode="r")


def _select(
    texts: Iterator[str], limit: int | None, sample: float | None, seed: int
) -> Iterator[str]:
    """The first ``limit`` documents kept by a seeded Bernoulli(``sample``) draw."""
    if sample is None and limit is None:
        yield from texts
        return
    rng = np.random.default_rng(seed) if sample is not None else None
    kept = 0
    for text in texts:
        if limit is not None and kept >= limit:
            return
        if rng is not None and rng.random() >= sample:  # type: ignore[operator]
            continue
        kept += 1
        yield text


# ---------------------------------------------------------------------------------------------
# Resolving a corpus name


def _format_of(name: str) -> str:
    base = name[:-3] if name.lower().endswith(".gz") else name
    suffix = Path(base).suffix.lower().lstrip(".")
    if suffix in ("jsonl", "ndjson"):
        return "jsonl"
    if suffix in FORMATS:
        return suffix
    return "txt"


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


def resolve_data_dir(explicit: str | None = None) -> str | None:
    """``--data-dir`` if given, else ``$POSDIAG_DATA_DIR``, else None."""
    return explicit or os.environ.get(DATA_DIR_ENV) or None


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
    common: dict[str, Any] = {"limit": limit, "sample": sample, "seed": seed}
    if group_by is not None:
        common["group_by"] = group_by

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
        return _hub_source(name, column, data_dir, common)
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
        _check_group(name, fmt, group_by)
    size = sum(Path(f).stat().st_size for f in files)
    length = None
    if fmts == {"parquet"}:
        length = sum(_parquet_rows(f, column) for f in files)
    fmt = fmts.pop() if len(fmts) == 1 else "mixed"
    if format is not None:
        fmt = format
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


def _group_value(value: Any) -> str:
    """A record's ``--group-by`` value as text (numbers and strings that print alike are one
    group: ``5`` and ``"5"``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _grouped(text: str, record: Mapping[str, Any], group: str, name: str, where: str) -> str:
    """``text`` carrying its record's ``group`` value; a missing or null value is an error."""
    if group not in record:
        cols = ", ".join(map(str, record)) or "(none)"
        raise PosdiagError(f"{name}: {where} has no field {group!r} (--group-by); fields: {cols}")
    value = record[group]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise PosdiagError(f"{name}: {where}: field {group!r} (--group-by) is empty")
    return Grouped(text, _group_value(value))


def _parquet_rows(path: str, column: str | None) -> int:
    """Rows in a parquet file from its footer; checks the file and the column up front."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise PosdiagError(f"{path}: not a valid parquet file ({_first_line(exc)})") from None
    names = meta.schema_arrow.names
    col = column or DEFAULT_COLUMN
    if col not in names:
        raise PosdiagError(f"{path}: no column {col!r}; columns: {', '.join(names)}")
    return int(meta.metadata.num_rows)


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


# ---------------------------------------------------------------------------------------------
# Plain files


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _open_binary(name: str) -> BinaryIO:
    if name == "-":
        if sys.stdin is None:
            raise PosdiagError("-: standard input is closed; nothing to read")
        return sys.stdin.buffer
    try:
        if name.lower().endswith(".gz"):
            return gzip.open(name, "rb")  # type: ignore[return-value]
        return open(name, "rb")  # noqa: SIM115 - closed by the caller's with-block
    except OSError as exc:
        raise PosdiagError(f"{name}: cannot read the file ({exc.strerror})") from exc


def _file_texts(name: str, fmt: str, column: str | None, group: str | None = None) -> Iterator[str]:
    try:
        with _open_binary(name) as fh:
            if fmt == "json":
                yield from _json_texts(fh, name, column or DEFAULT_COLUMN, group)
                return
            lines = _decoded_lines(_bounded_lines(fh, name), name)
            if fmt == "txt":
                for _, line in lines:
                    text = line.strip()
                    if text:
                        yield text
            elif fmt == "jsonl":
                yield from _jsonl_texts(lines, name, column or DEFAULT_COLUMN, group)
            else:
                yield from _csv_texts(lines, name, column or DEFAULT_COLUMN, fmt == "tsv", group)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise PosdiagError(f"{name}: corrupt gzip file ({_first_line(exc)})") from None


_BOM = b"\xef\xbb\xbf"
# Memory per byte of one line while it is decoded and tokenized (text, ids, pieces).
_BYTES_PER_CHAR = 16


def _line_cap() -> int:
    """Longest line (bytes) that fits the memory budget; at least 1 MiB."""
    budget, _ = available_memory()
    return max(1 << 20, budget // _BYTES_PER_CHAR)


def _bounded_lines(fh: Any, name: str) -> Iterator[bytes]:
    """Lines of ``fh``, refusing one too long for memory (a .gz of zeros has no newline)."""
    cap = _line_cap()
    lineno = 0
    while True:
        raw = fh.readline(cap)
        if not raw:
            return
        lineno += 1
        if len(raw) == cap and not raw.endswith(b"\n"):
            require(
                f"{name or 'input'}: line {lineno} of more than {cap:,} bytes",
                2 * _BYTES_PER_CHAR * cap,
            )
        yield raw


def _decoded_lines(fh: Iterable[bytes], name: str) -> Iterator[tuple[int, str]]:
    """Decoded lines; a UTF-8 byte-order mark opening the file is dropped (not a character)."""
    for lineno, raw in enumerate(fh, start=1):
        if lineno == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PosdiagError(
                f"{name}: line {lineno} is not valid UTF-8 "
                f"(byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            ) from None


def _record_text(
    record: Any, name: str, where: str, column: str, group: str | None = None
) -> str | None:
    if not isinstance(record, dict):
        raise PosdiagError(f"{name}: {where} must be a JSON object; got {type(record).__name__}")
    if column not in record:
        cols = ", ".join(map(str, record)) or "(none)"
        raise PosdiagError(f"{name}: {where} has no column {column!r}; columns: {cols}")
    value = record[column]
    if value is None:
        return None
    if not isinstance(value, str):
        raise PosdiagError(
            f"{name}: {where}: column {column!r} must hold text; got {type(value).__name__}"
        )
    if not value.strip():
        return None
    return value if group is None else _grouped(value, record, group, name, where)


def _jsonl_texts(
    lines: Iterator[tuple[int, str]], name: str, column: str, group: str | None = None
) -> Iterator[str]:
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PosdiagError(f"{name}: line {lineno} is not valid JSON ({exc.msg})") from None
        text = _record_text(record, name, f"line {lineno}", column, group)
        if text is not None:
            yield text


def _json_texts(fh: IO[bytes], name: str, column: str, group: str | None = None) -> Iterator[str]:
    """A ``.json`` file: an array of objects (parsed whole), else JSON Lines."""
    head = fh.read(4096)
    head = head.removeprefix(_BOM)
    if not head.lstrip().startswith(b"["):
        rest = _ChainLines(head, fh)
        yield from _jsonl_texts(_decoded_lines(rest, name), name, column, group)
        return
    cap = _line_cap()
    data = head + fh.read(cap + 1)  # a .json.gz may inflate far beyond its size on disk
    if len(data) > cap + len(head):
        require(f"{name}: a JSON array of more than {cap:,} bytes", 2 * _BYTES_PER_CHAR * cap)
    try:
        records = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PosdiagError(f"{name}: not valid JSON ({_first_line(exc)})") from None
    for k, record in enumerate(records):
        text = _record_text(record, name, f"item {k}", column, group)
        if text is not None:
            yield text


class _ChainLines:
    """Lines of ``head`` followed by the rest of ``fh`` (a file whose first bytes were read)."""

    def __init__(self, head: bytes, fh: IO[bytes]) -> None:
        self._head, self._fh = head, fh

    def __iter__(self) -> Iterator[bytes]:
        first = self._head + self._fh.readline(_line_cap())
        parts = first.splitlines(keepends=True)
        yield from parts
        yield from _bounded_lines(self._fh, "")


def _csv_texts(
    lines: Iterator[tuple[int, str]], name: str, column: str, tab: bool, group: str | None = None
) -> Iterator[str]:
    """The ``column`` of a CSV (quoted fields, strict) or TSV (no quoting) file.

    TSV fields are read literally, as ``datasets``/pandas read GLUE's TSVs with
    ``quoting=QUOTE_NONE``: a field that starts with ``"`` is text, not the start of a quoted
    field that would swallow the next lines. In CSV, a quote that is never closed (or text after
    a closing quote) is an error naming the line where the record starts.
    """
    if tab:
        reader = csv.reader(
            (line for _, line in lines), delimiter="\t", quoting=csv.QUOTE_NONE, strict=True
        )
    else:
        reader = csv.reader((line for _, line in lines), delimiter=",", strict=True)
    start = 1
    try:
        try:
            header = next(reader)
        except StopIteration:
            return
        if column not in header:
            raise PosdiagError(f"{name}: no column {column!r}; columns: {', '.join(header)}")
        idx = header.index(column)
        if group is not None and group not in header:
            raise PosdiagError(
                f"{name}: no field {group!r} (--group-by); columns: {', '.join(header)}"
            )
        start = reader.line_num + 1
        for row in reader:
            if idx < len(row) and row[idx].strip():
                if group is None:
                    yield row[idx]
                else:
                    record = dict(zip(header, row, strict=False))
                    yield _grouped(row[idx], record, group, name, f"line {start}")
            start = reader.line_num + 1
    except csv.Error as exc:
        what = str(exc)
        if "unexpected end of data" in what:
            what = "a quoted field opened here is never closed"
        raise PosdiagError(
            f"{name}: line {start} is not valid {'TSV' if tab else 'CSV'} ({what})"
        ) from None


# ---------------------------------------------------------------------------------------------
# Through the datasets library


def _column_texts(
    batches: Iterable[dict[str, list[Any]]], column: str, name: str, group: str | None = None
) -> Iterator[str]:
    for batch in batches:
        if group is not None and group not in batch:
            raise PosdiagError(
                f"{name}: no field {group!r} (--group-by); columns: {', '.join(batch)}"
            )
        groups = batch[group] if group is not None else None
        for k, value in enumerate(batch[column]):
            if value is None:
                continue
            if not isinstance(value, str):
                raise PosdiagError(
                    f"{name}: column {column!r} must hold text; got {type(value).__name__}"
                )
            if value.strip():
                if group is None or groups is None:
                    yield value
                else:
                    yield _grouped(value, {group: groups[k]}, group, name, "a row")


def _datafile_texts(
    files: tuple[str, ...], fmt: str, column: str | None, name: str, group: str | None = None
) -> Iterator[str]:
    import datasets

    with _quiet_datasets():
        ds = datasets.load_dataset(fmt, data_files=list(files), split="train", streaming=True)

    def unreadable(exc: Exception) -> PosdiagError:
        bad = _find_corrupt(files, fmt) or ", ".join(files)
        return PosdiagError(f"{bad}: cannot read the {fmt} file ({_first_line(exc)})")

    yield from _streamed_texts(ds, column or DEFAULT_COLUMN, name, unreadable, group)


def _streamed_texts(
    ds: Any,
    col: str,
    name: str,
    unreadable: Callable[[Exception], PosdiagError],
    group: str | None = None,
) -> Iterator[str]:
    """Texts of column ``col`` of a streamed ``datasets`` data set, batch by batch.

    ``unreadable`` turns a reading failure into the error to raise. The column is checked on
    the first batch because features may be unknown until read (arrow files, hub data sets).
    """
    with _quiet_datasets(), contextlib.suppress(Exception):
        ds = ds.select_columns([col] if group is None else [col, group])
    it = iter(ds.iter(batch_size=_HF_BATCH))
    while True:
        try:
            with _quiet_datasets():
                batch = next(it)
        except StopIteration:
            return
        except PosdiagError:
            raise
        except Exception as exc:
            raise unreadable(exc) from None
        if col not in batch:
            raise PosdiagError(f"{name}: no column {col!r}; columns: {', '.join(batch)}")
        yield from _column_texts([batch], col, name, group)


def _find_corrupt(files: tuple[str, ...], fmt: str) -> str | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in files:
        try:
            if fmt == "parquet":
                pq.ParquetFile(f).read_row_group(0) if pq.ParquetFile(f).num_row_groups else None
            else:
                with pa.memory_map(f) as src:
                    pa.ipc.open_stream(src).read_all()
        except Exception:
            return f
    return None


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Silence datasets' own progress bars and info logging (posdiag draws its own)."""
    import datasets

    was = datasets.utils.logging.is_progress_bar_enabled()
    datasets.utils.logging.disable_progress_bar()
    level = datasets.utils.logging.get_verbosity()
    datasets.utils.logging.set_verbosity_error()
    try:
        yield
    finally:
        datasets.utils.logging.set_verbosity(level)
        if was:
            datasets.utils.logging.enable_progress_bar()


def _disk_source(
    name: str, path: str, split: str | None, column: str | None, common: dict[str, Any]
) -> Source:
    ds = _load_disk(name, path, split)
    col = column or DEFAULT_COLUMN
    if col not in ds.column_names:
        raise PosdiagError(f"{name}: no column {col!r}; columns: {', '.join(ds.column_names)}")
    return Source(
        name=name,
        format="disk",
        column=column,
        files=(),
        length=len(ds),
        dataset=path,
        split=split,
        **common,
    )


def _load_disk(name: str, path: str, split: str | None) -> Any:
    import datasets

    try:
        with _quiet_datasets():
            ds = datasets.load_from_disk(path)
    except Exception as exc:
        raise PosdiagError(f"{name}: cannot load the saved data set ({_first_line(exc)})") from None
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split is None:
            split = "train"
        if split not in ds:
            raise PosdiagError(f"{name}: no split {split!r}; splits: {', '.join(splits)}")
        ds = ds[split]
    elif split not in (None, "train"):
        raise PosdiagError(f"{name}: a single saved data set has no split {split!r}")
    return ds


def _disk_texts(src: Source) -> Iterator[str]:
    ds = _load_disk(src.name, str(src.dataset), src.split)
    col = src.column or DEFAULT_COLUMN
    cols = [col] if src.group_by is None else [col, src.group_by]
    if src.group_by is not None and src.group_by not in ds.column_names:
        raise PosdiagError(
            f"{src.name}: no field {src.group_by!r} (--group-by); "
            f"columns: {', '.join(ds.column_names)}"
        )
    yield from _column_texts(
        ds.select_columns(cols).iter(batch_size=_HF_BATCH), col, src.name, src.group_by
    )


def _parse_hub(spec: str) -> tuple[str, str | None, str | None]:
    """``OWNER/NAME[:CONFIG][@SPLIT]`` -> (dataset, config, split)."""
    body, _, split = spec.partition("@")
    dataset, _, config = body.partition(":")
    if not dataset:
        raise PosdiagError(f"hf:{spec}: expected hf:OWNER/NAME[:CONFIG][@SPLIT]")
    return dataset, config or None, split or None


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


def _hub_source(
    name: str, column: str | None, data_dir_opt: str | None, common: dict[str, Any]
) -> Source:
    dataset, config, split = _parse_hub(name[3:])
    return _hf_source(
        name, dataset, config, split or "train", column or DEFAULT_COLUMN, data_dir_opt, common
    )


def _local_copy(dataset: str, names: tuple[str, ...], root: str | None) -> Path | None:
    if Path(dataset).exists():
        return Path(dataset)
    if root is None:
        return None
    base = Path(root)
    if not base.is_dir():
        raise PosdiagError(f"--data-dir {root}: no such folder")
    for cand in (*names, dataset, dataset.split("/")[-1]):
        p = base / cand
        if p.exists():
            return p
    return None


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
    local = _local_copy(dataset, local_names, resolve_data_dir(data_dir_opt))
    if local is not None:
        if local.is_dir() and _is_saved_dataset(local):
            return _disk_source(name, str(local), split, column, common)
        if local.is_dir() and config is not None and (local / config).is_dir():
            local, config = local / config, None  # a hub clone: one folder per config
        if local.is_file():
            return open_source(str(local), column, **common)
        dataset = str(local)
    src = Source(
        name=name,
        format="hf",
        column=column,
        dataset=dataset,
        config=config,
        split=split,
        **common,
    )
    ds = _load_hf(src)  # fail now, not in the middle of the progress bar
    cols = _hf_columns(ds)
    if cols is not None and column not in cols:
        raise PosdiagError(f"{name}: no column {column!r}; columns: {', '.join(cols)}")
    length = None
    with contextlib.suppress(Exception):
        length = int(ds.info.splits[split].num_examples) or None
    return dataclasses.replace(src, length=length)


def _hf_columns(ds: Any) -> list[str] | None:
    if getattr(ds, "column_names", None):
        return list(ds.column_names)
    if getattr(ds, "features", None):
        return list(ds.features)
    return None


_PROBE: dict[str, bool] = {}


def hub_offline() -> str | None:
    """Why the Hugging Face Hub is out of reach (offline mode or no connection), else None.

    Checks ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` and then opens one TCP connection to the
    endpoint with a short timeout, so a machine without network fails in seconds instead of
    waiting for ``datasets``' and ``huggingface_hub``'s retries.
    """
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").upper() in ("1", "ON", "YES", "TRUE"):
            return f"{var}={os.environ[var]}"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlparse(endpoint)
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    if host not in _PROBE:
        try:
            socket.create_connection((host, port), timeout=_HUB_TIMEOUT).close()
            _PROBE[host] = True
        except OSError:
            _PROBE[host] = False
    return None if _PROBE[host] else f"no connection to {host}"


@contextlib.contextmanager
def offline_mode() -> Iterator[None]:
    """Make ``datasets`` and ``huggingface_hub`` use only their caches for the duration."""
    import datasets.config as dc
    import huggingface_hub.constants as hc

    saved = (dc.HF_HUB_OFFLINE, dc.HF_DATASETS_OFFLINE, hc.HF_HUB_OFFLINE)
    dc.HF_HUB_OFFLINE = dc.HF_DATASETS_OFFLINE = hc.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        dc.HF_HUB_OFFLINE, dc.HF_DATASETS_OFFLINE, hc.HF_HUB_OFFLINE = saved


def _load_hf(src: Source) -> Any:
    import datasets

    dataset = str(src.dataset)
    why = None if Path(dataset).exists() else hub_offline()
    try:
        with _quiet_datasets():
            if why is None:
                return datasets.load_dataset(dataset, src.config, split=src.split, streaming=True)
            # Offline: the prepared Arrow cache (memory-mapped, not loaded into memory).
            with offline_mode():
                return datasets.load_dataset(dataset, src.config, split=src.split)
    except PosdiagError:
        raise
    except Exception as exc:
        msg = _first_line(exc)
        if why is not None or isinstance(exc, ConnectionError):
            raise _unavailable(src, why or msg) from None
        if "split" in msg.lower() or isinstance(exc, ValueError):
            raise PosdiagError(f"{src.name}: {msg}") from None
        raise PosdiagError(f"{src.name}: cannot load the data set ({msg})") from None


def _unavailable(src: Source, why: str) -> HubUnavailable:
    """What to do when a data set is neither reachable nor cached: the ``datasets`` line that
    makes a local copy on a connected machine, and the user's command reading it."""
    dataset = str(src.dataset)
    preset = next((p for p in PRESETS.values() if p.dataset == dataset), None)
    stem = preset.name if preset else dataset.split("/")[-1]
    local = f"{stem}.parquet"
    col = src.column or DEFAULT_COLUMN
    args = ", ".join(repr(a) for a in (dataset, src.config) if a is not None)
    load = f"datasets.load_dataset({args}, split={src.split!r})"
    return HubUnavailable(
        f"{src.name}: cannot reach the Hugging Face Hub ({why}) and it is not in the datasets "
        f'cache; make a local copy on a connected machine: python -c "import datasets; '
        f'{load}.to_parquet({local!r})", then run {_template_command(local, col)} '
        f"(or {load}.save_to_disk('DIR/{stem}') there and pass --data-dir DIR)",
        corpus=src.name,
        local=local,
        column=col,
    )


def _hub_texts(src: Source) -> Iterator[str]:
    def unreadable(exc: Exception) -> PosdiagError:
        return PosdiagError(f"{src.name}: reading failed ({_first_line(exc)})")

    yield from _streamed_texts(
        _load_hf(src), src.column or DEFAULT_COLUMN, src.name, unreadable, src.group_by
    )
