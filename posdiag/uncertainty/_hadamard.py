"""Hadamard matrices, the rows of balanced half-sample designs (posdiag.uncertainty.bootstrap).

A Hadamard matrix of order ``k`` has entries +-1 and ``H H^T = k I``. Scaled so its first row is
all ones, each other row keeps ``k/2`` columns (its +1 entries), and the ``k - 1`` rows are
orthogonal to each other and to the ones: the half-samples they pick reproduce the variance of
all ``C(k, k/2)`` half-samples exactly for any statistic linear in the shards, with no Monte
Carlo noise (balanced repeated replication; docs/theory.md, "Balanced half-samples").

Built here: Sylvester doubling (orders ``2^a``), Paley's first construction (``q + 1`` for a
prime ``q = 3 mod 4``) and their Kronecker products. Among multiples of 4 up to 100 that leaves
out 28, 36, 52, 56, 76, 92 and 100, for which :func:`hadamard` returns None (the caller draws
random half-samples instead).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["hadamard"]


def _is_prime(q: int) -> bool:
    return q >= 2 and all(q % d for d in range(2, int(q**0.5) + 1))


def _paley(q: int) -> np.ndarray:
    """Paley's first construction, order ``q + 1`` for a prime ``q = 3 mod 4``: the border of
    ones and minus ones around ``Q + I``, ``Q`` the Jacobsthal matrix ``chi(j - i)`` of the
    quadratic residues mod ``q`` (antisymmetric because ``-1`` is a non-residue)."""
    residues = np.zeros(q, dtype=np.int8)
    residues[(np.arange(1, q) ** 2) % q] = 1
    chi = np.where(residues == 1, 1, -1).astype(np.int8)
    chi[0] = 0
    idx = (np.arange(q)[None, :] - np.arange(q)[:, None]) % q
    h = np.ones((q + 1, q + 1), dtype=np.int8)
    h[1:, 0] = -1
    h[1:, 1:] = chi[idx] + np.eye(q, dtype=np.int8)
    return h


@lru_cache(maxsize=16)
def _hadamard(order: int) -> np.ndarray | None:
    for a in range(order.bit_length()):
        rest, left = divmod(order, 1 << a)
        if left:
            break
        if rest == 1:
            core = np.ones((1, 1), dtype=np.int8)
        elif rest > 2 and _is_prime(rest - 1) and (rest - 1) % 4 == 3:
            core = _paley(rest - 1)
        else:
            continue
        h = core
        for _ in range(a):
            h = np.block([[h, h], [h, -h]])
        # Columns signed so the first row is all ones (H D stays Hadamard for diagonal D = +-1).
        return (h * h[0]).astype(np.int8)
    return None


def hadamard(order: int) -> np.ndarray | None:
    """A Hadamard matrix of ``order`` whose first row is all ones, or None where none is built.

    Returns
    -------
    ndarray of int8 of shape (order, order), or None
        Entries +-1 with ``H H^T = order I``; a fresh copy (callers may permute it).
    """
    if order < 1:
        return None
    h = _hadamard(int(order))
    return None if h is None else h.copy()
