"""Sparse per-position token counts: build them from a corpus, add them, save and load them.

The counts file is an ``.npz`` that ``scipy.sparse.load_npz`` opens as the ``n x V`` count
matrix; posdiag's metadata sits in the same archive as a JSON string under ``posdiag_meta``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .. import __version__
from .._util.atomic import atomic_outputs
from .._util.memory import require
from .._util.validate import check_int
from ..corpus.sources import Source
from ..corpus.tokenizers import Tokenizer, packed_windows, view
from ..corpus.units import (
    DEFAULT_GROUP_PREFIX,
    UnitKeyer,
    UnitState,
    UnitTally,
    flatten,
    shard_of_keys,
    tally_of,
)
from ..errors import PosdiagError

__all__ = [
    "Counts",
    "align_vocabularies",
    "CountAccumulator",
    "count_texts",
    "count_source",
    "load_counts",
    "merge_counts",
    "save_counts",
]

ProgressFn = Callable[[int, int, int], None]
"""Called after each batch with (documents, sequences, tokens) so far; its optional
``start(total, unit)`` method is called first with the expected total (or None)."""

# Dense (n x V) accumulation is used when the count block takes at most this many bytes.
DENSE_LIMIT = 1 << 30


def _start(progress: ProgressFn | None, total: int | None, unit: str) -> None:
    start = getattr(progress, "start", None)
    if start is not None:
        start(total, unit)


# Positions are int32 row indices of the counts matrix.
MAX_POSITIONS = 2**31 - 1


def check_max_len(value: Any) -> int:
    """``max_len`` as an int in [1, 2**31-1] (a larger one cannot index the counts' rows)."""
    n = check_int("max_len", value, 1)
    if n > MAX_POSITIONS:
        check_int("max_len", n, 1, MAX_POSITIONS)
    return n


@dataclass(frozen=True)
class Counts:
    """Per-position token counts of a corpus.

    Attributes
    ----------
    matrix : scipy.sparse.csr_matrix of shape (n_positions, vocab_size), int64
        ``matrix[i, v]`` = number of sequences whose token at position ``i`` is ``v``.
    meta : mapping
        source, tokenizer, tokenizer_fingerprint, view, max_len, vocab_size, documents,
        sequences, tokens, posdiag_version (and column, limit, sample, seed when used).
    vocab : tuple of str or None
        The token of each id, for tokenizers that assign ids per run (``whitespace``); lets
        :func:`merge_counts` align the ids of separate runs. None for fixed vocabularies.
    shards : tuple of csr_matrix, each of shape (n_positions, vocab_size)
        Counts of ``K`` seeded random shards of the sequences, summing to ``matrix``, when
        counted with ``shards=K`` (for bootstrap intervals); empty otherwise. Not saved.
    no_intervals : str
        Why no bootstrap intervals are drawn from these counts although asked (e.g. ``--shards
        0``, a counts file); "" to let the shards decide
        (:func:`posdiag.uncertainty.bootstrap.why_no_intervals`). Not saved.
    """

    matrix: sp.csr_matrix
    meta: Mapping[str, Any] = field(default_factory=dict)
    vocab: tuple[str, ...] | None = None
    shards: tuple[sp.csr_matrix, ...] = ()
    no_intervals: str = ""

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
    def pad_id(self) -> int | None:
        """The model view's pad id (from the metadata); None for other views and older files."""
        pad = self.meta.get("pad_id") if self.meta.get("view") == "model" else None
        return None if pad is None else int(pad)

    @property
    def real_supports(self) -> np.ndarray:
        """Tokens other than the pad token at each position, of shape (n_positions,): in the
        model view every sequence reaches every position, so :attr:`supports` is flat there."""
        sup = self.supports
        pad = self.pad_id
        if pad is None or pad >= self.vocab_size:
            return sup
        return sup - np.asarray(self.matrix[:, pad].toarray()).ravel().astype(np.int64)

    @property
    def units(self) -> UnitTally | None:
        """Duplicates and sampling units of the counted corpus (:mod:`posdiag.corpus.units`), from
        the metadata; None for token id files, merged counts and counts files of older versions."""
        return UnitTally.from_meta(self.meta.get("units"))

    @property
    def vocab_seen(self) -> int:
        """Number of distinct token ids that occur anywhere."""
        # A mark per column, not np.unique's sort of every stored index.
        seen = np.zeros(self.matrix.shape[1], dtype=bool)
        seen[self.matrix.indices] = True
        return int(np.count_nonzero(seen))

    def __add__(self, other: Counts) -> Counts:
        """The counts of the union (:func:`merge_counts`)."""
        return merge_counts([self, other], ["left operand", "right operand"])


def columns(block: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``block`` (windows, m) transposed to contiguous columns (m, windows), reusing ``out``."""
    w, m = block.shape
    if out is None or out.dtype != block.dtype or out.size < w * m:
        out = np.empty(w * m, dtype=block.dtype)
    cols = out.reshape(-1)[: w * m].reshape(m, w)
    rows = max(1, (1 << 18) // max(m, 1))  # tiles of whole rows: 512 KB of uint16, L2-sized
    for r0 in range(0, w, rows):
        np.copyto(cols[:, r0 : r0 + rows], block[r0 : r0 + rows].T)
    return cols


class CountAccumulator:
    """Streaming counter of (position, id) pairs: sparse keys ``id * n + pos``, or with
    ``vocab_size`` an int32 ``n x vocab_size`` block of at most ``dense_limit`` bytes, spilled
    into an int64 total every 2**31 - 1 sequences."""

    _INT32_MAX = np.iinfo(np.int32).max

    def __init__(
        self,
        n: int,
        *,
        vocab_size: int | None = None,
        dense_limit: int = DENSE_LIMIT,
        compact_at: int = 1 << 22,
    ) -> None:
        self.n = check_max_len(n)
        self._compact_at = compact_at  # buffered keys merged into the totals past this many
        self.vocab_size = None if vocab_size is None else check_int("vocab_size", vocab_size, 1)
        dense_bytes = self.n * (self.vocab_size or 0) * 4
        # The matrix's row pointers (n + 1) are built however sparse the counts are.
        require(
            f"counting {self.n:,} positions (--max-len)",
            16 * (self.n + 1) + (dense_bytes if dense_bytes <= dense_limit else 0),
        )
        self._keys = np.empty(0, dtype=np.int64)
        self._vals = np.empty(0, dtype=np.int64)
        self._buf_keys: list[np.ndarray] = []
        self._buf_vals: list[np.ndarray] = []
        self._buffered = 0
        self._dense: np.ndarray | None = None
        self._spill: np.ndarray | None = None
        self._since_spill = 0
        if self.vocab_size is not None and dense_bytes <= dense_limit:
            self._dense = np.zeros((self.n, self.vocab_size), dtype=np.int32)

    @property
    def dense(self) -> bool:
        """Whether counts accumulate in a dense ``n x vocab_size`` block."""
        return self._dense is not None

    def _room(self, sequences: int) -> None:
        """Spill the int32 block into the int64 total if ``sequences`` more could overflow it."""
        assert self._dense is not None
        if self._since_spill + sequences > self._INT32_MAX:
            if self._spill is None:
                self._spill = np.zeros(self._dense.shape, dtype=np.int64)
            self._spill += self._dense
            self._dense[:] = 0
            self._since_spill = 0
        self._since_spill += sequences

    def add_sequences(self, seqs: Sequence[Sequence[int]]) -> int:
        """Count a batch of id sequences (each of length <= n); return the tokens added."""
        ids, pos, lengths, _ = flatten(seqs)
        if ids.size == 0:
            return 0
        if lengths.max() > self.n:
            raise ValueError(f"a sequence of length {lengths.max()} exceeds max_len {self.n}")
        if self._dense is not None:
            v = self._dense.shape[1]
            if ids.min() < 0 or ids.max() >= v:
                bad = int(ids[(ids < 0) | (ids >= v)][0])
                raise ValueError(f"token id {bad} outside [0, vocab_size={v})")
            self._room(len(seqs))
            pos *= v
            pos += ids
            np.add.at(self._dense.reshape(-1), pos, np.int32(1))
        else:
            self._buffer(ids * self.n + pos)
        return int(ids.size)

    def _buffer(self, keys: np.ndarray) -> None:
        """Buffer pair keys ``id * n + pos`` (any shape), compacted past ``compact_at`` keys."""
        keys, vals = np.unique(keys, return_counts=True)
        self._buf_keys.append(keys)
        self._buf_vals.append(vals.astype(np.int64))
        self._buffered += keys.size
        if self._buffered >= self._compact_at:
            self._compact()

    def add_columns(self, cols: np.ndarray) -> int:
        """Count a transposed block of windows (m, windows): ``cols[i]`` holds position ``i``'s
        checked ids; one ``np.add.at`` per contiguous column (numpy's unbuffered fast path)."""
        m, w = cols.shape
        if m > self.n:
            raise ValueError(f"windows of length {m} exceed max_len {self.n}")
        if self._dense is None:
            keys = cols.astype(np.int64)
            keys *= self.n
            keys += np.arange(m, dtype=np.int64)[:, None]
            self._buffer(keys)
            return w * m
        self._room(w)
        one = np.int32(1)
        for i in range(m):
            np.add.at(self._dense[i], cols[i], one)
        return w * m

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
        if self._dense is not None:
            return self._dense_matrix(vocab_size)
        ids, pos = np.divmod(self._keys, self.n)
        if ids.size and ids.max() >= vocab_size:
            raise ValueError(f"token id {ids.max()} >= vocab_size {vocab_size}")
        return sp.csr_matrix((self._vals, (pos, ids)), shape=(self.n, vocab_size), dtype=np.int64)

    def _dense_matrix(self, vocab_size: int) -> sp.csr_matrix:
        # A few rows at a time into the output arrays: fresh n x V temporaries are what is slow.
        assert self._dense is not None
        dense = self._dense if self._spill is None else self._spill + self._dense
        v = dense.shape[1]
        if vocab_size < v and dense[:, vocab_size:].any():
            raise ValueError(f"token ids >= vocab_size {vocab_size} were counted")
        dense = dense[:, : min(v, vocab_size)]
        per_row = np.count_nonzero(dense, axis=1)
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(per_row, out=indptr[1:])
        data = np.empty(int(indptr[-1]), dtype=np.int64)
        indices = np.empty(int(indptr[-1]), dtype=np.int32)
        width = dense.shape[1]
        step = max(1, (1 << 20) // max(width, 1))
        for r0 in range(0, self.n, step):
            rows = np.ascontiguousarray(dense[r0 : r0 + step]).reshape(-1)
            nz = np.flatnonzero(rows)
            lo, hi = indptr[r0], indptr[min(r0 + step, self.n)]
            data[lo:hi] = rows[nz]
            np.remainder(nz, width, out=nz)
            indices[lo:hi] = nz
        return sp.csr_matrix((data, indices, indptr), shape=(self.n, vocab_size), copy=False)


# What every count records, in the order _meta takes them.
_META_KEYS = (
    "source",
    "tokenizer",
    "tokenizer_fingerprint",
    "view",
    "max_len",
    "vocab_size",
    "documents",
    "sequences",
    "tokens",
)


def _meta(*values: Any) -> dict[str, Any]:
    """The metadata of a count: the :data:`_META_KEYS` values, then ``posdiag_version``."""
    return {**dict(zip(_META_KEYS, values, strict=True)), "posdiag_version": __version__}


def count_texts(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    *,
    view_name: str = "text",
    max_len: int = 512,
    batch_size: int = 1024,
    progress: ProgressFn | None = None,
    source: str = "<texts>",
    dense_limit: int = DENSE_LIMIT,
    shards: int = 0,
    shard_seed: int = 0,
    group_by: str | None = None,
    group_prefix: int = DEFAULT_GROUP_PREFIX,
    dedup: bool = False,
) -> Counts:
    """Tokenize, apply a view and count; with ``shards=K >= 2`` each sequence also goes to the
    shard of its sampling unit (:mod:`posdiag.corpus.units`), after ``dedup`` drops duplicates.

    Returns
    -------
    Counts
        With ``matrix`` of shape (max_len, tokenizer.vocab_size); ``vocab`` holds the
        tokenizer's vocabulary when it assigns ids per run (``whitespace``); ``shards`` the
        shard counts.
    """
    k = 0 if shards == 0 else check_int("shards", shards, 2)
    total, shard_counts, docs, seqs, toks, state = _count_texts(
        texts,
        tokenizer,
        view_name=view_name,
        max_len=max_len,
        batch_size=batch_size,
        progress=progress,
        dense_limit=dense_limit,
        shards=k,
        shard_seed=shard_seed,
        group_by=group_by,
        group_prefix=group_prefix,
        dedup=dedup,
    )
    if toks == 0:
        raise PosdiagError(f"{source}: the corpus is empty (no tokens after tokenization)")
    v = tokenizer.vocab_size
    meta = _meta(
        source, tokenizer.name, tokenizer.fingerprint, view_name, max_len, v, docs, seqs, toks
    )
    meta.update(units_meta(state, max_len, view_name, group_prefix, group_by, dedup))
    if view_name == "model":
        # Which id is padding, so supports can count real tokens (Counts.real_supports).
        meta["pad_id"] = tokenizer.pad_id()
    if k:
        meta.update(shards=k, shard_seed=shard_seed)
    return Counts(total, meta, tokenizer.vocabulary(), shard_counts)


def units_meta(
    state: UnitState,
    max_len: int,
    view_name: str,
    prefix: int,
    group_by: str | None,
    dedup: bool = False,
) -> dict[str, Any]:
    """The metadata key of a counting pass's sampling units: ``units`` (the tally)."""
    item = "documents" if view_name == "packed" else "sequences"
    return {"units": tally_of(state, max_len, item, prefix, group_by, dedup=dedup).to_meta()}


def _count_texts(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    *,
    view_name: str,
    max_len: int,
    batch_size: int,
    progress: ProgressFn | None,
    dense_limit: int,
    shards: int,
    shard_seed: int,
    group_by: str | None = None,
    group_prefix: int = DEFAULT_GROUP_PREFIX,
    dedup: bool = False,
    skip: np.ndarray | None = None,
) -> tuple[sp.csr_matrix, tuple[sp.csr_matrix, ...], int, int, int, UnitState]:
    """Count ``texts`` (a corpus, or one piece of it) into one total and ``shards`` shards;
    ``skip``: with ``dedup``, content hashes whose first copy was counted in another piece.

    Returns
    -------
    (total, shards, documents, sequences, tokens, units)
        csr matrices of shape (max_len, tokenizer.vocab_size): the total and its ``shards``
        parts (none without shards); the pass's :class:`~posdiag.corpus.units.UnitState`.
    """
    k = shards
    if k:
        # One sparse accumulator per shard (K dense blocks would not fit), with its row pointers.
        n = check_max_len(max_len)
        require(f"{k:,} shards of {n:,} positions (--shards, --max-len)", k * (16 * (n + 1) + 4096))
        accs = [CountAccumulator(max_len) for _ in range(k)]
    else:
        v = None if tokenizer.fingerprint == "run" else tokenizer.vocab_size
        accs = [CountAccumulator(max_len, vocab_size=v, dense_limit=dense_limit)]
    keyer = UnitKeyer(
        tokenizer,
        prefix=group_prefix,
        group_by=group_by,
        dedup=dedup,
        pad_id=tokenizer.pad_id() if view_name == "model" else None,
        seen=skip,
    )
    docs = seqs = toks = 0
    for batch, consumed, keys in _keyed_view(
        texts, tokenizer, view_name, max_len, batch_size, keyer
    ):
        if k:
            which = shard_of_keys(keys, shard_seed, k)
            for s, acc in enumerate(accs):
                idx = np.flatnonzero(which == s)
                if idx.size:
                    toks += acc.add_sequences([batch[j] for j in idx])
        else:
            toks += accs[0].add_sequences(batch)
        seqs += len(batch)
        docs += consumed
        if progress is not None:
            progress(docs, seqs, toks)
    mats = tuple(acc.matrix(tokenizer.vocab_size) for acc in accs)
    total = sp.csr_matrix(sum(mats[1:], mats[0])) if k else mats[0]
    return total, mats if k else (), docs, seqs, toks, keyer.state()


def _keyed_view(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    view_name: str,
    max_len: int,
    batch_size: int,
    keyer: UnitKeyer,
) -> Iterator[tuple[list[list[int]], int, np.ndarray]]:
    """:func:`~posdiag.corpus.tokenizers.view` with each sequence's unit key, exact duplicates
    left out with ``--dedup`` and each unit's reach recorded: (sequences, documents, keys)."""
    if view_name == "packed":
        for windows, consumed, keys in packed_windows(
            texts, tokenizer, max_len, batch_size=batch_size, keyer=keyer
        ):
            assert keys is not None
            keyer.reach(windows, keys)
            yield windows, consumed, keys
        return
    read: collections.deque[str] = collections.deque()

    def tee() -> Iterator[str]:
        for t in texts:
            read.append(t)
            yield t

    # view() asks for one batch of texts at a time and yields it before reading on, so the
    # texts of a batch are the first `consumed` of `read`.
    for batch, consumed in view(tee(), tokenizer, view_name, max_len, batch_size=batch_size):
        own = [read.popleft() for _ in range(consumed)]
        keys, keep = keyer.keys(batch, own)
        if not keep.all():
            batch = [s for s, kept in zip(batch, keep.tolist(), strict=True) if kept]
            keys = keys[keep]
        keyer.reach(batch, keys)
        yield batch, consumed, keys


def _selection_meta(source: Source) -> dict[str, Any]:
    fields = ("column", "limit", "sample")
    out = {k: getattr(source, k) for k in fields if getattr(source, k) is not None}
    if source.sample is not None:
        out["seed"] = source.seed
    return out


def count_source(
    source: Source, tokenizer: Tokenizer, *, progress: ProgressFn | None = None, **options: Any
) -> Counts:
    """:func:`count_texts` over a :class:`~posdiag.corpus.sources.Source`, recording its name,
    ``group_by`` and selection; ``options``: :func:`count_texts`'s other keyword arguments."""
    _start(progress, source.expected, "documents")
    counts = count_texts(
        source.texts(),
        tokenizer,
        progress=progress,
        source=source.name,
        group_by=source.group_by,
        **options,
    )
    return dataclasses.replace(counts, meta={**counts.meta, **_selection_meta(source)})


def _check_same(counts: Sequence[Counts], names: Sequence[str]) -> None:
    first = counts[0].meta
    for c, name in zip(counts[1:], names[1:], strict=True):
        for key in ("tokenizer_fingerprint", "view", "max_len", "vocab_size"):
            if key == "vocab_size" and first.get("tokenizer_fingerprint") == "run":
                continue  # per-run vocabularies are aligned through their tokens
            if key == "tokenizer_fingerprint" and key not in first and key not in c.meta:
                key = "tokenizer"
            a, b = first.get(key), c.meta.get(key)
            if a != b:
                label = "tokenizer" if key == "tokenizer_fingerprint" else key
                if label == "tokenizer":
                    a = f"{first.get('tokenizer')} ({a})"
                    b = f"{c.meta.get('tokenizer')} ({b})"
                raise PosdiagError(
                    f"{name}: cannot merge counts with a different {label} "
                    f"({names[0]}: {a}; {name}: {b})"
                )


def merge_counts(counts: Sequence[Counts], names: Sequence[str] | None = None) -> Counts:
    """Sum counts of the same tokenizer, view, ``max_len`` and vocabulary (additivity); per-run
    (``whitespace``) ids are first aligned (:func:`align_vocabularies`).

    Raises
    ------
    PosdiagError
        When the inputs differ in tokenizer, view, max_len or vocabulary size, or a per-run
        vocabulary is missing.
    """
    if not counts:
        raise PosdiagError("merge: no counts given")
    labels = list(names) if names is not None else [f"counts #{k}" for k in range(len(counts))]
    _check_same(counts, labels)
    meta = dict(counts[0].meta)
    for key in ("documents", "sequences", "tokens"):
        meta[key] = sum(int(c.meta.get(key, 0)) for c in counts)
    meta["source"] = " + ".join(str(c.meta.get("source", "?")) for c in counts)
    meta["merged_from"] = labels
    for key in ("limit", "sample", "seed"):
        meta.pop(key, None)
    # A copy in one input of a sequence in another is invisible to the inputs' tallies: the
    # merged counts have none (min_count then counts sequences; docs/geometry.md section 2b).
    meta.pop("units", None)
    aligned = align_vocabularies(counts, labels)
    total = sum((c.matrix for c in aligned[1:]), aligned[0].matrix.copy())
    run = meta.get("tokenizer_fingerprint") == "run"
    if run:
        meta["vocab_size"] = aligned[0].vocab_size
    return Counts(sp.csr_matrix(total, dtype=np.int64), meta, aligned[0].vocab if run else None)


def _renumber(x: sp.csr_matrix, remap: np.ndarray, v: int) -> sp.csr_matrix:
    """``x`` with column ``k`` moved to ``remap[k]``, ``v`` columns wide."""
    m = x.tocoo()
    return sp.csr_matrix((m.data, (m.row, remap[m.col])), shape=(x.shape[0], v), dtype=np.int64)


def align_vocabularies(
    counts: Sequence[Counts], names: Sequence[str] | None = None
) -> list[Counts]:
    """Renumber per-run (``whitespace``) ids onto their union vocabulary (tokens in order of
    first appearance); counts of a fixed vocabulary are returned unchanged.

    Raises
    ------
    PosdiagError
        When a per-run vocabulary is not stored (counts files of older versions).
    """
    if not counts or counts[0].meta.get("tokenizer_fingerprint") != "run":
        return list(counts)
    labels = list(names) if names is not None else [f"counts #{k}" for k in range(len(counts))]
    for c, name in zip(counts, labels, strict=True):
        if c.vocab is None:
            raise PosdiagError(
                f"{name}: counted with a per-run vocabulary (whitespace) but it is not stored; "
                "count the corpus again with this version to align it"
            )
    vocab, remaps = union_vocabulary([c.vocab or () for c in counts])
    v = len(vocab)
    # The shards too: a diff's cross-fit splits each side by sequence, as stress does.
    return [
        Counts(
            _renumber(c.matrix, remap, v),
            {**c.meta, "vocab_size": v},
            vocab,
            tuple(_renumber(x, remap, v) for x in c.shards),
        )
        for c, remap in zip(counts, remaps, strict=True)
    ]


def union_vocabulary(
    vocabs: Sequence[Sequence[str]],
) -> tuple[tuple[str, ...], list[np.ndarray]]:
    """The union of per-run vocabularies in order of first appearance, and each one's ids in
    it: int64 arrays of shape (len(vocabs[k]),)."""
    index: dict[str, int] = {}
    for vocab in vocabs:
        for tok in vocab:
            index.setdefault(tok, len(index))
    remaps = [
        np.fromiter((index[t] for t in vocab), np.int64, count=len(vocab)) for vocab in vocabs
    ]
    return tuple(index), remaps


def save_counts(counts: Counts, path: str | Path, *, force: bool = False) -> Path:
    """Write ``counts`` atomically as an ``.npz`` readable by ``scipy.sparse.load_npz``."""
    if not str(path).endswith(".npz"):
        raise PosdiagError(f"'output' must end with .npz; got {str(path)!r}")
    m = sp.csr_matrix(counts.matrix)
    m.sort_indices()
    with atomic_outputs([path], force) as (tmp,), open(tmp, "wb") as fh:
        arrays: dict[str, Any] = {
            "format": np.array("csr"),
            "shape": np.array(m.shape),
            "data": m.data,
            "indices": m.indices,
            "indptr": m.indptr,
            "posdiag_meta": np.array(json.dumps(dict(counts.meta), sort_keys=True)),
        }
        if counts.vocab is not None:
            arrays["vocab"] = np.array(counts.vocab, dtype=str)
        np.savez_compressed(fh, **arrays)
    return Path(path)


def is_counts_file(path: str | Path) -> bool:
    """Whether ``path`` names a counts archive (by its ``.npz`` suffix)."""
    return str(path).endswith(".npz")


def load_counts(path: str | Path) -> Counts:
    """Read a counts file written by :func:`save_counts`, validating all of it first
    (:mod:`posdiag.counts._npz`).

    Raises
    ------
    PosdiagError
        When the file is missing, damaged, inconsistent, or would not fit in memory.
    """
    from ._npz import read_counts_arrays, validate_csr

    p = Path(path)
    if not os.path.lexists(p):
        raise PosdiagError(f"{path}: no such file")
    if not p.is_file():
        raise PosdiagError(f"{path}: not a regular file")
    try:
        arrays = read_counts_arrays(p)
    except PermissionError:
        raise PosdiagError(f"{path}: cannot read the file (permission denied)") from None
    rows, cols, meta = validate_csr(str(path), arrays)
    m = sp.csr_matrix(
        (
            arrays["data"].astype(np.int64),
            arrays["indices"].astype(np.int32 if cols < 2**31 else np.int64),
            arrays["indptr"].astype(np.int64),
        ),
        shape=(rows, cols),
    )
    m.sum_duplicates()  # a row listing a column twice (valid CSR) means their sum
    vocab = tuple(str(t) for t in arrays["vocab"].tolist()) if "vocab" in arrays else None
    return Counts(m, meta, vocab)
