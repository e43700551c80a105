"""Counting on a Dask cluster: each piece (:mod:`posdiag.counts._pieces`) counted on a worker,
the partial counts tree-summed in reading order, bit-identical to one process (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.validate import check_choice, check_int
from ..corpus.sources import Source
from ..corpus.tokenizers import Tokenizer, load_tokenizer, view
from ..corpus.units import DEFAULT_GROUP_PREFIX, UnitKeyer, UnitState
from ..errors import PosdiagError
from ._pieces import PIECE_BYTES, Piece, piece_texts, plan_pieces
from .core import (
    DENSE_LIMIT,
    CountAccumulator,
    Counts,
    ProgressFn,
    _count_texts,
    _meta,
    _renumber,
    _selection_meta,
    _start,
    columns,
    union_vocabulary,
    units_meta,
)
from .ids import BLOCK_TOKENS, _check_ids, _id_blocks, _select_windows

__all__ = [
    "ENGINES",
    "Engine",
    "Job",
    "Partial",
    "Piece",
    "add_partials",
    "count_on_dask",
    "count_piece",
    "dedup_skips",
    "engine_from_options",
    "job_for",
    "piece_hashes",
    "plan_pieces",
    "run_pieces",
]

ENGINES = ("local", "dask")


@dataclass(frozen=True)
class Engine:
    """Where counting runs: ``local`` (this process) or ``dask``, on the scheduler at
    ``scheduler`` (``tcp://host:8786``) or else a ``LocalCluster`` of ``workers``
    single-threaded processes (None: the CPU count), in pieces of ``piece_bytes``."""

    name: str = "local"
    scheduler: str | None = None
    workers: int | None = None
    piece_bytes: int = PIECE_BYTES

    @property
    def is_dask(self) -> bool:
        return self.name == "dask"


def engine_from_options(
    engine: str = "local", scheduler: str | None = None, workers: int | None = None
) -> Engine:
    """Check ``--engine``, ``--scheduler`` and ``--workers`` together, before any counting."""
    check_choice("engine", engine, ENGINES)
    if engine != "dask" and (scheduler is not None or workers is not None):
        given = "--scheduler" if scheduler is not None else "--workers"
        raise PosdiagError(f"{given} applies to --engine dask; got --engine {engine}")
    if scheduler is not None and workers is not None:
        raise PosdiagError(
            "--workers sizes the LocalCluster started without --scheduler; a cluster at "
            f"--scheduler {scheduler} has its own workers"
        )
    if workers is not None:
        workers = check_int("workers", workers, 1)
    if scheduler is not None and not scheduler.strip():
        raise PosdiagError("'scheduler' must be an address such as tcp://host:8786; got ''")
    return Engine(engine, scheduler, workers)


@dataclass(frozen=True)
class Job:
    """What every piece of one run shares: the source and tokenizer spec (paths absolute), the
    client's tokenizer ``fingerprint`` (a worker's copy must match) and the counting options of
    :func:`~posdiag.counts.core.count_texts`; ``skip``: with ``dedup``, this piece's content
    hashes whose first copy is in an earlier piece."""

    source: Source
    tokenizer: str | None
    fingerprint: str | None
    pad_token: str | None = None
    view_name: str = "text"
    max_len: int = 512
    vocab_size: int | None = None
    shards: int = 0
    seed: int = 0
    batch_size: int = 1024
    dense_limit: int = DENSE_LIMIT
    group_prefix: int = DEFAULT_GROUP_PREFIX
    dedup: bool = False
    skip: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Partial:
    """Counts of some consecutive pieces: what a worker returns and the tree sum adds.

    Attributes
    ----------
    matrix : csr_matrix of shape (max_len, vocab_size)
        int64 as counted; as received from a worker, the smallest unsigned type that holds
        its counts (:func:`add_partials` and the final stacking widen them to int64).
    shards : tuple of csr_matrix of the same shape
        Empty without shards.
    documents, sequences, tokens : int
    vocab : tuple of str or None
        Per-run vocabularies (``whitespace``): the tokens of the ids, in first-appearance order.
    units : UnitState or None
        Text pieces: the hashes of their sampling units (they add up, :mod:`posdiag.corpus.units`).
    """

    matrix: sp.csr_matrix
    shards: tuple[sp.csr_matrix, ...]
    documents: int
    sequences: int
    tokens: int
    vocab: tuple[str, ...] | None = None
    units: UnitState | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # As plain arrays, which Dask sends as out-of-band buffers without copies.
        shards = tuple(_csr_parts(s) for s in self.shards)
        rest = (self.documents, self.sequences, self.tokens, self.vocab, self.units)
        return (_partial_from, (_csr_parts(self.matrix), shards, *rest))


_CsrParts = tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]


def _narrow(a: np.ndarray, top: int) -> np.ndarray:
    """``a`` (values in ``[0, top]``) in the smallest unsigned integer type that holds ``top``."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dt).max:
            return a if a.dtype == dt else a.astype(dt)
    return a


def _csr_parts(m: sp.csr_matrix) -> _CsrParts:
    # Counts and column ids travel narrowed: moving bytes is what a cluster adds to counting.
    data, indices = m.data, m.indices
    if data.size:
        data = _narrow(data, int(data.max()))
        indices = _narrow(indices, int(m.shape[1]) - 1)
    return (data, indices, m.indptr, (int(m.shape[0]), int(m.shape[1])))


def _csr_from(parts: _CsrParts) -> sp.csr_matrix:
    # Kept in the wire type: the sums widen them to int64 once, into their own output.
    data, indices, indptr, shape = parts
    return sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)


def _partial_from(matrix: _CsrParts, shards: tuple[_CsrParts, ...], *rest: Any) -> Partial:
    return Partial(_csr_from(matrix), tuple(_csr_from(s) for s in shards), *rest)


_LOCAL = threading.local()


def _tokenizer(job: Job) -> Tokenizer:
    """The job's tokenizer: a fresh one for per-run ids, else one cached per worker thread."""
    assert job.tokenizer is not None
    if job.fingerprint == "run":
        return load_tokenizer(job.tokenizer, pad_token=job.pad_token)
    cache: dict[tuple[str, str | None], Tokenizer] = getattr(_LOCAL, "tokenizers", {})
    _LOCAL.tokenizers = cache
    key = (job.tokenizer, job.pad_token)
    if key not in cache:
        tok = load_tokenizer(job.tokenizer, pad_token=job.pad_token)
        if tok.fingerprint != job.fingerprint:
            raise PosdiagError(
                f"tokenizer {job.tokenizer}: the worker's copy differs from the client's "
                f"(fingerprint {tok.fingerprint}, expected {job.fingerprint})"
            )
        cache[key] = tok
    return cache[key]


def count_piece(piece: Piece, job: Job) -> Partial:
    """Count one piece (runs on a worker; also usable in-process)."""
    if piece.kind == "ids":
        return _count_id_piece(piece, job)
    tok = _tokenizer(job)
    total, shards, docs, seqs, toks, units = _count_texts(
        piece_texts(piece, job.source),
        tok,
        view_name=job.view_name,
        max_len=job.max_len,
        batch_size=job.batch_size,
        progress=None,
        dense_limit=job.dense_limit,
        shards=job.shards,
        shard_seed=job.seed,
        group_by=job.source.group_by,
        group_prefix=job.group_prefix,
        dedup=job.dedup,
        skip=job.skip,
    )
    return Partial(total, shards, docs, seqs, toks, tok.vocabulary(), units)


def piece_hashes(piece: Piece, job: Job) -> np.ndarray:
    """Distinct content hashes of a text piece's sequences, sorted (the first pass of
    ``--dedup`` on Dask; runs on a worker)."""
    tok = _tokenizer(job)
    keyer = UnitKeyer(tok, prefix=0)
    found = [np.empty(0, dtype=np.uint64)]
    texts = piece_texts(piece, job.source)
    for batch, _ in view(texts, tok, job.view_name, job.max_len, batch_size=job.batch_size):
        found.append(keyer.hashes(batch)[0])
    return np.unique(np.concatenate(found))


def dedup_skips(hashes: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each piece ``j`` (in reading order), the hashes of ``hashes[j]`` (uint64, distinct
    within a piece) an earlier piece holds too: piece ``j`` drops every copy of them."""
    if not hashes:
        return []
    allh = np.concatenate(hashes)
    owner = np.repeat(np.arange(len(hashes)), [h.size for h in hashes])
    order = np.lexsort((owner, allh))
    h, o = allh[order], owner[order]
    later = np.r_[False, h[1:] == h[:-1]]  # not the first piece holding this hash
    return [h[later & (o == j)] for j in range(len(hashes))]


def _count_id_piece(piece: Piece, job: Job) -> Partial:
    """Count positions ``piece.positions`` of the windows in ``[piece.start, piece.stop)``."""
    n, v = job.max_len, int(job.vocab_size or 0)
    lo, hi = piece.positions
    src = job.source
    arr = dataclasses.replace(src, files=(piece.path,)).token_ids()
    # The windows count_ids selects, restricted to this piece.
    sel = _select_windows(int(arr.size), n, src)
    w0, w1 = piece.start // n, -(-piece.stop // n)
    if sel.chosen is not None:
        sel = dataclasses.replace(sel, chosen=sel.chosen[(sel.chosen >= w0) & (sel.chosen < w1)])
    sel = dataclasses.replace(sel, windows=w1)
    acc = CountAccumulator(hi - lo, vocab_size=v, dense_limit=job.dense_limit)
    seqs = toks = 0
    buf: np.ndarray | None = None
    for block, offsets in _id_blocks(arr, sel, max(1, BLOCK_TOKENS // n), w0, (lo, hi)):
        _check_ids(block, offsets, v, src.name)
        buf = columns(block, buf)
        toks += acc.add_columns(buf)
        seqs += block.shape[0]
    m = acc.matrix(v)
    # Rows lo..hi of the full (n x V) matrix: pad the row pointer, the counts stay in place.
    indptr = np.concatenate(
        [np.zeros(lo, dtype=m.indptr.dtype), m.indptr, np.full(n - hi, m.indptr[-1])]
    )
    matrix = sp.csr_matrix((m.data, m.indices, indptr), shape=(n, v))
    # Windows are counted once, by the pieces holding their first position.
    return Partial(matrix, (), seqs if lo == 0 else 0, seqs if lo == 0 else 0, toks)


def _widen(m: sp.csr_matrix, width: int) -> sp.csr_matrix:
    """``m`` as int64, ``width`` columns wide (ids past its vocabulary: no counts)."""
    data = m.data.astype(np.int64, copy=False)
    return sp.csr_matrix((data, m.indices, m.indptr), shape=(m.shape[0], width), copy=False)


def add_partials(a: Partial, b: Partial) -> Partial:
    """``a + b`` for consecutive pieces (``a`` read first): a node of the tree sum; per-run
    vocabularies concatenate in first-appearance order (associative, so any tree agrees)."""
    vocab, remap = None, None
    width = max(a.matrix.shape[1], b.matrix.shape[1])
    if a.vocab is not None and b.vocab is not None:
        vocab, (_, remap) = union_vocabulary([a.vocab, b.vocab])
        width = len(vocab)

    def move(m: sp.csr_matrix) -> sp.csr_matrix:
        return _widen(m, width) if remap is None else _renumber(m, remap, width)

    def add(x: sp.csr_matrix, y: sp.csr_matrix) -> sp.csr_matrix:
        return sp.csr_matrix(_widen(x, width) + move(y), dtype=np.int64)

    return Partial(
        add(a.matrix, b.matrix),
        tuple(add(x, y) for x, y in zip(a.shards, b.shards, strict=True)),
        a.documents + b.documents,
        a.sequences + b.sequences,
        a.tokens + b.tokens,
        vocab,
        None if a.units is None or b.units is None else a.units + b.units,
    )


def _stats(p: Partial) -> tuple[int, int, int]:
    return p.documents, p.sequences, p.tokens


def _tree_sum(client: Any, futures: Sequence[Any]) -> Any:
    """One future for the sum of ``futures``, added pairwise in order (left before right)."""
    level = list(futures)
    while len(level) > 1:
        pairs = zip(level[0::2], level[1::2], strict=False)  # an odd last one moves up as it is
        sums = [client.submit(add_partials, a, b, pure=False) for a, b in pairs]
        level = sums + level[2 * len(sums) :]
    return level[0]


def run_pieces(
    client: Any,
    pieces: Sequence[Piece],
    job: Job,
    *,
    progress: ProgressFn | None = None,
    task_fn: Callable[[Piece, Job], Partial] = count_piece,
    direct: bool | None = None,
    jobs: Sequence[Job] | None = None,
) -> Partial:
    """Count ``pieces`` on the cluster of ``client`` and return their sum; ``jobs``: one job
    per piece instead of ``job`` (``--dedup``). Id pieces sum in one tree per position range,
    stacked by :class:`_RowStack`; a failing piece cancels the run and its error is raised."""
    from distributed import as_completed

    if jobs is None:
        futures = client.map(task_fn, pieces, job=job, pure=False)
    else:
        futures = [
            client.submit(task_fn, p, job=j, pure=False) for p, j in zip(pieces, jobs, strict=True)
        ]
    stats = [client.submit(_stats, f, pure=False) for f in futures]
    groups: dict[tuple[int, int], list[Any]] = {}
    for piece, fut in zip(pieces, futures, strict=True):
        groups.setdefault(piece.positions if piece.kind == "ids" else (0, 0), []).append(fut)
    tree = [_tree_sum(client, fs) for fs in groups.values()]
    where = {f.key: k for k, f in enumerate(tree)}
    rows = _RowStack(len(tree))
    pending = [*stats, *tree]
    del futures, groups  # the sums hold what they still need; finished pieces can be freed
    docs = seqs = toks = 0
    try:
        for fut in as_completed(pending):
            if fut.key in where:
                rows.add(where[fut.key], client.gather(fut, direct=direct))
                fut.release()  # its worker may drop it now
                continue
            d, s, t = fut.result()
            docs, seqs, toks = docs + d, seqs + s, toks + t
            if progress is not None:
                progress(docs, seqs, toks)
    except BaseException:
        client.cancel(pending)
        raise
    return rows.total()


class _RowStack:
    """The sum of partials with disjoint rows (successive id position ranges), each appended
    as int64 once those before it arrived; a single partial is returned as it came."""

    def __init__(self, count: int) -> None:
        self.parts: list[Partial | None] = [None] * count
        self.next = 0
        self.first: Partial | None = None
        self.data = np.empty(0, dtype=np.int64)
        self.indices = np.empty(0, dtype=np.int32)
        self.indptr: np.ndarray | None = None
        self.width = 0
        self.stats = [0, 0, 0]

    def add(self, k: int, part: Partial) -> None:
        if len(self.parts) == 1:
            self.first = part
            return
        self.parts[k] = part
        while self.next < len(self.parts) and (ready := self.parts[self.next]) is not None:
            self.parts[self.next] = None
            self._append(ready)
            self.next += 1

    def _append(self, part: Partial) -> None:
        m = part.matrix
        n, width = m.shape
        if self.indptr is None:
            self.indptr = np.zeros(n + 1, dtype=np.int64)
            self.width = width
            if width > np.iinfo(np.int32).max:
                self.indices = self.indices.astype(np.int64)
        self.stats = [x + y for x, y in zip(self.stats, _stats(part), strict=True)]
        rows = np.flatnonzero(np.diff(m.indptr))
        if rows.size == 0:
            return
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        a, b = int(m.indptr[lo]), int(m.indptr[hi])
        at = self.data.size
        self.data.resize(at + b - a, refcheck=False)  # ours alone: no other view exists
        self.indices.resize(at + b - a, refcheck=False)
        self.data[at:] = m.data[a:b]
        self.indices[at:] = m.indices[a:b]
        self.indptr[lo + 1 : hi + 1] = m.indptr[lo + 1 : hi + 1] - a + at
        self.indptr[hi + 1 :] = at + b - a

    def total(self) -> Partial:
        if self.first is not None:
            return self.first
        assert self.indptr is not None and self.next == len(self.parts)
        n = self.indptr.size - 1
        matrix = sp.csr_matrix(
            (self.data, self.indices, self.indptr), shape=(n, self.width), copy=False
        )
        docs, seqs, toks = self.stats
        return Partial(matrix, (), docs, seqs, toks)


def count_on_dask(
    source: Source,
    job: Job,
    engine: Engine,
    *,
    tokenizer_name: str = "ids",
    progress: ProgressFn | None = None,
    client: Any = None,
    task_fn: Callable[[Piece, Job], Partial] = count_piece,
) -> Counts:
    """Count ``source`` piece by piece on Dask (``client``, else one from ``engine``); the same
    :class:`Counts` as one process. ``task_fn`` replaces :func:`count_piece` (tests)."""
    if not source.is_ids:
        if job.view_name == "packed":
            raise PosdiagError(
                f"{source.name}: --view packed carries windows across files, so a text corpus "
                "cannot be cut into pieces; pre-tokenize it into a .bin, or use --engine local"
            )
        if source.limit is not None or source.sample is not None:
            given = "--limit" if source.limit is not None else "--sample"
            raise PosdiagError(
                f"{given} selects documents in reading order across files; it is not available "
                "with --engine dask for a text corpus (use --engine local)"
            )
    size = engine.piece_bytes
    pieces = [] if source.is_ids else plan_pieces(source, job.max_len, piece_bytes=size)
    from ._cluster import _client, _direct  # imports dask

    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(_client(engine))
        if source.is_ids:
            threads = sum(client.nthreads().values())
            pieces = plan_pieces(source, job.max_len, job.vocab_size, threads, size)
            _start(progress, sum(p.stop - p.start for p in pieces if p.positions[0] == 0), "tokens")
        else:
            _start(progress, source.expected, "documents")
        if not pieces:
            raise PosdiagError(f"{source.name}: no tokens to count")
        jobs: list[Job] | None = None
        if job.dedup:
            # A first pass finds which piece holds the first copy of each sequence.
            found = client.gather(client.map(piece_hashes, pieces, job=job, pure=False))
            jobs = [dataclasses.replace(job, skip=sk) for sk in dedup_skips(found)]
        part = run_pieces(
            client,
            pieces,
            job,
            progress=progress,
            task_fn=task_fn,
            direct=_direct(client),
            jobs=jobs,
        )
    return _counts_of(part, source, job, tokenizer_name)


def _counts_of(part: Partial, source: Source, job: Job, tokenizer_name: str) -> Counts:
    """The :class:`Counts` of the summed ``part``, with the metadata one process records."""
    ids = source.is_ids
    if part.tokens == 0:
        if ids:
            raise PosdiagError(f"{source.name}: no tokens to count")
        raise PosdiagError(f"{source.name}: the corpus is empty (no tokens after tokenization)")
    n = job.max_len
    if ids:  # id windows are the documents; the fingerprint defaults to the tokenizer's name
        v, fp, docs = int(job.vocab_size or 0), job.fingerprint or tokenizer_name, part.sequences
    else:
        v = len(part.vocab) if part.vocab is not None else int(part.matrix.shape[1])
        fp, docs = str(job.fingerprint), part.documents
    view_name = "packed" if ids else job.view_name
    meta = _meta(
        source.name, tokenizer_name, fp, view_name, n, v, docs, part.sequences, part.tokens
    )
    meta.update(_selection_meta(source))
    if part.units is not None:
        meta.update(
            units_meta(part.units, n, job.view_name, job.group_prefix, source.group_by, job.dedup)
        )
    if view_name == "model":
        # Which id is padding, as count_texts records it (Counts.real_supports).
        tok = load_tokenizer(job.tokenizer or "whitespace", pad_token=job.pad_token)
        meta["pad_id"] = tok.pad_id()
    if job.shards:
        meta.update(shards=job.shards, shard_seed=job.seed)
    shards = tuple(_widen(s, v) for s in part.shards)  # empty without shards
    return Counts(_widen(part.matrix, v), meta, part.vocab, shards)


def job_for(source: Source, tokenizer: Tokenizer | None, **options: Any) -> Job:
    """The :class:`Job` of a run: ``source`` with absolute paths, the tokenizer by spec, and
    the other :class:`Job` fields (``view_name``, ``max_len``, ...) as ``options``."""

    def absolute(path: str | None) -> str | None:
        return os.path.abspath(path) if path is not None and Path(path).exists() else path

    # Pieces carry their own paths: the file list would be sent again with every piece.
    src = dataclasses.replace(source, files=(), dataset=absolute(source.dataset))
    spec = None if tokenizer is None else absolute(tokenizer.name)
    return Job(src, spec, None if tokenizer is None else tokenizer.fingerprint, **options)
