"""Generators and small helpers the tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import scipy.sparse as sp

from posdiag.geometry.estimator import SplitHalf
from posdiag.reports.analysis import CorpusGeometry
from posdiag.synthetic import _cosines, _softmax_rows
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


def drift_distributions(
    n_positions: int = 32, vocab: int = 200, rank: int = 3, *, sharpness: float = 2.0, seed: int = 0
) -> np.ndarray:
    """Positional distributions drifting smoothly, of shape (n_positions, vocab):
    ``mu_i = softmax(sharpness * sum_{k=1..rank} cos(pi k t_i) g_k)``, ``t_i = i/(n-1)``, with
    seeded Gaussian directions ``g_k`` (low-rank logits; the softmax bends the geometry)."""
    g = np.random.default_rng(seed).standard_normal((rank, vocab))
    return _softmax_rows(sharpness * _cosines(n_positions, rank) @ g)


def sample_texts(mu: np.ndarray, sequences: int, *, seed: int = 0) -> Iterator[str]:
    """Seeded sequences whose word at position ``i`` is ``t{v}`` with ``v`` drawn from ``mu[i]``."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.asarray(mu, dtype=np.float64), axis=1)
    cdf[:, -1] = 1.0
    for _ in range(sequences):
        u = np.asarray(rng.random(cdf.shape[0]))
        ids = (cdf < u[:, None]).sum(axis=1)
        yield " ".join(f"t{v}" for v in ids)


def zipf_drift_distributions(
    n_positions: int = 64,
    vocab: int = 20_000,
    rank: int = 3,
    *,
    sharpness: float = 2.0,
    exponent: float = 1.1,
    seed: int = 0,
) -> np.ndarray:
    """Word-like distributions of shape (n_positions, vocab): ``rank + 1`` Zipf topics (each over
    its own seeded permutation of the vocabulary) mixed with weights
    ``softmax(sharpness * cos(pi k t_i))``, ``k = 1..rank+1``: a long tail with an exact ``B_H``."""
    rng = np.random.default_rng(seed)
    w = _softmax_rows(sharpness * _cosines(n_positions, rank + 1))
    zipf = np.arange(1, vocab + 1, dtype=np.float64) ** -exponent
    zipf /= zipf.sum()
    topics = np.stack([zipf[np.argsort(rng.permutation(vocab))] for _ in range(rank + 1)])
    return np.asarray(w @ topics)


def sample_sharded_counts(
    mu: np.ndarray, sequences: int, *, shards: int = 20, seed: int = 0
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Counts of ``sequences`` seeded sequences drawn from ``mu`` (position ``i`` from ``mu[i]``),
    each in one of ``shards`` uniform shards: the total and each shard's, int64 (n, vocab)."""
    mu = np.asarray(mu, dtype=np.float64)
    rng = np.random.default_rng(seed)
    sizes = rng.multinomial(sequences, np.full(shards, 1.0 / shards))
    parts = tuple(
        np.stack([rng.multinomial(int(m), row) for row in mu]).astype(np.int64) for m in sizes
    )
    return np.sum(parts, axis=0), parts
