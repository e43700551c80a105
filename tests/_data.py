"""Generators and small helpers the tests share."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp


def toeplitz(f: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """Symmetric matrix ``M[i, j] = f(|i - j|)``, of shape (n, n): a Toeplitz encoding's whole
    delta, built densely (the scorers take the lag profile instead)."""
    lag = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    return np.asarray(f(np.arange(n, dtype=np.float64)), dtype=np.float64)[lag]


def zipf_counts(
    n: int,
    v: int,
    per_row: int,
    seed: int,
    drift: float = 0.3,
    step: int = 1,
    dtype: type = np.float64,
) -> sp.csr_matrix:
    """Counts of shape (n, v) with a shared Zipf(1.1) head and a share ``drift`` of tokens from a
    component that moves ``step`` token ranks per position: a geometry with positional signal,
    long tails of rare tokens and no closed form, for comparing fast paths with dense ones."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, v + 1, dtype=np.float64) ** -1.1
    p /= p.sum()
    glob, loc = rng.permutation(v), rng.permutation(v)
    rows = []
    for i in range(n):
        r = rng.choice(v, size=per_row, p=p)
        ids = np.where(rng.random(per_row) < drift, loc[(r + step * i) % v], glob[r])
        rows.append(np.bincount(ids, minlength=v))
    return sp.csr_matrix(np.array(rows, dtype=dtype))
