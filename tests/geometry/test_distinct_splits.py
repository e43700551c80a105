"""Cross-fit splits are distinct: a split drawn again (or its mirror) is drawn anew, so a
bootstrap replicate's 2 splits never collapse into a 1-split cross-fit (benchmarks/NOTES.md,
"Seventh pass")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.counts.core import Counts
from posdiag.encodings import make_encoding
from posdiag.geometry.estimator import (
    crossfit_bc,
    distinct_splits,
    estimate_hellinger,
    gram_from_bc,
    split_picks,
)
from posdiag.uncertainty import bootstrap
from posdiag.uncertainty.bootstrap import bootstrap_stress
from tests._data import sample_sharded_counts, zipf_drift_distributions
from tests.uncertainty.oracle import reference_grams


def _unordered(k: int, pick: np.ndarray) -> frozenset[frozenset[int]]:
    a = frozenset(int(x) for x in pick)
    return frozenset({a, frozenset(range(k)) - a}) if k % 2 == 0 else frozenset({a})


def _all_splits(k: int) -> set[frozenset[frozenset[int]]]:
    return {_unordered(k, np.array(c)) for c in itertools.combinations(range(k), k // 2)}


@pytest.mark.parametrize("k", range(2, 13))
def test_distinct_splits_counts_every_split_and_its_mirror_once(k: int) -> None:
    assert distinct_splits(k) == len(_all_splits(k))


@settings(max_examples=60, deadline=None)
@given(k=st.integers(2, 10), splits=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_split_picks_are_distinct_sorted_halves(k: int, splits: int, seed: int) -> None:
    picks = list(split_picks(k, splits, np.random.default_rng(seed)))
    assert len(picks) == min(splits, distinct_splits(k))
    for p in picks:
        assert p.size == k // 2 and np.all(np.diff(p) > 0) and p[0] >= 0 and p[-1] < k
    assert len({_unordered(k, p) for p in picks}) == len(picks)
    if splits >= distinct_splits(k):
        assert {_unordered(k, p) for p in picks} == _all_splits(k)


def test_a_first_pick_is_the_draw_it_always_was() -> None:
    """Same stream as the independent draw until a split repeats: without a repeat, the same
    splits (the headline of 20 shards repeats with probability ~5e-4)."""
    rng, old = np.random.default_rng(7), np.random.default_rng(7)
    for pick in split_picks(20, 10, rng):
        np.testing.assert_array_equal(pick, np.sort(old.choice(20, size=10, replace=False)))


def test_two_splits_of_ten_shards_never_coincide() -> None:
    rng = np.random.default_rng(0)
    pairs = [list(split_picks(10, 2, rng)) for _ in range(2000)]
    assert not any(_unordered(10, a) == _unordered(10, b) for a, b in pairs)
    # The independent draw coincided 1 time in 126: ~16 of 2,000 (the bug this prevents).
    old = np.random.default_rng(0)
    draws = [[np.sort(old.choice(10, 5, replace=False)) for _ in range(2)] for _ in range(2000)]
    assert sum(_unordered(10, a) == _unordered(10, b) for a, b in draws) > 5


def _sharded(shards: int) -> Counts:
    mu = zipf_drift_distributions(10, 300, 3, sharpness=2.0, seed=1)
    total, parts = sample_sharded_counts(mu, 600, shards=shards, seed=2)
    counts = Counts(sp.csr_matrix(total), {"source": "synthetic"}, None, tuple(parts))
    return counts


def test_few_shards_average_each_of_their_splits_once() -> None:
    """4 shards have 3 splits: the headline's 10 splits are those 3, each once."""
    sharded = _sharded(4)
    m, n = sharded.matrix, 10
    est = estimate_hellinger(m, n, shards=sharded.shards, estimator="crossfit", splits=10)
    assert est.splits == 3
    halves = []
    for a in ((0, 1), (0, 2), (0, 3)):
        b = tuple(i for i in range(4) if i not in a)
        halves.append(
            tuple(sp.csr_matrix(sum(sharded.shards[i] for i in side))[:n] for side in (a, b))
        )
    want = gram_from_bc(crossfit_bc(halves))
    np.testing.assert_allclose(est.gram, want, rtol=0, atol=1e-6)  # float32 dense block


@pytest.mark.parametrize("oracle", [False, True])
def test_a_replicate_with_one_distinct_split_averages_it_once(
    oracle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 shards: a replicate's 2 shards have one split; 2 splits asked give the 1-split
    replicates exactly (a divisor counting the splits asked would halve their BC), on the
    production replicates and on the oracle's."""
    if oracle:
        monkeypatch.setattr(bootstrap, "replicate_grams", reference_grams)
    sharded = _sharded(4)
    n = 10
    encs = [make_encoding("sinusoidal", n), make_encoding("alibi", n)]
    kw = {"replicates": 30, "seed": 3, "estimator": "crossfit"}
    two = bootstrap_stress(sharded, n, encs, [0.5, 0.5], replicate_splits=2, **kw)  # type: ignore[arg-type]
    one = bootstrap_stress(sharded, n, encs, [0.5, 0.5], replicate_splits=1, **kw)  # type: ignore[arg-type]
    assert two.replicates == one.replicates >= 2
    np.testing.assert_allclose(two.encodings, one.encodings, rtol=0, atol=1e-12)
    np.testing.assert_allclose(two.bias, one.bias, rtol=0, atol=1e-12)
    # Stresses are scale-free; the distances are not.
    assert two.distance_sd is not None and one.distance_sd is not None
    np.testing.assert_allclose(two.distance_sd, one.distance_sd, rtol=0, atol=1e-8)
