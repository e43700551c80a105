"""Where sequences come from: local text, JSON Lines, CSV/TSV files and stdin, streamed.

Every reader yields one string per sequence and never holds more than one line (or CSV record)
in memory. Errors name the file and the line.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import PosdiagError

__all__ = ["Source", "open_source", "FORMATS"]

FORMATS = ("txt", "jsonl", "csv", "tsv")
DEFAULT_COLUMN = "text"


@dataclass(frozen=True)
class Source:
    """A corpus on disk (or stdin) and how to read sequences from it.

    Attributes
    ----------
    name : str
        The path as the user gave it (``-`` for stdin); used in every message.
    format : str
        One of ``txt``, ``jsonl``, ``csv``, ``tsv``.
    column : str or None
        Field holding the text, for ``jsonl``/``csv``/``tsv``.
    size : int or None
        Size in bytes when known, for progress.
    """

    name: str
    format: str
    column: str | None = None
    size: int | None = None

    def texts(self) -> Iterator[str]:
        """Yield the sequences' texts in file order."""
        with _open_binary(self.name) as fh:
            lines = _decoded_lines(fh, self.name)
            if self.format == "txt":
                for _, line in lines:
                    text = line.strip()
                    if text:
                        yield text
            elif self.format == "jsonl":
                yield from _jsonl_texts(lines, self.name, self.column or DEFAULT_COLUMN)
            else:
                yield from _csv_texts(
                    lines, self.name, self.column or DEFAULT_COLUMN, self.format == "tsv"
                )


def _format_of(name: str) -> str:
    suffix = Path(name).suffix.lower().lstrip(".")
    if suffix in ("jsonl", "ndjson"):
        return "jsonl"
    if suffix in ("csv", "tsv"):
        return suffix
    return "txt"


def open_source(name: str, column: str | None = None, *, format: str | None = None) -> Source:
    """Check that ``name`` can be read and describe how to read it.

    Parameters
    ----------
    name : str
        A file path, or ``-`` for standard input (read as plain text unless ``format`` says).
    column : str, optional
        Text field for ``.jsonl``/``.csv``/``.tsv`` files; default ``text``.
    format : str, optional
        Override the format guessed from the suffix.
    """
    fmt = format or ("txt" if name == "-" else _format_of(name))
    if fmt not in FORMATS:
        raise PosdiagError(f"'format' must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if column is not None and fmt == "txt":
        raise PosdiagError(
            f"{name}: --column applies to .jsonl, .csv and .tsv files; this is plain text "
            f"(one sequence per line); got column {column!r}"
        )
    size = None
    if name != "-":
        path = Path(name)
        if not path.exists():
            raise PosdiagError(f"{name}: no such file")
        if path.is_dir():
            raise PosdiagError(f"{name}: is a directory; expected a corpus file")
        if not os.access(path, os.R_OK):
            raise PosdiagError(f"{name}: cannot read the file (permission denied)")
        size = path.stat().st_size
    return Source(name=name, format=fmt, column=column, size=size)


def _open_binary(name: str) -> BinaryIO:
    if name == "-":
        return sys.stdin.buffer
    try:
        return open(name, "rb")  # noqa: SIM115 - closed by the caller's with-block
    except OSError as exc:
        raise PosdiagError(f"{name}: cannot read the file ({exc.strerror})") from exc


def _decoded_lines(fh: BinaryIO, name: str) -> Iterator[tuple[int, str]]:
    for lineno, raw in enumerate(fh, start=1):
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PosdiagError(
                f"{name}: line {lineno} is not valid UTF-8 "
                f"(byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            ) from None


def _jsonl_texts(lines: Iterator[tuple[int, str]], name: str, column: str) -> Iterator[str]:
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PosdiagError(f"{name}: line {lineno} is not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise PosdiagError(
                f"{name}: line {lineno} must be a JSON object; got {type(record).__name__}"
            )
        if column not in record:
            cols = ", ".join(map(str, record)) or "(none)"
            raise PosdiagError(f"{name}: line {lineno} has no column {column!r}; columns: {cols}")
        value = record[column]
        if value is None:
            continue
        if not isinstance(value, str):
            raise PosdiagError(
                f"{name}: line {lineno}: column {column!r} must hold text; "
                f"got {type(value).__name__}"
            )
        if value.strip():
            yield value


def _csv_texts(
    lines: Iterator[tuple[int, str]], name: str, column: str, tab: bool
) -> Iterator[str]:
    reader = csv.reader((line for _, line in lines), delimiter="\t" if tab else ",")
    try:
        header = next(reader)
    except StopIteration:
        return
    if column not in header:
        raise PosdiagError(f"{name}: no column {column!r}; columns: {', '.join(header)}")
    idx = header.index(column)
    try:
        for row in reader:
            if idx < len(row) and row[idx].strip():
                yield row[idx]
    except csv.Error as exc:
        raise PosdiagError(f"{name}: line {reader.line_num} is not valid CSV ({exc})") from None
