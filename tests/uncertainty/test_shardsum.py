"""Sums of subsets of shards on their union pattern (posdiag.uncertainty._shardsum) against scipy
sums, and the splits and replicates that use them against the selection products."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.counts.core import Counts
from posdiag.encodings import make_encoding
from posdiag.geometry.estimator import stack_shards, stacked_halves
from posdiag.uncertainty import _shardsum
from posdiag.uncertainty import bootstrap as uncertainty
from posdiag.uncertainty._replicates import replicate_grams
from posdiag.uncertainty._shardsum import ShardStack

from .oracle import reference_grams


def _shards(k: int, n: int, v: int, density: float, seed: int) -> list[sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        dense = rng.poisson(2.0, size=(n, v)) * (rng.random((n, v)) < density)
        out.append(sp.csr_matrix(dense.astype(np.int64)))
    return out


def _scipy_sum(shards: list[sp.csr_matrix], chosen: np.ndarray) -> sp.csr_matrix:
    total = sp.csr_matrix(shards[0].shape, dtype=np.float64)
    for k in chosen:
        total = total + shards[int(k)].astype(np.float64)
    total.sum_duplicates()
    total.eliminate_zeros()
    total.sort_indices()
    return total


def _assert_same_csr(got: sp.csr_matrix, want: sp.csr_matrix) -> None:
    assert got.has_canonical_format
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(2, 6),
    n=st.integers(1, 9),
    v=st.integers(1, 12),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_subset_sums_equal_scipy_sums(
    k: int, n: int, v: int, density: float, seed: int, data: st.DataObject
) -> None:
    shards = _shards(k, n, v, density, seed)
    lists = ShardStack(stack_shards(shards, n), n)
    union = _scipy_sum(shards, np.arange(k))
    np.testing.assert_array_equal(lists.indptr, union.indptr)
    np.testing.assert_array_equal(lists.indices, union.indices)
    chosen = np.array(sorted(data.draw(st.sets(st.integers(0, k - 1), max_size=k))), dtype=np.int64)
    _assert_same_csr(lists.sum(chosen), _scipy_sum(shards, chosen))
    weights = np.zeros(k)
    weights[chosen] = 1.0
    want = np.asarray(_scipy_sum(shards, chosen).sum(axis=1)).ravel()
    np.testing.assert_array_equal(lists.supports(weights), want)


def test_unsorted_duplicate_and_zero_entries_are_summed_like_scipy() -> None:
    """A stack straight from a file need not be canonical: columns out of order, a cell stored
    twice, an explicit zero. The sums come out canonical and equal to scipy's."""
    n, v = 3, 5
    s0 = sp.csr_matrix(
        (np.array([2.0, 1.0, 3.0, 0.0, 4.0]), np.array([3, 1, 3, 0, 2]), np.array([0, 3, 4, 5])),
        shape=(n, v),
    )
    s1 = sp.csr_matrix(np.array([[0, 0, 0, 1, 0], [0, 0, 0, 0, 0], [5, 0, 1, 0, 0]]))
    stack = sp.csr_matrix(sp.vstack([s0, s1]), dtype=np.float64)
    assert not stack.has_canonical_format
    lists = ShardStack(stack, n)
    for chosen in ([0], [1], [0, 1]):
        want = sum((s0, s1)[k].toarray() for k in chosen)
        got = lists.sum(np.array(chosen))
        assert got.has_canonical_format and got.nnz == np.count_nonzero(want)
        np.testing.assert_array_equal(got.toarray(), want)
    assert lists.sum(np.array([], dtype=np.int64)).nnz == 0


def test_stacked_halves_on_the_union_pattern_equal_the_selection_products() -> None:
    """Summed by a ShardStack (from COMPILED_FROM positions, or given one), the split's halves
    are the same draws (the generator ends in the same state) and the same counts as the
    selection products."""
    n = 7
    shards = _shards(8, n, 30, 0.3, seed=4)
    stack = stack_shards(shards, n)
    subset = np.array([0, 2, 3, 5, 6, 7])
    rng_old, rng_new = np.random.default_rng(9), np.random.default_rng(9)
    old = stacked_halves(stack, n, subset, 4, rng_old)
    new = stacked_halves(ShardStack(stack, n), n, subset, 4, rng_new)
    assert rng_old.random() == rng_new.random()
    for (a0, b0), (a1, b1) in zip(old, new, strict=True):
        a0.sort_indices()
        b0.sort_indices()
        _assert_same_csr(a1, a0)
        _assert_same_csr(b1, b0)
        # The two halves are the subset's shards, split.
        np.testing.assert_array_equal((a1 + b1).toarray(), _scipy_sum(shards, subset).toarray())


def test_a_half_without_tokens_at_a_position_is_named() -> None:
    from posdiag.errors import PosdiagError

    n = 2
    s0 = sp.csr_matrix(np.array([[1, 0], [0, 2]]))
    s1 = sp.csr_matrix(np.array([[3, 0], [0, 0]]))
    lists = ShardStack(stack_shards([s0, s1], n), n)
    with pytest.raises(PosdiagError, match=r"^cross-fit: position 1 has no tokens in one half"):
        for seed in range(20):
            stacked_halves(lists, n, np.arange(2), 1, np.random.default_rng(seed))


def test_a_stack_that_is_not_whole_shards_is_refused() -> None:
    """The kernels read shard k's row i at stack row k n + i without bounds checks: a stack
    of shards cut shorter than n rows must be refused, not read out of bounds."""
    from posdiag.errors import PosdiagError

    shards = _shards(3, 5, 8, 0.5, seed=2)
    short = stack_shards([shards[0], shards[1][:4], shards[2]], 5)
    with pytest.raises(
        PosdiagError, match=r"^shard sums: a stack of 14 rows is not whole shards of 5 positions$"
    ):
        ShardStack(short, 5)
    with pytest.raises(PosdiagError, match=r"not whole shards of 0 positions$"):
        ShardStack(stack_shards(shards, 5), 0)
    lists = ShardStack(stack_shards(shards, 5), 5)
    for bad in ([3], [-1, 0]):
        with pytest.raises(PosdiagError, match=r"^shard sums: shards must be in \[0, 2\]; got "):
            lists.sum(np.array(bad))


def _long_sharded(n: int) -> Counts:

    shards = _shards(8, n, 40, 0.4, seed=1)
    total = sum(s.astype(np.float64) for s in shards)
    counts = Counts(sp.csr_matrix(total), {"source": "test"}, None, tuple(shards))
    return counts


def test_long_context_replicates_sum_shards_on_the_union_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replicates past the pattern's size form their halves with ShardStack sums and give the
    oracle's intervals (float64 selections and products) to float32 level; without the
    distance spread the intervals are the same numbers."""
    n = 12
    sharded = _long_sharded(n)
    encs = [make_encoding("alibi", n, {}), make_encoding("sinusoidal", n, {})]
    kw = {"replicates": 20, "estimator": "crossfit", "seed": 3}
    monkeypatch.setattr(uncertainty, "replicate_grams", reference_grams)
    ref = uncertainty.bootstrap_stress(sharded, n, encs, [0.5, 0.5], **kw)  # type: ignore[arg-type]
    sums: list[int] = []
    real = _shardsum.ShardStack.sum

    def spy(self: ShardStack, chosen: np.ndarray) -> sp.csr_matrix:
        sums.append(len(chosen))
        return real(self, chosen)

    monkeypatch.setattr(_shardsum.ShardStack, "sum", spy)
    monkeypatch.setattr(uncertainty, "replicate_grams", partial(replicate_grams, max_bytes=64))
    got = uncertainty.bootstrap_stress(sharded, n, encs, [0.5, 0.5], **kw)  # type: ignore[arg-type]
    assert got.replicates == ref.replicates
    # 2 splits of each kept replicate, 2 halves each, 2 shards a half.
    assert len(sums) == 4 * got.replicates and set(sums) == {2}
    np.testing.assert_allclose(got.encodings, ref.encodings, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.stress_by_rank, ref.stress_by_rank, rtol=0, atol=1e-5)
    assert got.distance_sd is not None
    np.testing.assert_allclose(got.distance_sd, ref.distance_sd, rtol=0, atol=1e-5)
    lean = uncertainty.bootstrap_stress(sharded, n, encs, [0.5, 0.5], distances=False, **kw)  # type: ignore[arg-type]
    assert lean.distance_sd is None
    assert lean.encodings == got.encodings and lean.stress_by_rank == got.stress_by_rank
