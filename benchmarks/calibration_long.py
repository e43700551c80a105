"""Interval calibration on the long corpus's model (issue 13) and on a generated text-view
corpus of documents of unequal length (issue 33): run
``python -m benchmarks.calibration_long --n 128 --samples 40 [--corpus text]`` (minutes; n = 512
with 30 samples took 12-18 min on 2 cores).

Independent samples of one distribution. ``long``: benchmarks/longctx.py's model (V = 50,257,
``TOKENS_PER_POSITION`` tokens per position, Zipf 1.1, ``DRIFT`` of them drifting with
position), each token to one of 20 shards uniformly. ``text``: benchmarks/textview.py's
documents (2,500 of log-normal length, so supports fall with the position), each document to
one of 20 shards, min-count 100. For each sample, ``stress_report`` with
``--replicates`` replicates (38: the balanced t interval the default draws from 128
positions with 20 shards; 50: the random ones drawn before) and
``--splits`` cross-fit splits a replicate; then per encoding the mean interval width against
``3.92`` times the sd of the estimate across samples (1.0 = calibrated) and the coverage of
the samples' mean estimate. Each sample's figures are printed as it ends (``--quiet``: only
the table). benchmarks/NOTES.md ("Seventh pass"; "Ninth pass" for n = 512 with 100 samples;
"Intervals at 128-1,023 positions") has the figures.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from posdiag.counts.core import Counts
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from posdiag.uncertainty.bootstrap import bootstrap_stress

from .estimator import interval_calibration
from .longctx import DRIFT, TOKENS_PER_POSITION, V
from .textview import TextModel

SHARDS = 20


class LongModel:
    """One distribution of the long corpus's model on ``n`` positions; :meth:`sample` draws."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        ranks = np.arange(1, V + 1, dtype=np.float64)
        self.cdf = np.cumsum(ranks**-1.1)
        self.cdf /= self.cdf[-1]
        self.glob, self.loc = rng.permutation(V), rng.permutation(V)
        self.n = n

    def sample(self, seed: int) -> Counts:
        rng = np.random.default_rng(seed)
        n = self.n
        r = np.minimum(np.searchsorted(self.cdf, rng.random((n, TOKENS_PER_POSITION))), V - 1)
        drift = rng.random((n, TOKENS_PER_POSITION)) < DRIFT
        pos = np.broadcast_to(np.arange(n)[:, None], r.shape)
        ids = np.where(drift, self.loc[(r + pos // 2) % V], self.glob[r])
        shard = rng.integers(0, SHARDS, size=r.shape)
        parts = []
        for k in range(SHARDS):
            sel = shard == k
            part = sp.csr_matrix(
                (np.ones(int(sel.sum()), dtype=np.int64), (pos[sel], ids[sel])), shape=(n, V)
            )
            part.sum_duplicates()
            parts.append(part)
        total = sp.csr_matrix(sum(parts[1:], parts[0]))
        counts = Counts(total, {"source": "long corpus model"}, None, tuple(parts))
        return counts


def calibrate(
    n: int, samples: int, replicates: int, splits: int, corpus: str = "long", quiet: bool = False
) -> None:
    # The reports take bootstrap_stress's default splits; the benchmark sets them.
    defaults = bootstrap_stress.__kwdefaults__
    assert defaults is not None
    saved = defaults["replicate_splits"]
    defaults["replicate_splits"] = splits
    try:
        if corpus == "long":
            model = LongModel(n)
            draw, min_count = model.sample, 1
        else:
            text = TextModel()
            draw, min_count = (lambda seed: text.sharded(seed, n)), 100
        est: dict[str, list[float]] = {}
        bounds: dict[str, list[tuple[float, float]]] = {}
        t0 = time.perf_counter()
        for i in range(samples):
            rep = stress_report(
                draw(100 + i),
                analysis=Analysis(min_count=min_count, seed=i, replicates=replicates),
                details=False,
            )
            for e in rep.encodings:
                est.setdefault(e.name, []).append(e.stress)
                bounds.setdefault(e.name, []).append((e.ci_low, e.ci_high))
            if not quiet:
                figures = " ".join(
                    f"{e.name} {e.stress:.5f} [{e.ci_low:.5f}, {e.ci_high:.5f}]"
                    for e in rep.encodings
                )
                print(f"sample {i} {time.perf_counter() - t0:.0f} s: {figures}", flush=True)
    finally:
        defaults["replicate_splits"] = saved
    print(
        f"{corpus} corpus, n = {n}, {samples} samples, {replicates} replicates, {splits} "
        "split(s) a replicate, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    print(f"{'encoding':16} {'mean':>7} {'sd':>8} {'width/(3.92 sd)':>15} {'coverage':>8}")
    for name, values in est.items():
        v = np.array(values)
        sd = float(np.std(v, ddof=1))
        if sd == 0.0:
            continue
        width, cover, _ = interval_calibration(v, bounds[name])
        print(f"{name:16} {v.mean():7.4f} {sd:8.5f} {width:15.2f} {cover:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--replicates", type=int, default=38)
    ap.add_argument("--splits", type=int, default=2, help="cross-fit splits a replicate")
    ap.add_argument("--corpus", choices=("long", "text"), default="long")
    ap.add_argument("--quiet", action="store_true", help="only the table")
    args = ap.parse_args()
    calibrate(args.n, args.samples, args.replicates, args.splits, args.corpus, args.quiet)


if __name__ == "__main__":
    main()
