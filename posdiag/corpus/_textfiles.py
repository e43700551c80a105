"""Reading corpus files line by line: ``.txt``, ``.jsonl``, ``.json``, ``.csv``, ``.tsv``
(each also ``.gz``) and stdin, with errors that name the file and line; the records' ``--group-by``
values (:class:`~posdiag.corpus.units.Grouped`)."""

from __future__ import annotations

import csv
import gzip
import json
import sys
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, BinaryIO

from .._util.memory import available_memory, require
from ..errors import PosdiagError
from .units import Grouped

DEFAULT_COLUMN = "text"


def _no_field(name: str, group: str, columns: Iterable[str]) -> PosdiagError:
    """The error for a ``--group-by`` field the file or data set does not have."""
    return PosdiagError(f"{name}: no field {group!r} (--group-by); columns: {', '.join(columns)}")


def _grouped(text: str, record: Mapping[str, Any], group: str, name: str, where: str) -> str:
    """``text`` carrying its record's ``group`` value; a missing or null value is an error."""
    if group not in record:
        cols = ", ".join(map(str, record)) or "(none)"
        raise PosdiagError(f"{name}: {where} has no field {group!r} (--group-by); fields: {cols}")
    value = record[group]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise PosdiagError(f"{name}: {where}: field {group!r} (--group-by) is empty")
    if not isinstance(value, str):  # as text: 5 and "5" are one group
        value = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return Grouped(text, value)


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
            if fmt in ("txt", "jsonl"):
                yield from _line_texts(lines, fmt, name, column or DEFAULT_COLUMN, group)
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
    for lineno, raw in enumerate(iter(lambda: fh.readline(cap), b""), start=1):
        if len(raw) == cap and not raw.endswith(b"\n"):
            require(
                f"{name or 'input'}: line {lineno} of more than {cap:,} bytes",
                2 * _BYTES_PER_CHAR * cap,
            )
        yield raw


def _decoded_lines(fh: Iterable[bytes], name: str) -> Iterator[tuple[str, str]]:
    """``(where, line)`` of each line (``where``: ``line K``, for messages)."""
    return _decoded(((f"line {k}", raw) for k, raw in enumerate(fh, start=1)), name, True)


def _decoded(
    lines: Iterable[tuple[str, bytes]], name: str, at_start: bool
) -> Iterator[tuple[str, str]]:
    """Decoded ``(where, raw)`` lines; a UTF-8 byte-order mark opening the file (``at_start``:
    the first line is the file's) is dropped (not a character)."""
    for k, (where, raw) in enumerate(lines):
        if k == 0 and at_start and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        try:
            yield where, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PosdiagError(
                f"{name}: {where} is not valid UTF-8 "
                f"(byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            ) from None


def _line_texts(
    lines: Iterator[tuple[str, str]], fmt: str, name: str, column: str, group: str | None
) -> Iterator[str]:
    """The texts of decoded ``.txt`` (a stripped line) or ``.jsonl`` lines."""
    if fmt == "jsonl":
        yield from _jsonl_texts(lines, name, column, group)
        return
    for _, line in lines:
        text = line.strip()
        if text:
            yield text


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
    lines: Iterator[tuple[str, str]], name: str, column: str, group: str | None = None
) -> Iterator[str]:
    for where, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PosdiagError(f"{name}: {where} is not valid JSON ({exc.msg})") from None
        text = _record_text(record, name, where, column, group)
        if text is not None:
            yield text


def _json_texts(fh: IO[bytes], name: str, column: str, group: str | None = None) -> Iterator[str]:
    """A ``.json`` file: an array of objects (parsed whole), else JSON Lines."""
    head = fh.read(4096)
    head = head.removeprefix(_BOM)
    if not head.lstrip().startswith(b"["):
        rest = _chain_lines(head, fh)
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


def _chain_lines(head: bytes, fh: IO[bytes]) -> Iterator[bytes]:
    """Lines of ``head`` followed by the rest of ``fh`` (a file whose first bytes were read)."""
    yield from (head + fh.readline(_line_cap())).splitlines(keepends=True)
    yield from _bounded_lines(fh, "")


def _csv_texts(
    lines: Iterator[tuple[str, str]], name: str, column: str, tab: bool, group: str | None = None
) -> Iterator[str]:
    """The ``column`` of a CSV (quoted fields, strict) or TSV file (fields read literally,
    ``QUOTE_NONE``, as ``datasets``/pandas read GLUE's TSVs)."""
    dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tab else {"delimiter": ","}
    reader = csv.reader((line for _, line in lines), strict=True, **dialect)
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
            raise _no_field(name, group, header)
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
