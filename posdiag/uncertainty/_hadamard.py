"""Hadamard matrices (+-1 entries, ``H H^T = k I``), the rows of balanced half-sample designs
(docs/theory.md, "Balanced half-samples"): Sylvester doubling of Paley's first construction
(``q + 1`` for a prime ``q = 3 mod 4``) or of ``[1]``; other orders (28, 36, 52, 56, 76, 92, 100
among multiples of 4 up to 100) get None.
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
    """A Hadamard matrix (order, order) of int8 whose first row is all ones (a fresh copy), or
    None where none is built."""
    if order < 1:
        return None
    h = _hadamard(int(order))
    return None if h is None else h.copy()
