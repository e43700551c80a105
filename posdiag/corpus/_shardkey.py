"""Which bootstrap / cross-fit shard a sequence belongs to: a hash of where it sits and the seed.

A sequence is addressed by ``(unit, ordinal)``: ``unit`` numbers the pieces a source splits into
in reading order (its files; a parquet file's row groups; a ``datasets`` stream's shards; a
single stream is unit 0), ``ordinal`` is the sequence's index within its unit (after the view;
a plain stream's ordinal is its global index). The shard is a hash of that address and the seed,
not the next draw of a running generator, so it does not depend on batch sizes, on the order in
which pieces are counted or on which process counts them: a piece counted alone on a Dask worker
puts every sequence in the same shard as the single-process pass over the whole corpus.
"""

from __future__ import annotations

import numpy as np

__all__ = ["shard_of"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (a bijection of uint64 with full avalanche), elementwise."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def shard_of(seed: int, unit: int, ordinals: np.ndarray, k: int) -> np.ndarray:
    """Shard in ``[0, k)`` of the sequences ``ordinals`` of ``unit``, for ``seed``.

    Parameters
    ----------
    seed, unit : int
        Non-negative.
    ordinals : ndarray of shape (m,), integer
        Indices of the sequences within ``unit``.
    k : int
        Number of shards, >= 1.

    Returns
    -------
    ndarray of shape (m,), int64
        Uniform over ``[0, k)`` for distinct addresses, up to a bias below ``k / 2**64``.
    """
    with np.errstate(over="ignore"):
        # Mix seed and unit into one 64-bit key, then hash key + ordinal (SplitMix64's stream:
        # consecutive ordinals are consecutive states, each finalised independently).
        base = _mix(np.array([seed], dtype=np.uint64) * _GOLDEN + np.uint64(1))
        key = _mix(base ^ (np.array([unit], dtype=np.uint64) * _GOLDEN + np.uint64(2)))
        h = _mix(key + np.asarray(ordinals, dtype=np.uint64) * _GOLDEN)
    return (h % np.uint64(k)).astype(np.int64)
