"""Long contexts (issue 13): the geometry at n = 1k-16k against the scripted peer pipeline.

A structured synthetic pre-tokenized corpus: V = 50,257, at every position ``TOKENS_PER_POSITION``
tokens drawn from a Zipf(1.1) law, 70% from one global ranking and 30% from a ranking that drifts
with the position (rank r at position i is token ``perm[(r + i // 2) mod V]``); about 3,000
distinct tokens per position. Each measurement runs in a fresh subprocess, so its peak RSS
(``ru_maxrss``) is its own.

- posdiag: ``stress_report`` on counts without shards, what ``posdiag stress FILE.npz --shards 0``
  computes: the cross-fitted geometry (S = 10 thinned splits, each one hybrid product), the
  plug-in beside it, the spectrum, the default encodings, the noise floor it prints.
- peer: what a researcher would script on the same counts: dense square-root probabilities
  (n x V float64) -> ``scipy.spatial.distance.pdist`` -> classical MDS (double centring and
  ``numpy.linalg.eigh``, which is what ``sklearn.manifold.ClassicalMDS`` does; scikit-learn is
  not a dependency). Skipped where its dense matrix or its projected time is out of budget.
- cross-fit: one split's product ``R^A (R^B)^T`` on hypergeometric halves, the unit of the
  cross-fitted estimator (S splits cost S times this).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

V = 50_257
TOKENS_PER_POSITION = 9_000
DRIFT = 0.3
SIZES = (1024, 2048, 4096, 8192, 16384)
# The peer's dense n x V float64 matrix: 1.6 GB at n = 4,096; beyond that its pdist is
# projected at > 15 min on this machine (cost n^2 V), so it is skipped and said so.
PEER_MAX_N = 4096


def structured_counts(n: int, seed: int = 0) -> sp.csr_matrix:
    """The synthetic corpus's counts, shape (n, V), int64."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, V + 1, dtype=np.float64)
    cdf = np.cumsum(ranks**-1.1)
    cdf /= cdf[-1]
    glob, loc = rng.permutation(V), rng.permutation(V)
    rows = []
    block = max(1, 4_000_000 // TOKENS_PER_POSITION)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        m = hi - lo
        r = np.minimum(np.searchsorted(cdf, rng.random((m, TOKENS_PER_POSITION))), V - 1)
        drift = rng.random((m, TOKENS_PER_POSITION)) < DRIFT
        pos = np.arange(lo, hi)[:, None]
        ids = np.where(drift, loc[(r + pos // 2) % V], glob[r])
        keys = (np.arange(m)[:, None] * V + ids).ravel()
        uk, cnt = np.unique(keys, return_counts=True)
        rows.append(sp.csr_matrix((cnt, (uk // V, uk % V)), shape=(m, V), dtype=np.int64))
    return sp.csr_matrix(sp.vstack(rows))


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB -> GB


def child_posdiag(path: Path) -> dict[str, object]:
    from posdiag.analysis import stress_report
    from posdiag.counts import Counts
    from posdiag.fastgram import cross_product, sqrt_rows
    from posdiag.uncertainty import ShardedCounts

    m = sp.load_npz(path).tocsr()
    counts = Counts(m, {"source": str(path)})
    t0 = time.perf_counter()
    report = stress_report(ShardedCounts(counts), min_count=1)
    t_stress = time.perf_counter() - t0
    rss = _peak_gb()
    # One cross-fit split: hypergeometric halves of every position's counts.
    rng = np.random.default_rng(0)
    a = m.copy()
    a.data = rng.binomial(m.data, 0.5)
    t0 = time.perf_counter()
    cross_product(sqrt_rows(a), sqrt_rows(m - a))
    t_split = time.perf_counter() - t0
    lam = report.spectrum.eigenvalues
    geo = report.geometry
    # The peer computes the plug-in geometry: compare it with posdiag's plug-in, computed beside
    # the cross-fitted headline.
    plain = geo.plain if geo is not None and geo.plain is not None else None
    plug = list(plain.mds.eigenvalues[:10]) if plain is not None else list(lam[:10])
    return {
        "plugin_eigenvalues": [float(x) for x in plug],
        "time": t_stress,
        "rss": rss,
        "split": t_split,
        "eigenvalues": list(lam[:10]),
        "k": len(lam),
        "ranks": {str(k): v for k, v in report.spectrum.effective_rank.items()},
        "rss_split": _peak_gb(),
    }


def child_peer(path: Path) -> dict[str, object]:
    from scipy.spatial.distance import pdist, squareform

    m = sp.load_npz(path).tocsr()
    t0 = time.perf_counter()
    dense = m.toarray().astype(np.float64)
    s = np.sqrt(dense / dense.sum(axis=1, keepdims=True))
    del dense
    d = squareform(pdist(s) / np.sqrt(2.0))  # Hellinger = Euclidean of sqrt-probabilities / sqrt 2
    del s
    d2 = d * d
    b = -0.5 * (d2 - d2.mean(0) - d2.mean(1)[:, None] + d2.mean())
    lam = np.sort(np.linalg.eigvalsh(b))[::-1]
    return {"time": time.perf_counter() - t0, "rss": _peak_gb(), "eigenvalues": list(lam[:10])}


def _run_child(kind: str, path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.longctx", kind, str(path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def bench_longctx(tmp: Path, sizes: tuple[int, ...] = SIZES, peer_max: int = PEER_MAX_N) -> None:
    print(
        "\n4. Long contexts: `stress --shards 0` vs the scripted peer (dense sqrt -> pdist -> MDS)"
    )
    print(f"   V = {V:,}, {TOKENS_PER_POSITION:,} Zipf tokens per position, {DRIFT:.0%} drifting")
    print(f"   load: {os.getloadavg()[0]:.1f} (1-min average) on {os.cpu_count()} cores")
    rows = []
    for n in sizes:
        path = tmp / f"long-{n}.npz"
        m = structured_counts(n)
        sp.save_npz(path, m, compressed=False)
        distinct = float(np.diff(m.indptr).mean())
        del m
        ours = _run_child("posdiag", path)
        peer = _run_child("peer", path) if n <= peer_max else {}
        rows.append((n, distinct, ours, peer))
        _print_row(n, distinct, ours, peer)
        path.unlink()
    done = [(n, r) for n, _, r, _ in rows if "time" in r]
    if len(done) >= 2:
        x = np.log([n for n, _ in done])
        for key, label in (("time", "time"), ("rss", "peak RSS")):
            y = np.log([float(r[key]) for _, r in done])  # type: ignore[arg-type]
            slope = np.polyfit(x, y, 1)[0]
            print(f"   fitted growth exponent of {label}: n^{slope:.2f}")
        x = np.log([n for n, _ in done])
        y = np.log([float(r["split"]) for _, r in done])  # type: ignore[arg-type]
        print(f"   fitted growth exponent of one cross-fit split: n^{np.polyfit(x, y, 1)[0]:.2f}")
    print(f"   load at the end: {os.getloadavg()[0]:.1f}")


def _print_row(n: int, distinct: float, ours: dict[str, object], peer: dict[str, object]) -> None:
    if "error" in ours:
        print(f"   n = {n:>6,}: posdiag failed: {ours['error']}")
        return
    t, rss, split = float(ours["time"]), float(ours["rss"]), float(ours["split"])  # type: ignore[arg-type]
    line = (
        f"   n = {n:>6,} ({distinct:,.0f} tokens/pos): posdiag {t:7.1f} s, {rss:5.2f} GB; "
        f"one cross-fit split {split:6.1f} s"
    )
    if "time" in peer:
        tp = float(peer["time"])  # type: ignore[arg-type]
        lam_a = np.array(ours["plugin_eigenvalues"])
        lam_b = np.array(peer["eigenvalues"])
        agree = float(np.abs(lam_a - lam_b[: lam_a.size]).max())
        line += (
            f"; peer {tp:7.1f} s, {float(peer['rss']):5.2f} GB"  # type: ignore[arg-type]
            f"; ratio {tp / t:5.2f}x; top-10 plug-in eigenvalues agree to {agree:.1e}"
        )
    elif "error" in peer:
        line += f"; peer failed: {peer['error']}"
    else:
        line += "; peer skipped (dense n x V and pdist n^2 V out of budget)"
    print(line)
    print(f"      effective ranks {ours['ranks']}; eigenpairs computed: {ours['k']}")


if __name__ == "__main__":
    kind, arg = sys.argv[1], Path(sys.argv[2])
    result = child_posdiag(arg) if kind == "posdiag" else child_peer(arg)
    print(json.dumps(result))
