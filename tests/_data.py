"""Generators and small helpers the tests share."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def toeplitz(f: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """Symmetric matrix ``M[i, j] = f(|i - j|)``, of shape (n, n): a Toeplitz encoding's whole
    delta, built densely (the scorers take the lag profile instead)."""
    lag = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    return np.asarray(f(np.arange(n, dtype=np.float64)), dtype=np.float64)[lag]
