"""Counting a pre-tokenized id file (``.npy``, ``.bin``) in the ``packed`` view: memory-mapped
blocks of windows, counted into a dense block by one process with a helper thread, or by forked
workers that share the block (docs/performance.md)."""

from __future__ import annotations

import mmap
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._util.memory import require
from .._util.validate import check_int
from ..corpus.sources import Source
from ..errors import PosdiagError
from .core import (
    DENSE_LIMIT,
    CountAccumulator,
    Counts,
    ProgressFn,
    _meta,
    _selection_meta,
    _start,
    check_max_len,
    columns,
)

__all__ = ["BLOCK_TOKENS", "count_ids"]

# Ids read, checked and counted at a time (one block of windows; a Dask id piece the same).
BLOCK_TOKENS = 1 << 24


@dataclass(frozen=True)
class _Windows:
    """Which ``n``-token windows of an id file are counted (``--limit`` / ``--sample``).

    ``n_full`` windows are whole and a shorter tail of ``rem`` tokens follows when ``rem > 0``.
    Without ``chosen`` the first ``windows`` windows are read in file order; with it, exactly
    the windows it lists (sorted). ``sequences`` and ``tokens`` are what will be counted.
    """

    n: int
    n_full: int
    rem: int
    windows: int
    chosen: np.ndarray | None
    sequences: int
    tokens: int


def _select_windows(total: int, n: int, source: Source) -> _Windows:
    """The windows of a ``total``-token id file that ``source``'s limit and sample select."""
    n_full, rem = divmod(total, n)
    windows = n_full + (1 if rem else 0)
    if source.sample is None:
        windows = windows if source.limit is None else min(windows, source.limit)
        return _Windows(n, n_full, rem, windows, None, windows, min(total, windows * n))
    rng = np.random.default_rng(source.seed)
    chosen = np.flatnonzero(rng.random(windows) < source.sample)
    if source.limit is not None:
        chosen = chosen[: source.limit]
    tokens = int(np.count_nonzero(chosen < n_full)) * n + (rem if n_full in chosen else 0)
    return _Windows(n, n_full, rem, windows, chosen, int(chosen.size), tokens)


def _id_blocks(
    arr: np.ndarray,
    sel: _Windows,
    per_block: int,
    first: int = 0,
    positions: tuple[int, int] | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(block of windows, file offset of each block row), in file order, ``per_block`` windows
    at a time from window ``first``; ``positions``: only the columns ``[lo, hi)`` (views where
    the windows are consecutive)."""
    n, n_full = sel.n, sel.n_full
    lo, hi = positions or (0, n)
    full = arr[: n_full * n].reshape(n_full, n)
    end = n_full * n
    tail = (np.asarray(arr[end + lo : end + hi]).reshape(1, -1), np.array([end + lo]))
    if sel.chosen is None:
        last_full = min(n_full, sel.windows)
        for w0 in range(first, last_full, per_block):
            w1 = min(w0 + per_block, last_full)
            yield np.asarray(full[w0:w1, lo:hi]), np.arange(w0, w1, dtype=np.int64) * n + lo
        if sel.windows > n_full:
            yield tail
    else:
        for c0 in range(0, sel.chosen.size, per_block):
            part = sel.chosen[c0 : c0 + per_block]
            rows = part[part < n_full]
            if rows.size:
                yield np.asarray(full[rows, lo:hi]), rows * n + lo
            if rows.size < part.size:
                yield tail


def _first_bad_id(block: np.ndarray, v: int) -> tuple[int, int] | None:
    """(row, column) of the first id of ``block`` outside ``[0, v)``, in row-major order."""
    signed = block.dtype.kind == "i"
    if not block.size or (block.max() < v and not (signed and block.min() < 0)):
        return None
    bad = (block >= v) | (block < 0) if signed else block >= v
    return divmod(int(np.argmax(bad)), block.shape[1])


def _bad_id_error(name: str, token: int, offset: int, v: int) -> PosdiagError:
    return PosdiagError(
        f"{name}: token id {token} at offset {offset:,} is outside [0, --vocab-size={v})"
    )


def _check_ids(block: np.ndarray, offsets: np.ndarray, v: int, name: str) -> None:
    """Refuse the first id of ``block`` (windows at file ``offsets``) outside ``[0, v)``."""
    bad = _first_bad_id(block, v)
    if bad is not None:
        r, c = bad
        raise _bad_id_error(name, int(block[r, c]), int(offsets[r]) + c, v)


def _pipelined_count(
    blocks: Iterator[tuple[np.ndarray, np.ndarray]],
    acc: CountAccumulator,
    v: int,
    name: str,
    progress: ProgressFn | None,
) -> tuple[int, int]:
    """Count ``blocks`` into ``acc``; returns (windows, tokens). A helper thread reads, checks
    and transposes block k+1 while this one counts block k (``np.add.at`` holds the GIL)."""
    buffers: list[np.ndarray | None] = [None, None]

    def prepare(item: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
        block, offsets = item
        _check_ids(block, offsets, v, name)
        cols = buffers[k] = columns(block, buffers[k])
        return cols

    seqs = toks = 0
    with ThreadPoolExecutor(1) as pool:
        first = next(blocks, None)
        pending = None if first is None else pool.submit(prepare, first, 0)
        k = 0
        while pending is not None:
            cols = pending.result()
            nxt = next(blocks, None)
            k ^= 1
            pending = None if nxt is None else pool.submit(prepare, nxt, k)
            toks += acc.add_columns(cols) if cols.size else 0
            seqs += cols.shape[1]
            if progress is not None:
                progress(seqs, seqs, toks)
    return seqs, toks


def count_ids(
    source: Source,
    *,
    max_len: int = 512,
    vocab_size: int,
    tokenizer: str = "ids",
    fingerprint: str | None = None,
    progress: ProgressFn | None = None,
    block_tokens: int = BLOCK_TOKENS,
    dense_limit: int = DENSE_LIMIT,
    workers: int | None = None,
) -> Counts:
    """Count a pre-tokenized id file in the ``packed`` view: consecutive windows of ``max_len``
    (the last may be shorter), read in blocks of ``block_tokens``; with a dense block and
    ``workers > 1`` (default: the CPU count, at most 4) forked workers count position ranges.

    Raises
    ------
    PosdiagError
        When an id is negative or ``>= vocab_size`` (naming the first offending offset).
    """
    n = check_max_len(max_len)
    v = check_int("vocab_size", vocab_size, 1)
    # Per-column arrays (token totals, the geometry's column selections) of the vocabulary.
    require(f"a vocabulary of {v:,} ids (--vocab-size)", 24 * v)
    arr = source.token_ids()
    sel = _select_windows(int(arr.size), n, source)
    acc = CountAccumulator(n, vocab_size=v, dense_limit=dense_limit)
    per_block = max(1, block_tokens // n)
    _start(progress, sel.tokens, "tokens")
    if workers is None:
        workers = min(os.cpu_count() or 1, 4)
    if (
        acc.dense
        and workers > 1
        and n >= 2
        and sel.tokens >= block_tokens
        and "fork" in multiprocessing.get_all_start_methods()
    ):
        big = sel.sequences > CountAccumulator._INT32_MAX
        acc._dense = _forked_count(
            lambda: _id_blocks(arr, sel, per_block),
            n,
            v,
            min(workers, n),
            np.int64 if big else np.int32,
            source.name,
            progress,
        )
        seqs, toks = sel.sequences, sel.tokens
    else:
        seqs, toks = _pipelined_count(
            _id_blocks(arr, sel, per_block), acc, v, source.name, progress
        )
    if toks == 0:
        raise PosdiagError(f"{source.name}: no tokens to count")
    meta = _meta(source.name, tokenizer, fingerprint or tokenizer, "packed", n, v, seqs, seqs, toks)
    meta.update(_selection_meta(source))
    return Counts(acc.matrix(v), meta)


def _shared(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed array in anonymous shared memory: forked children write into the same pages."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = mmap.mmap(-1, max(size, 1))
    return np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _die_with_parent(parent: int) -> None:
    """In a forked worker: die when the parent does (Linux: PR_SET_PDEATHSIG), and leave
    signals to the parent, which stops its workers."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler's exception
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # blocked while forking
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the parent's finally-block still terminates its workers
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)


def _forked_count(
    blocks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
    n: int,
    v: int,
    workers: int,
    dtype: Any,
    name: str,
    progress: ProgressFn | None,
) -> np.ndarray:
    """Count ``blocks()`` into a shared dense (n, v) block, worker ``k`` at positions
    ``[lo_k, hi_k)``; of the workers' first ids outside ``[0, v)`` the smallest offset wins."""
    dense = _shared((n, v), dtype)
    status = _shared((workers, 3), np.int64)  # (state, offset, id); state 1 = bad id, 2 = crash
    done = _shared((workers,), np.int64)
    bounds = np.linspace(0, n, workers + 1).astype(int)

    parent = os.getpid()

    def work(k: int) -> None:
        _die_with_parent(parent)
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        one = dense.dtype.type(1)
        buf: np.ndarray | None = None
        try:
            for block, offsets in blocks():
                part = block[:, lo:hi]
                w, m = part.shape
                if w == 0 or m == 0:
                    continue
                bad = _first_bad_id(part, v)
                if bad is not None:
                    r, c = bad
                    status[k] = (1, int(offsets[r]) + lo + c, int(part[r, c]))
                    return
                buf = columns(part, buf)
                for i in range(m):
                    np.add.at(dense[lo + i], buf[i], one)
                done[k] += w * m
        except BaseException:  # reported to the parent, which raises
            status[k, 0] = 2

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=work, args=(k,), daemon=True) for k in range(workers)]
    try:
        # Signals wait while the workers are forked: one arriving inside fork's bookkeeping
        # would be swallowed ("Exception ignored") and the parent would wait for ever.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            for p in procs:
                p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        while any(p.is_alive() for p in procs):
            procs[0].join(0.1)
            if progress is not None:
                toks = int(done.sum())
                progress(toks // n, toks // n, toks)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
    failed = [k for k in range(workers) if status[k, 0] == 2 or procs[k].exitcode != 0]
    if failed:
        raise RuntimeError(f"{name}: counting worker {failed[0]} failed")
    bad = [k for k in range(workers) if status[k, 0] == 1]
    if bad:
        k = min(bad, key=lambda j: int(status[j, 1]))
        raise _bad_id_error(name, int(status[k, 2]), int(status[k, 1]), v)
    return dense
