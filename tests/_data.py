"""Generators and small helpers the tests share."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from posdiag.geometry.estimator import SplitHalf
from posdiag.reports.analysis import CorpusGeometry
from tests.geometry._oracles import split_half_grams


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


def whole_split_half(geo: CorpusGeometry) -> SplitHalf:
    """The whole split-half grams of a cross-fitted geometry (the reference; a report keeps
    only their summary, :func:`posdiag.geometry.estimator.split_half_summary`)."""
    assert geo.estimate is not None and geo.counts is not None
    est, counts = geo.estimate, geo.counts
    return split_half_grams(
        counts.matrix, geo.n_eff, shards=counts.shards, splits=est.splits, seed=est.seed
    )


def gram_sq_distances(gram: np.ndarray) -> np.ndarray:
    """Squared distances ``B_ii + B_jj - 2 B_ij`` a Gram matrix implies, shape (n, n)."""
    diag = np.diag(gram)
    return np.asarray(diag[:, None] + diag[None, :] - 2.0 * gram)


def whole_mask(grams: tuple[tuple[np.ndarray, np.ndarray], ...], gram: np.ndarray) -> np.ndarray:
    """The pairs within sampling error from whole n x n arrays (the definition): the squared
    distance at most the rms of ``(d2_P - d2_Q) / 2`` over the outer splits, shape (n, n)."""
    acc = np.zeros(gram.shape)
    for p, q in grams:
        d = gram_sq_distances(p - q)
        acc += d * d
    acc = np.sqrt(acc / (4.0 * len(grams)))
    mask = gram_sq_distances(gram) <= acc
    np.fill_diagonal(mask, False)
    return mask
