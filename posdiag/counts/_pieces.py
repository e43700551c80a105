"""The pieces of a corpus for counting on Dask (:mod:`posdiag.counts.distributed`): how a source
is cut (:func:`plan_pieces`, one size :data:`PIECE_BYTES`) and how a worker reads the texts of
one piece (:func:`piece_texts`). Only id pieces depend on the cluster (ids carry no shards).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .._util.validate import check_int
from ..corpus import _datasets as H
from ..corpus import _textfiles as T
from ..corpus.sources import DATASETS_FORMATS, Source, _format_of
from ..errors import PosdiagError

__all__ = ["PIECE_BYTES", "Piece", "piece_texts", "plan_pieces"]

# Input per piece: 8 MiB of a text file, 2^16 data-set rows (taken as 128 bytes each), id
# ranges of at least 2^24 tokens; fixed, so text pieces (sampling units) do not follow the
# cluster size. A piece's dense id block is at most 8 x this (64 MiB).
PIECE_BYTES = 1 << 23
# Formats whose records are single lines, so that a byte range can start at any line.
LINE_FORMATS = ("txt", "jsonl")


@dataclass(frozen=True)
class Piece:
    """What a worker is sent: where one piece of the corpus is, never its contents.

    Attributes
    ----------
    index : int
        Position in reading order.
    kind : str
        ``file`` (a whole text or arrow file), ``rowgroup`` (one parquet row group), ``stream``
        (one shard of a streamed data set), ``rows`` (a row range of a map-style data set),
        ``lines`` (the lines starting in a byte range of a ``.txt`` / ``.jsonl`` file),
        ``ids`` (a window-aligned token range of an id file).
    path : str
        Absolute file path (``file``, ``rowgroup``, ``ids``); the data set otherwise.
    start, stop : int
        Row group ``start`` (``rowgroup``), shard ``start`` of ``stop`` (``stream``), else the
        range ``[start, stop)`` of rows, bytes (``lines``) or tokens (``ids``).
    format : str
        The file's format (:data:`~posdiag.corpus.sources.FORMATS`).
    offset : int
        ``rowgroup``: byte offset of the row group in the file (for error messages).
    positions : (int, int)
        ``ids``: the positions ``[lo, hi)`` this piece counts.
    """

    index: int
    kind: str
    path: str
    start: int = 0
    stop: int = 0
    format: str = ""
    offset: int = 0
    positions: tuple[int, int] = (0, 0)

    def describe(self) -> str:
        """Where the piece is, as error messages name it."""
        lo, hi = self.positions
        where = {
            "rowgroup": f"row group {self.start} (byte offset {self.offset:,})",
            "stream": f"stream shard {self.start} of {self.stop}",
            "rows": f"rows {self.start:,} to {self.stop:,}",
            "lines": f"bytes {self.start:,} to {self.stop:,}",
            "ids": f"tokens {self.start:,} to {self.stop:,}, positions {lo} to {hi}",
        }.get(self.kind)
        return self.path if where is None else f"{self.path}: {where}"


def plan_pieces(
    source: Source,
    max_len: int = 512,
    vocab_size: int | None = None,
    workers: int = 2,
    piece_bytes: int = PIECE_BYTES,
) -> list[Piece]:
    """The pieces of ``source`` in reading order; ``vocab_size`` and ``workers`` (the cluster's
    threads) also size the pieces of an id file.

    Raises
    ------
    PosdiagError
        For stdin (a worker cannot read the client's stdin).
    """
    if source.name == "-":
        raise PosdiagError("stdin cannot be cut into pieces; give the corpus files instead")
    if source.is_ids:
        n = check_int("max_len", max_len, 1)
        return _id_pieces(source, n, vocab_size or 1, max(1, workers), piece_bytes)
    if source.format in ("hf", "disk"):
        return _dataset_pieces(source, max(1, piece_bytes // 128))
    pieces: list[Piece] = []
    for f in source.files:
        path = os.path.abspath(f)
        fmt = _format_of(f)
        by_lines = fmt in LINE_FORMATS and not path.lower().endswith(".gz")
        if fmt == "parquet":
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            for g in range(meta.num_row_groups):
                col = meta.row_group(g).column(0)
                offset = col.dictionary_page_offset or col.data_page_offset
                pieces.append(Piece(len(pieces), "rowgroup", path, g, g + 1, fmt, int(offset or 0)))
        elif by_lines and (size := os.path.getsize(path)) > piece_bytes:
            for a in range(0, size, piece_bytes):
                pieces.append(Piece(len(pieces), "lines", path, a, min(a + piece_bytes, size), fmt))
        else:
            pieces.append(Piece(len(pieces), "file", path, format=fmt))
    return pieces


def _id_pieces(source: Source, n: int, v: int, workers: int, size: int) -> list[Piece]:
    """Window ranges of at least 8 x (n x V) tokens and 2 x ``size``, each cut into position
    ranges: dense blocks of at most 8 x ``size`` bytes, 8 pieces or more and 2 per worker
    thread (docs/scale.md)."""
    total = int(source.length if source.length is not None else source.token_ids().size)
    if source.limit is not None and source.sample is None:
        total = min(total, source.limit * n)
    step = max(2 * size, 8 * n * v) // n * n or n
    ranges = [(a, min(a + step, total)) for a in range(0, total, step)]
    cuts = max(-(-n * v * 4 // (8 * size)), -(-max(8, 2 * workers) // max(len(ranges), 1)))
    bounds = np.linspace(0, n, min(n, cuts) + 1).astype(int)
    path = os.path.abspath(source.files[0])
    return [
        Piece(i, "ids", path, a, b, source.format, positions=(int(lo), int(hi)))
        for i, ((a, b), (lo, hi)) in enumerate(
            itertools.product(ranges, zip(bounds[:-1], bounds[1:], strict=True))
        )
    ]


def _dataset_pieces(source: Source, step: int) -> list[Piece]:
    ds = H._load(source)
    name = str(source.dataset)
    shards = getattr(ds, "n_shards", None) if not hasattr(ds, "__len__") else None
    if shards is not None:
        return [Piece(i, "stream", name, i, int(shards)) for i in range(int(shards))]
    rows = len(ds)
    return [
        Piece(i, "rows", name, r, min(r + step, rows)) for i, r in enumerate(range(0, rows, step))
    ]


def piece_texts(piece: Piece, source: Source) -> Iterator[str]:
    """The texts of one text piece, in order, as the single-process reader yields them."""
    column = source.column or T.DEFAULT_COLUMN
    group = source.group_by
    if piece.kind == "file":
        if piece.format in DATASETS_FORMATS:
            yield from H._datafile_texts(
                (piece.path,), piece.format, source.column, piece.path, group
            )
        else:
            yield from T._file_texts(piece.path, piece.format, source.column, group)
    elif piece.kind == "lines":
        yield from _range_texts(piece, column, group)
    elif piece.kind == "rowgroup":
        import pyarrow.parquet as pq

        cols = [column] if group is None else [column, group]
        try:
            pf = pq.ParquetFile(piece.path)
            if group is not None and group not in pf.schema_arrow.names:
                raise T._no_field(piece.path, group, pf.schema_arrow.names)
            table = pf.read_row_group(piece.start, columns=cols)
            values = {c: table.column(c).to_pylist() for c in cols}
        except PosdiagError:
            raise
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
            raise PosdiagError(
                f"{piece.describe()}: cannot read the parquet file ({T._first_line(exc)})"
            ) from None
        yield from H._column_texts([values], column, piece.path, group)
    elif piece.kind == "stream":
        ds = H._load_hf(source).shard(num_shards=piece.stop, index=piece.start)

        def unreadable(exc: Exception) -> PosdiagError:
            return PosdiagError(f"{piece.describe()}: reading failed ({T._first_line(exc)})")

        yield from H._streamed_texts(ds, column, source.name, unreadable, group)
    elif piece.kind == "rows":
        yield from H._disk_texts(source, range(piece.start, piece.stop))
    else:
        raise PosdiagError(f"{piece.describe()}: holds token ids, not text")


def _range_lines(piece: Piece) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, line)`` of the lines that start in ``[piece.start, piece.stop)``: a line
    belongs to the range where it starts, so every line is read by exactly one range."""

    with T._open_binary(piece.path) as fh:
        at = piece.start
        if at > 0:
            # Past the rest of the line holding byte at - 1 (in bounded reads: it may be long).
            fh.seek(at - 1)
            at -= 1
            while chunk := fh.readline(1 << 20):
                at += len(chunk)
                if chunk.endswith(b"\n"):
                    break
        for raw in T._bounded_lines(fh, piece.path):
            if at >= piece.stop:
                return
            yield at, raw
            at += len(raw)


def _range_texts(piece: Piece, column: str, group: str | None = None) -> Iterator[str]:
    """The texts of a byte-range piece, as :func:`posdiag.corpus._textfiles._file_texts` reads them;
    errors name the line by its byte offset (its number would need the lines before)."""
    raw = ((f"line at byte offset {at:,}", line) for at, line in _range_lines(piece))
    lines = T._decoded(raw, piece.path, piece.start == 0)
    yield from T._line_texts(lines, piece.format, piece.path, column, group)
