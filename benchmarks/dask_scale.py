"""Counting on Dask (issue 14): what a cluster costs against one machine, and tokens/s per worker.

On a 2-core machine a cluster cannot show scale-out; this shows that it costs little
(``--engine dask --workers 2`` against the single-machine path in the same run, target >= 0.9x)
and how throughput divides among 1, 2 and 4 single-threaded workers. Both corpora are generated
in a temporary folder: a >= 200 M-token ``.bin`` (>= 8 pieces) and a >= 50 MB text corpus in
16 files (16 pieces).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from posdiag.corpus.sources import open_source
from posdiag.counts._cluster import local_cluster
from posdiag.counts.corpus import corpus_counts
from posdiag.counts.distributed import plan_pieces

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fixtures" / "corpus_en.txt"


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _cluster(workers: int) -> Any:
    """The LocalCluster that ``--engine dask --workers N`` starts (quiet on shutdown)."""
    return local_cluster(workers)


def _row(
    label: str, seconds: float, tokens: int, ratio: float | None = None, note: str = ""
) -> None:
    r = "" if ratio is None else f"{ratio:6.2f}x"
    print(f"  {label:<50} {seconds:7.2f} s {tokens / seconds / 1e6:9.1f} M tok/s {r:>8}  {note}")


def _same(a: Any, b: Any) -> None:
    if (a.matrix != b.matrix).nnz or dict(a.meta) != dict(b.meta):
        raise SystemExit("dask and single-process counts differ")


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for children (count_ids' forks)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _cluster_cpu(client: Any) -> float:
    """CPU seconds of every worker process and of this process (which runs the scheduler of a
    LocalCluster too)."""
    return sum(client.run(_cpu).values()) + _cpu()


def _cpu_timed(fn: Callable[[], Any], client: Any = None) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds, result): CPU time does not move with the machine's load."""
    c0 = _cpu() if client is None else _cluster_cpu(client)
    t, out = _timed(fn)
    c1 = _cpu() if client is None else _cluster_cpu(client)
    return t, c1 - c0, out


def _warm(cluster: Any) -> None:
    """Import posdiag on every worker first: a running cluster has paid that once."""
    from distributed import Client

    with Client(cluster) as client:
        client.run(__import__, "posdiag.counts.distributed")


def _compare(label: str, corpus: str, read: dict[str, Any], unit: str, repeat: int) -> None:
    """Best of ``repeat`` runs each, interleaved (the machine is shared: load moves)."""
    from distributed import Client

    t_one = t_warm = c_one = c_warm = float("inf")
    with _cluster(2) as cluster, Client(cluster) as client:
        _warm(cluster)
        on = {"engine": "dask", "scheduler": cluster.scheduler_address}
        for _ in range(repeat):
            t, c, one = _cpu_timed(lambda: corpus_counts(corpus, **read))
            t_one, c_one = min(t_one, t), min(c_one, c)
            t, c, d = _cpu_timed(lambda: corpus_counts(corpus, **on, **read), client)
            t_warm, c_warm = min(t_warm, t), min(c_warm, c)
            _same(one, d)
    toks = int(one.meta["tokens"])
    _row(f"{label}: single machine ({unit})", t_one, toks)
    _row(f"{label}: --engine dask, 2 workers running", t_warm, toks, t_one / t_warm,
         "target >= 0.9x")  # fmt: skip
    t_e2e, d = _timed(lambda: corpus_counts(corpus, engine="dask", workers=2, **read))
    _same(one, d)
    _row(f"{label}: --engine dask --workers 2, end to end", t_e2e, toks, t_one / t_e2e,
         "incl. LocalCluster start")  # fmt: skip
    print(f"  {label}: CPU seconds, single {c_one:.2f} vs dask {c_warm:.2f} (workers, scheduler, "
          f"client): {toks / c_one / 1e6:.1f} vs {toks / c_warm / 1e6:.1f} M tok per CPU-s, "
          f"{c_one / c_warm:.2f}x")  # fmt: skip


def _per_worker(label: str, corpus: str, read: dict[str, Any], repeat: int) -> None:
    for workers in (1, 2, 4):
        t = float("inf")
        with _cluster(workers) as cluster:
            _warm(cluster)
            on = {"engine": "dask", "scheduler": cluster.scheduler_address}
            for _ in range(repeat):
                dt, c = _timed(lambda on=on: corpus_counts(corpus, **on, **read))
                t = min(t, dt)
        toks = int(c.meta["tokens"])
        _row(f"{label}: {workers} worker{'s' if workers > 1 else ''}", t, toks, None,
             f"{toks / t / workers / 1e6:.1f} M tok/s per worker")  # fmt: skip


def bench_dask(
    tmp: Path, tokens: int, text_mb: int, repeat: int = 2, parts: tuple[str, ...] = ("bin", "text")
) -> None:
    print(f"\n4. Dask (issue 14); uptime: {os.popen('uptime').read().strip()}")
    if "bin" in parts:
        _bench_bin(tmp, tokens, repeat)
    if "text" in parts:
        _bench_text(tmp, text_mb, repeat)


def _bench_bin(tmp: Path, tokens: int, repeat: int) -> None:
    n, v = 1024, 50_257
    path = tmp / "ids.bin"
    rng = np.random.default_rng(3)
    # Zipf-like ids (as token ids of real text are): written in chunks, not held in memory.
    chunk = 1 << 24
    with open(path, "wb") as fh:
        for start in range(0, tokens, chunk):
            m = min(chunk, tokens - start)
            (rng.zipf(1.2, size=m) % v).astype(np.uint16).tofile(fh)
    pieces = plan_pieces(open_source(str(path)), n, v, 2)
    ranges = len({p.start for p in pieces})
    print(
        f"  .bin: {tokens / 1e6:.0f} M tokens, n = {n}, V = {v:,}: {len(pieces)} pieces "
        f"({ranges} window range(s) x {len(pieces) // ranges} position ranges) on 2 workers"
    )
    read = {"max_len": n, "vocab_size": v}
    _compare("bin", str(path), read, "count_ids, forked workers", repeat)
    _per_worker("bin", str(path), read, repeat)
    path.unlink()


def _bench_text(tmp: Path, text_mb: int, repeat: int) -> None:
    folder = tmp / "texts"
    folder.mkdir()
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    per_file = text_mb * 1_000_000 // 16
    for k in range(16):
        order = np.random.default_rng(k).permutation(len(lines))
        body, size = [], 0
        while size < per_file:
            for i in order:
                body.append(lines[i])
                size += len(lines[i]) + 1
                if size >= per_file:
                    break
        (folder / f"part{k:02d}.txt").write_text("\n".join(body) + "\n", encoding="utf-8")
    mb = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
    print(f"  text: {mb:.0f} MB in 16 files (16 pieces), whitespace tokenizer, n = 512")
    read = {"max_len": 512}
    _compare("text", str(folder), read, "count_source", repeat)
    _per_worker("text", str(folder), read, repeat)
