"""The bootstrap replicates as first written: scipy selections and float64 Gram products per
split. The oracle of posdiag.uncertainty._replicates (same draws: equal to ~1e-14 on the
shards' pattern, to ~1e-6 where the production path's dense block is float32)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from posdiag.errors import PosdiagError
from posdiag.geometry.core import gram_from_distances, hellinger_distances
from posdiag.geometry.estimator import (
    crossfit_bc,
    gram_from_bc,
    implied_distances,
    stack_shards,
    stacked_halves,
)
from posdiag.uncertainty._replicates import ReplicateGrams


def reference_grams(
    shards: Sequence[sp.csr_matrix], n: int, weights: np.ndarray, *args: Any, **kw: Any
) -> ReplicateGrams:
    """``(j, B, D)`` of each replicate: the arguments and results of
    posdiag.uncertainty._replicates.replicate_grams (``estimator, splits, split_rng, progress,
    distances``; the size bounds do not apply)."""
    estimator, splits, split_rng = args[:3]
    distances = kw.get("distances", args[4] if len(args) > 4 else True)
    k = len(shards)
    stack = stack_shards(shards, n)
    rows = np.tile(np.arange(n), k)
    cols = np.arange(k * n)
    for j, w in enumerate(weights):
        select = sp.csr_matrix((np.repeat(w, n).astype(np.float64), (rows, cols)), shape=(n, k * n))
        c = select @ stack
        if np.any(np.asarray(c.sum(axis=1)).ravel() <= 0):
            continue
        if estimator != "crossfit":
            d = hellinger_distances(c)
            yield j, gram_from_distances(d), d
            continue
        try:
            halves = stacked_halves(stack, n, np.flatnonzero(w), splits, split_rng)
        except PosdiagError:
            continue
        bc = crossfit_bc(halves, dtype=np.float64)
        yield j, gram_from_bc(bc), implied_distances(bc) if distances else None
