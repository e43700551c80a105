"""estimator.py paths pinned against independent values (issue 15, mutation testing).

Every expected number is computed here by an explicit loop, a dense numpy formula or a hand
calculation, never by calling the function under test on other data.
"""

from __future__ import annotations

import math

import numpy as np

from posdiag.estimator import gram_from_bc, implied_distances


def _bc_with_uneven_diagonal() -> np.ndarray:
    """A symmetric BC-like matrix whose diagonal is not 1 (as the cross-fit gives)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.2, 0.9, size=(5, 5))
    bc = (x + x.T) / 2.0
    bc[np.diag_indices(5)] = [0.95, 0.8, 0.9, 0.7, 0.85]
    bc[0, 1] = bc[1, 0] = 0.99  # above (0.95 + 0.8)/2: a negative squared distance, clipped
    return bc


def test_gram_from_bc_is_half_the_centred_bc() -> None:
    bc = _bc_with_uneven_diagonal()
    n = bc.shape[0]
    j = np.eye(n) - np.ones((n, n)) / n
    np.testing.assert_allclose(gram_from_bc(bc), 0.5 * j @ bc @ j, rtol=0, atol=1e-15)


def test_implied_distances_by_loop() -> None:
    bc = _bc_with_uneven_diagonal()
    n = bc.shape[0]
    want = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            if i != k:
                want[i, k] = math.sqrt(max(0.0, (bc[i, i] + bc[k, k]) / 2.0 - bc[i, k]))
    got = implied_distances(bc)
    assert got[0, 1] == 0.0 and got[1, 0] == 0.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
