"""Deterministic synthetic corpora whose positional geometry is known in advance.

Used by the tests (exact distributions give exact Hellinger distances) and by ``posdiag synth``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ._validate import check_int

__all__ = ["drift_distributions", "sample_texts", "expected_counts"]


def drift_distributions(
    n_positions: int = 32, vocab: int = 200, rank: int = 3, *, sharpness: float = 2.0, seed: int = 0
) -> np.ndarray:
    """Positional token distributions that drift smoothly with low intrinsic rank.

    ``mu_i = softmax(sharpness * sum_{k=1..rank} cos(pi k t_i) g_k)`` with ``t_i = i/(n-1)`` and
    seeded Gaussian directions ``g_k`` over the vocabulary.

    Returns
    -------
    ndarray of shape (n_positions, vocab)
        Rows are probability distributions.
    """
    n = check_int("n_positions", n_positions, 2)
    v = check_int("vocab", vocab, 2)
    r = check_int("rank", rank, 1)
    g = np.random.default_rng(seed).standard_normal((r, v))
    t = np.arange(n) / (n - 1)
    coef = np.cos(np.pi * np.outer(t, np.arange(1, r + 1)))
    logits = sharpness * coef @ g
    logits -= logits.max(axis=1, keepdims=True)
    mu = np.exp(logits)
    return mu / mu.sum(axis=1, keepdims=True)


def expected_counts(mu: np.ndarray, sequences: int) -> np.ndarray:
    """Integer counts ``round(sequences * mu)``, of the same shape as ``mu``."""
    return np.rint(np.asarray(mu) * sequences).astype(np.int64)


def sample_texts(mu: np.ndarray, sequences: int, *, seed: int = 0) -> Iterator[str]:
    """Seeded sequences of length ``n`` whose token at position ``i`` is drawn from ``mu[i]``.

    Token ``v`` is the word ``t{v}``, so the whitespace tokenizer reads it back as one token.
    """
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.asarray(mu, dtype=np.float64), axis=1)
    cdf[:, -1] = 1.0
    for _ in range(check_int("sequences", sequences, 1)):
        u = np.asarray(rng.random(cdf.shape[0]))
        ids = (cdf < u[:, None]).sum(axis=1)
        yield " ".join(f"t{v}" for v in ids)
