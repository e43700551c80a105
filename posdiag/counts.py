"""Sparse per-position token counts: build them from a corpus, add them, save and load them.

The counts file is an ``.npz`` that ``scipy.sparse.load_npz`` opens as the ``n x V`` count
matrix; posdiag's metadata sits in the same archive as a JSON string under ``posdiag_meta``.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import __version__
from ._io import atomic_outputs
from ._validate import check_int
from .errors import PosdiagError
from .sources import Source
from .tokenize import Tokenizer, view

__all__ = [
    "Counts",
    "CountAccumulator",
    "count_texts",
    "count_source",
    "load_counts",
    "save_counts",
]

ProgressFn = Callable[[int, int, int], None]
"""Called after each batch with (documents, sequences, tokens) so far."""


@dataclass(frozen=True)
class Counts:
    """Per-position token counts of a corpus.

    Attributes
    ----------
    matrix : scipy.sparse.csr_matrix of shape (n_positions, vocab_size), int64
        ``matrix[i, v]`` = number of sequences whose token at position ``i`` is ``v``.
    meta : mapping
        source, tokenizer, view, max_len, vocab_size, documents, sequences, tokens,
        posdiag_version.
    """

    matrix: sp.csr_matrix
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def supports(self) -> np.ndarray:
        """``N_i`` of shape (n_positions,): how many sequences reach each position."""
        return np.asarray(self.matrix.sum(axis=1)).ravel().astype(np.int64)

    @property
    def vocab_seen(self) -> int:
        """Number of distinct token ids that occur anywhere."""
        return int(np.unique(self.matrix.indices).size)

    def __add__(self, other: Counts) -> Counts:
        """Counts are additive: the counts of two shards sum to the counts of their union."""
        if self.n != other.n:
            raise PosdiagError(f"cannot add counts with max_len {self.n} and {other.n}")
        v = max(self.vocab_size, other.vocab_size)
        a = _resized(self.matrix, v)
        b = _resized(other.matrix, v)
        meta = dict(self.meta)
        for key in ("documents", "sequences", "tokens"):
            meta[key] = int(self.meta.get(key, 0)) + int(other.meta.get(key, 0))
        meta["vocab_size"] = v
        return Counts(sp.csr_matrix(a + b), meta)


def _resized(m: sp.csr_matrix, v: int) -> sp.csr_matrix:
    m = sp.csr_matrix(m, copy=True)
    m.resize((m.shape[0], v))
    return m


class CountAccumulator:
    """Streaming counter of (position, id) pairs whose memory is O(distinct pairs + one batch).

    Pairs are keyed ``id * n + pos`` so the vocabulary may grow while streaming (the built-in
    whitespace tokenizer assigns ids as words appear).
    """

    # Merge the per-batch buffers into the running totals past this many keys.
    _COMPACT_AT = 1 << 22

    def __init__(self, n: int) -> None:
        self.n = check_int("max_len", n, 1)
        self._keys = np.empty(0, dtype=np.int64)
        self._vals = np.empty(0, dtype=np.int64)
        self._buf_keys: list[np.ndarray] = []
        self._buf_vals: list[np.ndarray] = []
        self._buffered = 0

    def add_sequences(self, seqs: list[list[int]]) -> int:
        """Count a batch of id sequences (each of length <= n); return the tokens added."""
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        total = int(lengths.sum())
        if total == 0:
            return 0
        if lengths.max() > self.n:
            raise ValueError(f"a sequence of length {lengths.max()} exceeds max_len {self.n}")
        ids = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=total)
        starts = np.cumsum(lengths) - lengths
        pos = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        keys, vals = np.unique(ids * self.n + pos, return_counts=True)
        self._buf_keys.append(keys)
        self._buf_vals.append(vals.astype(np.int64))
        self._buffered += keys.size
        if self._buffered >= self._COMPACT_AT:
            self._compact()
        return total

    def _compact(self) -> None:
        if not self._buf_keys:
            return
        keys = np.concatenate([self._keys, *self._buf_keys])
        vals = np.concatenate([self._vals, *self._buf_vals])
        order = np.argsort(keys, kind="stable")
        keys, vals = keys[order], vals[order]
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        self._keys = keys[first]
        self._vals = np.add.reduceat(vals, first)
        self._buf_keys, self._buf_vals, self._buffered = [], [], 0

    def matrix(self, vocab_size: int) -> sp.csr_matrix:
        """The counts so far as a csr matrix of shape (n, vocab_size)."""
        self._compact()
        ids, pos = np.divmod(self._keys, self.n)
        if ids.size and ids.max() >= vocab_size:
            raise ValueError(f"token id {ids.max()} >= vocab_size {vocab_size}")
        return sp.csr_matrix((self._vals, (pos, ids)), shape=(self.n, vocab_size), dtype=np.int64)


def count_texts(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    *,
    view_name: str = "text",
    max_len: int = 512,
    batch_size: int = 1024,
    progress: ProgressFn | None = None,
    source: str = "<texts>",
) -> Counts:
    """Tokenize, apply a view and count.

    Returns
    -------
    Counts
        With ``matrix`` of shape (max_len, tokenizer.vocab_size).
    """
    acc = CountAccumulator(max_len)
    docs = seqs = toks = 0
    for batch, consumed in view(texts, tokenizer, view_name, max_len, batch_size=batch_size):
        toks += acc.add_sequences(batch)
        seqs += len(batch)
        docs += consumed
        if progress is not None:
            progress(docs, seqs, toks)
    if toks == 0:
        raise PosdiagError(f"{source}: the corpus is empty (no tokens after tokenization)")
    meta = {
        "source": source,
        "tokenizer": tokenizer.name,
        "view": view_name,
        "max_len": max_len,
        "vocab_size": tokenizer.vocab_size,
        "documents": docs,
        "sequences": seqs,
        "tokens": toks,
        "posdiag_version": __version__,
    }
    return Counts(acc.matrix(tokenizer.vocab_size), meta)


def count_source(
    source: Source,
    tokenizer: Tokenizer,
    *,
    view_name: str = "text",
    max_len: int = 512,
    batch_size: int = 1024,
    progress: ProgressFn | None = None,
) -> Counts:
    """:func:`count_texts` over a :class:`~posdiag.sources.Source`, recording its name."""
    counts = count_texts(
        source.texts(),
        tokenizer,
        view_name=view_name,
        max_len=max_len,
        batch_size=batch_size,
        progress=progress,
        source=source.name,
    )
    if source.column is not None:
        return Counts(counts.matrix, {**counts.meta, "column": source.column})
    return counts


def save_counts(counts: Counts, path: str | Path, *, force: bool = False) -> Path:
    """Write ``counts`` atomically as an ``.npz`` readable by ``scipy.sparse.load_npz``."""
    if not str(path).endswith(".npz"):
        raise PosdiagError(f"'output' must end with .npz; got {str(path)!r}")
    m = sp.csr_matrix(counts.matrix)
    m.sort_indices()
    with atomic_outputs([path], force) as (tmp,), open(tmp, "wb") as fh:
        np.savez_compressed(
            fh,
            format=np.array("csr"),
            shape=np.array(m.shape),
            data=m.data,
            indices=m.indices,
            indptr=m.indptr,
            posdiag_meta=np.array(json.dumps(dict(counts.meta), sort_keys=True)),
        )
    return Path(path)


def is_counts_file(path: str | Path) -> bool:
    """Whether ``path`` names a counts archive (by its ``.npz`` suffix)."""
    return str(path).endswith(".npz")


def load_counts(path: str | Path) -> Counts:
    """Read a counts file written by :func:`save_counts`."""
    p = Path(path)
    if not p.is_file():
        raise PosdiagError(f"{path}: no such file")
    try:
        with np.load(p, allow_pickle=False) as z:
            if "posdiag_meta" not in z.files:
                raise PosdiagError(f"{path}: not a posdiag counts file (no 'posdiag_meta' entry)")
            meta = json.loads(str(z["posdiag_meta"]))
            m = sp.csr_matrix(
                (z["data"], z["indices"], z["indptr"]), shape=tuple(int(s) for s in z["shape"])
            )
    except (zipfile.BadZipFile, OSError, ValueError, KeyError) as exc:
        raise PosdiagError(f"{path}: not a posdiag counts file ({exc})") from None
    return Counts(m.astype(np.int64), meta)


def corpus_counts(
    corpus: str,
    *,
    column: str | None = None,
    tokenizer: str | None = None,
    view_name: str | None = None,
    max_len: int | None = None,
    pad_token: str | None = None,
    batch_size: int = 1024,
    progress: ProgressFn | None = None,
) -> Counts:
    """Counts of ``corpus``: read from a counts ``.npz``, or streamed from a corpus file.

    For a counts file, options given explicitly (not None) must match how it was counted;
    for a corpus file, None means the default (whitespace tokenizer, text view, max_len 512).
    """
    if is_counts_file(corpus):
        counts = load_counts(corpus)
        asked = {"column": column, "tokenizer": tokenizer, "view": view_name, "max_len": max_len}
        for key, value in asked.items():
            if value is not None and counts.meta.get(key) != value:
                raise PosdiagError(
                    f"{corpus}: was counted with {key}={counts.meta.get(key)!r}, "
                    f"not {value!r}; count the corpus again to change it"
                )
        return counts
    from .sources import open_source
    from .tokenize import load_tokenizer

    source = open_source(corpus, column)
    max_len = check_int("max_len", 512 if max_len is None else max_len, 1)
    tok = load_tokenizer(tokenizer or "whitespace", pad_token=pad_token)
    return count_source(
        source,
        tok,
        view_name=view_name or "text",
        max_len=max_len,
        batch_size=batch_size,
        progress=progress,
    )
