"""Deterministic synthetic corpora whose positional geometry is known in advance: ``posdiag
synth``'s generators ``drift`` and ``shift`` (docs/theory.md, "Synthetic corpora").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ._util.memory import require
from ._util.validate import check_choice, check_float, check_int

__all__ = [
    "MODES",
    "SynthSpec",
    "low_rank_distributions",
    "shift_distributions",
    "synth_distributions",
    "synth_texts",
]

MODES = ("drift", "shift")


def _cosines(n: int, k: int) -> np.ndarray:
    """``cos(pi k' t_i)`` for ``t_i = i/(n-1)`` and ``k' = 1..k``, of shape (n, k)."""
    t = np.arange(n) / (n - 1)
    return np.cos(np.pi * np.outer(t, np.arange(1, k + 1)))


def _softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Each row's softmax (shifted by its maximum, so no exp overflows)."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def low_rank_distributions(
    n_positions: int = 32, vocab: int = 200, rank: int = 3, *, sharpness: float = 2.0, seed: int = 0
) -> np.ndarray:
    """The ``drift`` generator: smooth drift with ``rank`` dominant MDS directions.

    Block probabilities ``pi_i = softmax(sharpness * cos(pi k t_i))``, ``k = 1..rank+1``,
    ``t_i = i/(n-1)``; the vocabulary is split into ``rank + 1`` seeded blocks, each with a fixed
    seeded log-normal token shape. ``BC(i, j) = sum_k sqrt(pi_ik pi_jk)`` does not depend on the
    shapes or the seed.

    Returns
    -------
    ndarray of shape (n_positions, vocab)
        Rows are probability distributions.
    """
    n = check_int("positions", n_positions, 2)
    r = check_int("rank", rank, 1)
    v = check_int("vocab", vocab, r + 1, lo_label="rank+1")
    sharpness = check_float("sharpness", sharpness, 0.0, lo_open=True)
    rng = np.random.default_rng(seed)
    pi = _softmax_rows(sharpness * _cosines(n, r + 1))
    mu = np.zeros((n, v))
    for k, block in enumerate(np.array_split(rng.permutation(v), r + 1)):
        shape = np.exp(rng.standard_normal(block.size))
        mu[:, block] = pi[:, [k]] * (shape / shape.sum())[None, :]
    return mu


def shift_distributions(
    n_positions: int = 32, vocab: int = 200, *, width: float | None = None, step: int = 1
) -> np.ndarray:
    """The ``shift`` generator: a bump moving at constant speed around a ring of tokens.

    ``mu_i[v] ∝ exp(-ring(v, i*step)^2 / (2 width^2))`` with ``ring`` the circular distance on
    ``0..vocab-1``. Every ``mu_j`` is ``mu_i`` rotated by ``(j-i)*step`` tokens, so ``d_H(i, j)``
    is a function of ``i - j`` only.

    Parameters
    ----------
    width : float, optional
        Bump width in tokens; default ``n_positions / 2``, wide enough that ``d_H`` grows nearly
        linearly over the whole range of lags.
    step : int
        Tokens the bump moves per position.

    Returns
    -------
    ndarray of shape (n_positions, vocab)
    """
    n = check_int("positions", n_positions, 2)
    v = check_int("vocab", vocab, 2)
    step = check_int("step", step, 1)
    width = check_float("width", n / 2 if width is None else width, 0.0, lo_open=True)
    tokens = np.arange(v)
    centres = (np.arange(n) * step) % v
    gap = np.abs(tokens[None, :] - centres[:, None])
    ring = np.minimum(gap, v - gap).astype(np.float64)
    mu = np.exp(-(ring**2) / (2.0 * width**2))
    return mu / mu.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class SynthSpec:
    """Parameters of a synthetic corpus (``posdiag synth``); defaults are the paper's setting."""

    mode: str = "drift"
    positions: int = 32
    vocab: int = 200
    rank: int = 3
    sequences: int = 20_000
    seed: int = 0
    sharpness: float = 2.0
    width: float | None = None


def synth_distributions(spec: SynthSpec) -> np.ndarray:
    """The exact positional distributions of ``spec``, of shape (positions, vocab)."""
    mode = check_choice("mode", spec.mode, MODES)
    p, v = spec.positions, spec.vocab
    if all(isinstance(x, int) and x > 0 for x in (p, v)):  # else the builders say what is wrong
        # The distributions, their cumulative sums and the sampler's work arrays: (p, v) floats.
        require(f"synth: {p:,} positions x {v:,} words", 8 * 4 * p * v)
    if mode == "drift":
        return low_rank_distributions(p, v, spec.rank, sharpness=spec.sharpness, seed=spec.seed)
    return shift_distributions(p, v, width=spec.width)


# Sequences drawn per vectorised chunk by synth_texts.
_CHUNK = 4096


def synth_texts(spec: SynthSpec) -> Iterator[str]:
    """The corpus of ``spec``: ``spec.sequences`` lines of ``spec.positions`` words ``t{v}``,
    each position drawn independently (seeded by ``spec.seed``) in vectorised chunks."""
    mu = synth_distributions(spec)
    total = check_int("sequences", spec.sequences, 1)
    # One chunk of draws: uniforms, ids and the words of each line (about 40 bytes a token).
    require(
        f"synth: chunks of {_CHUNK} lines of {spec.positions:,} words", 40 * _CHUNK * mu.shape[0]
    )
    return _synth_lines(spec, mu, total)


def _synth_lines(spec: SynthSpec, mu: np.ndarray, total: int) -> Iterator[str]:
    rng = np.random.default_rng([spec.seed, 1])
    cdf = np.cumsum(mu, axis=1)
    cdf[:, -1] = 1.0
    words = np.array([f"t{v}" for v in range(mu.shape[1])], dtype=object)
    done = 0
    while done < total:
        m = min(_CHUNK, total - done)
        u = rng.random((m, mu.shape[0]))
        ids = np.empty((m, mu.shape[0]), dtype=np.int64)
        for i in range(mu.shape[0]):
            ids[:, i] = np.searchsorted(cdf[i], u[:, i], side="right")
        ids = np.minimum(ids, mu.shape[1] - 1)
        for row in words[ids]:
            yield " ".join(row)
        done += m
