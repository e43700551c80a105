"""Bootstrap intervals (issue 13): the replicate loop now against the previous one, same process.

1. Bundled corpus (``make run``'s input: n_eff = 76, 20 shards, 200 cross-fitted replicates with
   2 splits each): ``bootstrap_stress`` against the same with the replicates of the oracle in
   tests/uncertainty/oracle.py (the loop as it was: scipy selections and products per split);
   CPU and wall time, and ``make run`` itself (target < 3 s).
2. Long contexts: the synthetic corpus of benchmarks/longctx.py (V = 50,257, ~3,000 distinct
   tokens per position) split into 20 shards (each position's counts multinomially), n = 1k,
   2k, 4k. An exact replicate costs seconds at these sizes, so a few replicates of each loop
   are timed and the cost is projected, the previous loop's to 200 replicates, the new one's to
   the default count for the length (``default_replicates``: 200; 38 balanced from 1,024 positions)
   (replicates cost the same up to noise: same sizes, same work; the new loop's one-off set-up
   is timed apart and counted once); target: the whole ``stress`` with default intervals
   <= 60 s, projected from what the report spends before its first replicate (measured: the
   headline's split products, the held-out ``mds-r`` fits) plus the default count of replicates.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from unittest import mock

import numpy as np
import scipy.sparse as sp

from posdiag.counts.core import Counts
from posdiag.encodings import DEFAULT_SET, make_encoding, parse_encoding
from posdiag.geometry.core import MDS
from posdiag.geometry.estimator import gram_from_bc, plugin_bc
from posdiag.geometry.spectral import top_eigenpairs
from posdiag.reports.options import Analysis
from posdiag.uncertainty import bootstrap
from posdiag.uncertainty.bootstrap import (
    bootstrap_stress,
    corpus_counts_sharded,
    default_replicates,
)
from tests.uncertainty.oracle import reference_grams

from .longctx import structured_counts

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fixtures" / "corpus_en.txt"
SHARDS = 20
REPLICATES = 200
LONG_SIZES = (1024, 2048, 4096)
TARGET_LONG_S = 60.0
TARGET_RUN_S = 3.0


def _engine(name: str) -> AbstractContextManager[object]:
    """``"scipy"``: the oracle's replicates inside the block; else the production ones."""
    if name == "scipy":
        return mock.patch.object(bootstrap, "replicate_grams", reference_grams)
    return nullcontext()


def _timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall s, CPU s, result)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def sharded_long(n: int, shards: int = SHARDS, seed: int = 0) -> Counts:
    """The long synthetic corpus on ``n`` positions, its counts split into ``shards`` shards.

    Each count goes to the shards multinomially (a chain of binomial draws over all stored
    cells at once): what counting random sequences into shards gives when positions are
    independent, as they are in this corpus.
    """
    m = sp.csr_matrix(structured_counts(n, seed=seed))
    rng = np.random.default_rng(seed + 1)
    left = m.data.astype(np.int64)
    parts = []
    for j in range(shards):
        x = left if j == shards - 1 else rng.binomial(left, 1.0 / (shards - j))
        left = left - x
        part = sp.csr_matrix((x, m.indices.copy(), m.indptr.copy()), shape=m.shape)
        part.eliminate_zeros()
        parts.append(part)
    counts = Counts(m, {"source": f"synthetic long corpus, n = {n}"}, None, tuple(parts))
    return counts


def _plugin_geometry(sharded: Counts, n: int, k: int = 16) -> MDS:
    """The plug-in Gram and its top ``k`` eigenpairs: the replicates' centre and warm start
    (the estimates only centre the intervals; the cost measured is the replicates')."""
    b = gram_from_bc(plugin_bc(sharded.matrix[:n]))
    lam, u, _, _ = top_eigenpairs(b, k)
    return MDS(eigenvalues=lam, vectors=u, gram=b, total=float(np.vdot(b, b)))


def _encodings(n: int, mds: MDS) -> list:
    return [make_encoding(nm, n, p, mds=mds) for nm, p in map(parse_encoding, DEFAULT_SET)]


def _row(label: str, value: str, ratio: float | None = None, target: str = "") -> None:
    r = "" if ratio is None else f"{ratio:6.2f}x"
    print(f"  {label:<50} {value:>26} {r:>8}  {target}")


def bench_bundled() -> None:
    print("\n1. Bundled corpus: 200 cross-fitted replicates (2 splits each), n_eff = 76")
    from posdiag.reports.analysis import corpus_geometry

    sharded = corpus_counts_sharded(str(CORPUS), shards=SHARDS, seed=0)
    geo = corpus_geometry(sharded, 100)
    n = geo.n_eff
    encs = _encodings(n, geo.mds)
    est = [0.5] * len(encs)
    kw = {"replicates": REPLICATES, "estimator": "crossfit", "full_mds": geo.mds}
    runs: dict[str, list[tuple[float, float]]] = {"scipy": [], "auto": []}
    out = {}
    for _ in range(2):  # interleaved, so load on the shared machine hits both alike
        for engine in runs:
            with _engine(engine):
                wall, cpu, out[engine] = _timed(
                    lambda: bootstrap_stress(sharded, n, encs, est, **kw)  # type: ignore[arg-type]
                )
            runs[engine].append((wall, cpu))
    old = min(runs["scipy"], key=lambda t: t[1])
    new = min(runs["auto"], key=lambda t: t[1])
    diff = float(np.max(np.abs(np.array(out["auto"].encodings) - out["scipy"].encodings)))
    _row("oracle loop (tests/uncertainty/oracle.py)", f"{old[1]:.2f} s CPU, {old[0]:.2f} s wall")
    _row(
        "fixed-pattern replicates (default)",
        f"{new[1]:.2f} s CPU, {new[0]:.2f} s wall",
        old[1] / new[1],
        f"(CPU ratio; intervals agree to {diff:.0e})",
    )
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "posdiag", "stress", str(CORPUS)],
            check=True,
            capture_output=True,
        )
        walls.append(time.perf_counter() - t0)
    _row(
        "make run (posdiag stress fixtures/corpus_en.txt)",
        f"{min(walls):.2f} s wall",
        None,
        f"target < {TARGET_RUN_S:.0f} s (best of 3; load {os.getloadavg()[0]:.1f})",
    )


def _loop(sharded: Counts, n: int, mds: MDS, engine: str, replicates: int) -> float:
    """Wall seconds of ``replicates`` cross-fitted replicates of the default encodings."""
    encs = _encodings(n, mds)
    t0 = time.perf_counter()
    with _engine(engine):
        bootstrap_stress(
            sharded,
            n,
            encs,
            [0.5] * len(encs),
            replicates=replicates,
            estimator="crossfit",
            full_mds=mds,
            # As the reports call it: the loop as it was kept the spread of every distance.
            distances=engine == "scipy",
        )
    return time.perf_counter() - t0


def _before_replicates(sharded: Counts) -> float:
    """Wall seconds of the whole report (``stress_report(..., details=False)``, what ``posdiag
    stress`` without ``--verbose`` computes) up to its first replicate: the headline's split
    products, the held-out ``mds-r`` fits and the bootstrap's set-up. Two replicates are drawn
    (the fewest allowed) and not timed."""
    from posdiag.reports.stress import stress_report

    marks: list[float] = []
    t0 = time.perf_counter()
    stress_report(
        sharded,
        analysis=Analysis(min_count=1, replicates=2),
        details=False,
        progress=lambda done, total: marks.append(time.perf_counter() - t0),
    )
    return marks[0] if marks else time.perf_counter() - t0


def bench_long(sizes: tuple[int, ...], probes: int) -> None:
    print(
        f"\n2. Long contexts: one exact replicate (2 quarter-split products + spectrum), "
        f"{probes} timed per loop, projected to {REPLICATES} (previous) and to the default "
        "count (now)"
    )
    print(f"   load: {os.getloadavg()[0]:.1f} (1-min average) on {os.cpu_count()} cores")
    for n in sizes:
        t0 = time.perf_counter()
        sharded = sharded_long(n)
        mds = _plugin_geometry(sharded, n)
        setup = time.perf_counter() - t0
        old = _loop(sharded, n, mds, "scipy", probes) / probes
        # The loop's one-off set-up (the shards' union pattern, ~1 s at n = 4,096) apart from
        # the per-replicate cost: 2 replicates (the fewest allowed), then probes + 2.
        two = _loop(sharded, n, mds, "auto", 2)
        new = (_loop(sharded, n, mds, "auto", probes + 2) - two) / probes
        fixed = max(two - 2 * new, 0.0)
        # What a report draws by default at this length (50 from 1,024 positions, t interval)
        # against the 200 percentile replicates the previous default drew.
        count = default_replicates(n)
        total = fixed + count * new
        print(f"   n = {n:,} (corpus + plug-in geometry {setup:.0f} s):")
        _row("previous loop, per replicate", f"{old:.1f} s wall")
        _row(
            "now (union-pattern sums, fastgram products, top-10)",
            f"{new:.1f} s wall + {fixed:.1f} s once",
            old / new,
        )
        _row(
            f"projected {REPLICATES} / {count} (default) replicates: previous / now",
            f"{REPLICATES * old / 60:.0f} / {total / 60:.1f} min",
            REPLICATES * old / total,
        )
        # The target is the whole stress at n = 4,096: what comes before the first
        # replicate, measured, plus the default count of replicates at the cost measured above.
        before = _before_replicates(sharded)
        whole = before + count * new
        _row(
            f"whole stress: {before:.0f} s before the replicates + {count} x {new:.1f} s",
            f"{whole:.0f} s (projected)",
            None,
            ""
            if n != 4096
            else f"target <= {TARGET_LONG_S:.0f} s: "
            + ("met" if whole <= TARGET_LONG_S else "not met"),
        )
    print(f"   load at the end: {os.getloadavg()[0]:.1f}")


def bench_intervals(sizes: tuple[int, ...] = LONG_SIZES, probes: int = 2) -> None:
    bench_bundled()
    if sizes:
        bench_long(sizes, probes)


if __name__ == "__main__":
    bench_intervals()
