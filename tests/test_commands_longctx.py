"""Issue 13, item 5: diagnose, check, diff, inspect and report at long contexts.

Each command computes only what it prints, and each long-context path agrees with the
straightforward computation:

- the permutation null of ``I(position; token)`` by one bucketed shuffle: the exact law of the
  permuted table (chi-square against the hypergeometric probabilities), ``KL`` read off the
  shuffled list equal to :func:`positional_information` of the built table, and the dispatch;
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from posdiag import _permnull, uncertainty
from posdiag._permnull import permuted_kl, shuffle_segments, shuffled_null
from posdiag.geometry import positional_information


def _table(tokens: np.ndarray, supports: np.ndarray, n_types: int) -> np.ndarray:
    """The counts table whose row i holds the next supports[i] tokens of ``tokens``."""
    rows = np.repeat(np.arange(supports.size), supports)
    t = np.zeros((supports.size, n_types), dtype=np.int64)
    np.add.at(t, (rows, tokens), 1)
    return t


@pytest.mark.parametrize("buckets", [2, 7, 1 << 16])
def test_shuffle_segments_draws_the_permutation_law(
    monkeypatch: pytest.MonkeyPatch, buckets: int
) -> None:
    # Two rows: row 0 takes 3 of the 7 tokens (types 0,0,0,1,1,2,3). Under a uniform
    # permutation row 0 is a multivariate hypergeometric draw; few buckets make every bucket
    # straddle the boundary (the shuffled path), many make almost none do.
    monkeypatch.setattr(_permnull, "_BUCKETS", buckets)
    pooled = np.array([3, 2, 1, 1])
    supports = np.array([3, 4])
    rng = np.random.default_rng(0)
    seen: dict[tuple[int, ...], int] = {}
    draws = 6000
    for _ in range(draws):
        out = shuffle_segments(pooled, supports, rng)
        assert np.array_equal(np.bincount(out, minlength=4), pooled)  # the margin is kept
        key = tuple(int(x) for x in np.bincount(out[:3], minlength=4))
        seen[key] = seen.get(key, 0) + 1
    outcomes = [
        x
        for x in np.ndindex(*(pooled + 1))
        if sum(x) == 3 and all(a <= b for a, b in zip(x, pooled, strict=True))
    ]
    prob = np.array(
        [math.prod(math.comb(int(c), k) for c, k in zip(pooled, x, strict=True)) for x in outcomes]
    ) / math.comb(7, 3)
    observed = np.array([seen.get(tuple(int(a) for a in x), 0) for x in outcomes])
    assert observed.sum() == draws  # nothing outside the support
    assert stats.chisquare(observed, prob * draws).pvalue > 1e-3


def test_permuted_kl_is_the_information_of_the_built_table() -> None:
    rng = np.random.default_rng(1)
    supports = np.array([40, 0, 25, 60, 1])
    pooled = np.array([50, 30, 20, 15, 10, 1])
    tokens = rng.permutation(np.repeat(np.arange(6), pooled)).astype(np.int32)
    kl = permuted_kl(tokens, supports, pooled)
    table = _table(tokens, supports, 6)
    bits, expected = positional_information(table)
    assert np.allclose(kl, expected, rtol=0, atol=1e-12)
    assert float(np.sum(supports / supports.sum() * kl)) == pytest.approx(bits, abs=1e-12)


def test_information_null_switches_to_the_shuffle_with_the_same_law(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The table of tests/test_uncertainty.py's permutation-null test; the shuffle's mean and
    # spread against explicit permutations of the token list.
    rng = np.random.default_rng(5)
    sizes = [60, 40, 25]
    tokens = np.concatenate([rng.integers(0, 6 + 3 * i, size=s) for i, s in enumerate(sizes)])
    table = _table(tokens, np.array(sizes), 12)
    calls: list[int] = []

    def spy(*args: object, **kw: object) -> tuple[np.ndarray, np.ndarray]:
        calls.append(1)
        return shuffled_null(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(uncertainty, "shuffled_null", spy)
    slow = uncertainty.information_null(table, repeats=400, seed=0)
    assert calls == []  # 3 x 12 cells: the row-by-row draw
    monkeypatch.setattr(uncertainty, "PERMUTED_NULL_FROM", 1)
    fast = uncertainty.information_null(sp.csr_matrix(table), repeats=400, seed=0)
    assert calls == [1]
    explicit = [
        positional_information(_table(rng.permutation(tokens), np.array(sizes), 12))[0]
        for _ in range(400)
    ]
    assert fast.mean == pytest.approx(np.mean(explicit), rel=0.05)
    assert fast.sd == pytest.approx(np.std(explicit, ddof=1), rel=0.2)
    assert fast.mean == pytest.approx(slow.mean, rel=0.05)
    assert fast.per_position.shape == (3,)
    assert np.allclose(fast.per_position, slow.per_position, rtol=0.15)
