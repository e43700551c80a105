"""Bootstrap replicates (posdiag.uncertainty._replicates) against the scipy oracle
(tests/uncertainty/oracle.py) and dense brute force: same draws, same numbers to rounding."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.counts.core import Counts
from posdiag.encodings import DEFAULT_SET, make_encoding, parse_encoding
from posdiag.geometry.estimator import estimate_hellinger
from posdiag.uncertainty import bootstrap
from posdiag.uncertainty._replicates import PatternTooLarge, ShardPattern, replicate_grams
from posdiag.uncertainty.bootstrap import bootstrap_stress
from tests._data import sample_sharded_counts, zipf_drift_distributions

from .oracle import reference_grams


def _dense_sqrt(c: np.ndarray) -> np.ndarray:
    return np.sqrt(c / c.sum(axis=1, keepdims=True))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 9),
    st.integers(3, 30),
    st.integers(2, 6),
    st.integers(0, 2**31 - 1),
)
def test_pattern_counts_and_product_equal_dense_brute_force(
    n: int, v: int, k: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    # Sparse shards (many zeros, some columns in every row) plus one token everywhere, so every
    # row has support in every subset.
    shards = [rng.integers(0, 3, (n, v)) * (rng.random((n, v)) < 0.4) for _ in range(k)]
    for s in shards:
        s[:, 0] += 1
    pat = ShardPattern([sp.csr_matrix(s) for s in shards], n)
    a = np.zeros(k)
    a[rng.choice(k, size=k // 2, replace=False)] = 1.0  # both halves non-empty
    b = 1.0 - a
    ca, cb = pat.counts(a), pat.counts(b)
    dense_a = sum(w * s for w, s in zip(a, shards, strict=True))
    dense_b = sum(w * s for w, s in zip(b, shards, strict=True))
    np.testing.assert_array_equal(pat.csr(ca).toarray(), dense_a)
    np.testing.assert_array_equal(pat.supports(ca), dense_a.sum(axis=1))
    ra = pat.sqrt_rows(ca, pat.supports(ca))
    rb = pat.sqrt_rows(cb, pat.supports(cb))
    want = _dense_sqrt(dense_a) @ _dense_sqrt(dense_b).T
    np.testing.assert_allclose(pat.product(ra, rb), want, rtol=0, atol=1e-14)


def test_pattern_uses_both_the_dense_block_and_the_rare_pairs() -> None:
    """A column in every row goes to the BLAS block, a column in one row to the pair list."""
    n = 40
    c = np.zeros((n, 3))
    c[:, 0] = 5  # every row: dense
    c[0, 1] = 2  # one row: rare
    c[:, 2] = 1
    pat = ShardPattern([sp.csr_matrix(c), sp.csr_matrix(c)], n)
    assert pat.kd == 2 and pat.pair_cell.size == 1
    r = pat.sqrt_rows(pat.counts(np.ones(2)), pat.supports(pat.counts(np.ones(2))))
    s = _dense_sqrt(2 * c)
    np.testing.assert_allclose(pat.product(r, r), s @ s.T, atol=1e-15)


def _sharded(n: int, sequences: int, shards: int, seed: int) -> Counts:
    mu = zipf_drift_distributions(n, 400, 3, sharpness=2.0, seed=seed)
    total, parts = sample_sharded_counts(mu, sequences, shards=shards, seed=seed + 1)
    counts = Counts(sp.csr_matrix(total), {"source": "synthetic"}, None, tuple(parts))
    return counts


@pytest.mark.parametrize(
    ("estimator", "sequences", "shards"),
    [("crossfit", 400, 20), ("plugin", 400, 8), ("crossfit", 12, 8)],
)
def test_replicates_reproduce_the_oracle_intervals(
    estimator: str, sequences: int, shards: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same draws and numbers as the scipy oracle, including replicates skipped for lost
    support (12 sequences in 8 shards: quarters often miss a position)."""
    n = 12
    sharded = _sharded(n, sequences, shards, seed=3)
    est = estimate_hellinger(sharded.matrix, n, estimator="plugin")
    encs = [make_encoding(nm, n, p, mds=est.mds) for nm, p in map(parse_encoding, DEFAULT_SET)]
    # Held-out mds-r intervals too: their complementary pairs, skipped replicates included.
    kw = {"replicates": 60, "seed": 4, "estimator": estimator, "heldout_splits": 2}
    fast = bootstrap_stress(sharded, n, encs, [0.5] * len(encs), **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(bootstrap, "replicate_grams", reference_grams)
    ref = bootstrap_stress(sharded, n, encs, [0.5] * len(encs), **kw)  # type: ignore[arg-type]
    if sequences == 12:
        assert 2 <= ref.replicates < 60  # some replicates were skipped, on both paths alike
        assert 2 <= ref.heldout_pairs < 30
    assert fast.replicates == ref.replicates
    assert fast.heldout_pairs == ref.heldout_pairs
    assert ref.heldout_pairs == 0 if estimator == "plugin" else ref.heldout_pairs >= 2
    np.testing.assert_allclose(fast.encodings, ref.encodings, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fast.stress_by_rank, ref.stress_by_rank, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fast.bias, ref.bias, rtol=0, atol=1e-12)
    # d = sqrt(d^2) turns a rounding difference of 1e-17 in a near-zero d^2 into ~3e-9.
    np.testing.assert_allclose(fast.distance_sd, ref.distance_sd, rtol=0, atol=1e-8)


def test_ranks_below_one_is_an_error() -> None:
    from posdiag.errors import PosdiagError

    sharded = _sharded(6, 200, 8, seed=0)
    with pytest.raises(PosdiagError, match=r"^'ranks' must be an int in \[1, inf\]; got 0$"):
        bootstrap_stress(sharded, 6, [], [], ranks=0)


@pytest.mark.parametrize("heldout_splits", [0, 2])
def test_partial_eigensolver_replicates_match_full_eigh(
    monkeypatch: pytest.MonkeyPatch, heldout_splits: int
) -> None:
    """With ``ranks`` (the default from PARTIAL_FROM positions) the replicates take their top
    eigenpairs by warm-started subspace iteration and ||B||_F^2: the mds-r and rank intervals
    agree with the full eigvalsh ones (the 1e-4 residual bound keeps each rank stress within
    ~1e-7), for the ranks computed; held-out mds-r intervals fit their pairs from the same
    eigenpairs."""
    from posdiag.geometry.core import gram_from_distances, hellinger_distances, mds_from_gram

    n = 24
    sharded = _sharded(n, 600, 20, seed=5)
    full = mds_from_gram(gram_from_distances(hellinger_distances(sharded.matrix[:n])))
    encs = [make_encoding("mds", n, {"rank": 3}, mds=full), make_encoding("alibi", n, {})]
    kw = {
        "replicates": 30,
        "seed": 1,
        "estimator": "crossfit",
        "full_mds": full,
        "heldout_splits": heldout_splits,
    }
    ref = bootstrap_stress(sharded, n, encs, [0.3, 0.6], **kw)  # type: ignore[arg-type]
    calls: list[int] = []
    real = bootstrap.top_eigenpairs

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(1)
        # Warm-started from every full-data eigenvector, beyond the 8 ranks wanted.
        start = kwargs["start"]
        assert isinstance(start, np.ndarray) and start.shape[1] == full.vectors.shape[1] > 8
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bootstrap, "top_eigenpairs", spy)
    fast = bootstrap_stress(sharded, n, encs, [0.3, 0.6], ranks=8, **kw)  # type: ignore[arg-type]
    assert len(calls) == fast.replicates == ref.replicates
    assert fast.heldout_pairs == ref.heldout_pairs == (15 if heldout_splits else 0)
    assert len(fast.stress_by_rank) == 8 and len(ref.stress_by_rank) == n - 1
    np.testing.assert_allclose(fast.encodings, ref.encodings, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fast.stress_by_rank, ref.stress_by_rank[:8], rtol=0, atol=1e-6)


@pytest.mark.parametrize("estimator", ["crossfit", "plugin"])
def test_a_pattern_too_large_gives_way_to_shard_sums(
    monkeypatch: pytest.MonkeyPatch, estimator: str
) -> None:
    """Past ``max_bytes`` the replicates sum shards on their union pattern and multiply with a
    float32 dense block: the oracle's replicates to ~1e-6, the same ones kept."""
    from posdiag.geometry import crossfit

    n = 10
    sharded = _sharded(n, 300, 8, seed=2)
    weights = bootstrap.paired_halves(8, 20, np.random.default_rng(0))
    args = (sharded.shards, n, weights, estimator, 2)
    ref = list(reference_grams(*args, np.random.default_rng(1)))
    dtypes: list[object] = []
    real = crossfit.cross_product  # the replicates' products go through crossfit_bc

    def spy(a: object, b: object, **kw: object) -> np.ndarray:
        dtypes.append(kw.get("dtype"))
        return real(a, b, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(crossfit, "cross_product", spy)
    got = list(replicate_grams(*args, np.random.default_rng(1), max_bytes=64))
    assert set(dtypes) == ({np.float32} if estimator == "crossfit" else set())
    assert [j for j, _, _ in got] == [j for j, _, _ in ref] and len(ref) >= 2
    for (_, b, d), (_, b_ref, d_ref) in zip(got, ref, strict=True):
        np.testing.assert_allclose(b, b_ref, rtol=0, atol=1e-6)
        np.testing.assert_allclose(d, d_ref, rtol=0, atol=1e-5)


def test_pattern_refuses_a_table_the_total_already_shows_too_large() -> None:
    """The total's stored cells bound the union's from below: a table that would exceed
    ``max_bytes`` is refused from them, and a small one is still built."""
    n = 10
    sharded = _sharded(n, 300, 8, seed=2)
    nnz = int(sharded.matrix[:n].nnz)
    want = r"^the replicate pattern needs 0 MB \(max 0 MB\)$"
    with pytest.raises(PatternTooLarge, match=want):
        ShardPattern(sharded.shards, n, nnz, max_bytes=8 * len(sharded.shards) * nnz - 1)
    pattern = ShardPattern(
        sharded.shards, n, nnz, max_bytes=8 * len(sharded.shards) * nnz + 24 * nnz**2
    )
    assert pattern.table.shape == (len(sharded.shards), nnz)
