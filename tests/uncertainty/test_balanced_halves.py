"""Balanced half-samples (posdiag.uncertainty._hadamard,
posdiag.uncertainty.bootstrap.balanced_halves): Hadamard
matrices, the pair layout, and the property they are for: over all ``k - 1`` rows, the spread of
a linear statistic equals its spread over every one of the ``C(k, k/2)`` half-samples."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import Counts, count_texts
from posdiag.encodings import make_encoding
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from posdiag.synthetic import SynthSpec, synth_texts
from posdiag.uncertainty import bootstrap as uncertainty
from posdiag.uncertainty._hadamard import hadamard
from posdiag.uncertainty.bootstrap import (
    balanced_halves,
    bootstrap_stress,
    paired_halves,
    replicate_halves,
)

BUILT = [1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 44, 48, 60, 64, 68, 72, 80, 84, 88, 96]


@pytest.mark.parametrize("order", BUILT)
def test_hadamard_rows_are_orthogonal_and_the_first_is_ones(order: int) -> None:
    h = hadamard(order)
    assert h is not None and h.shape == (order, order) and h.dtype == np.int8
    assert set(np.unique(h)) <= {-1, 1}
    hh = h.astype(np.int64) @ h.T.astype(np.int64)
    np.testing.assert_array_equal(hh, order * np.eye(order, dtype=np.int64))
    assert (h[0] == 1).all()


def test_hadamard_is_none_where_no_construction_is_built() -> None:
    built = [k for k in range(0, 101) if hadamard(k) is not None]
    assert built == BUILT
    # Multiples of 4 left to random halves (their Hadamard matrices exist, but need Paley's
    # second construction or others not built here).
    assert [k for k in range(4, 101, 4) if k not in built] == [28, 36, 52, 56, 76, 92, 100]


def test_hadamard_returns_a_copy() -> None:
    h = hadamard(20)
    assert h is not None
    h[:] = 0
    again = hadamard(20)
    assert again is not None and (again[0] == 1).all()


@pytest.mark.parametrize(("k", "replicates"), [(4, 6), (8, 14), (8, 5), (20, 30), (20, 38)])
def test_balanced_rows_are_halves_in_complementary_pairs(k: int, replicates: int) -> None:
    w = balanced_halves(k, replicates, np.random.default_rng(3))
    assert w is not None and w.shape == (replicates, k)
    assert set(np.unique(w)) == {0.0, 1.0}
    np.testing.assert_array_equal(w.sum(axis=1), np.full(replicates, k // 2))
    for j in range(1, replicates, 2):
        np.testing.assert_array_equal(w[j], 1.0 - w[j - 1])
    # Distinct rows of the matrix: no half-sample repeats
    firsts = {tuple(row) for row in w[::2]}
    assert len(firsts) == (replicates + 1) // 2
    if replicates == 2 * (k - 1):
        # Every row: two shards share a half in k/2 - 1 rows and are apart in k/2.
        z = 2.0 * w[::2] - 1.0
        np.testing.assert_array_equal(z.T @ z, k * np.eye(k) - np.ones((k, k)))


def test_balanced_is_none_without_a_matrix_or_beyond_its_rows() -> None:
    rng = np.random.default_rng(0)
    assert balanced_halves(6, 4, rng) is None  # no Hadamard matrix of order 6
    assert balanced_halves(28, 4, rng) is None  # one exists, none is built here
    assert balanced_halves(20, 39, rng) is None  # only 19 rows: 38 halves
    assert balanced_halves(20, 38, rng) is not None


def test_replicate_halves_names_the_design_and_is_seeded() -> None:
    w, design = replicate_halves(20, 30, np.random.default_rng(5))
    assert design == "balanced"
    again, _ = replicate_halves(20, 30, np.random.default_rng(5))
    np.testing.assert_array_equal(w, again)
    other, _ = replicate_halves(20, 30, np.random.default_rng(6))
    assert not np.array_equal(w, other)
    w, design = replicate_halves(20, 200, np.random.default_rng(5))
    assert design == "random"
    np.testing.assert_array_equal(w, paired_halves(20, 200, np.random.default_rng(5)))
    assert replicate_halves(6, 10, np.random.default_rng(0))[1] == "random"


def _enumerated_spread(x: np.ndarray) -> float:
    """Mean squared deviation of the half-sample mean from the full mean, over every half."""
    k = x.size
    devs = [x[list(c)].mean() - x.mean() for c in itertools.combinations(range(k), k // 2)]
    return float(np.mean(np.square(devs)))


@settings(max_examples=40, deadline=None)
@given(
    k=st.sampled_from([4, 8, 12]),
    seed=st.integers(0, 2**32 - 1),
    x=st.lists(st.floats(-1e3, 1e3), min_size=12, max_size=12),
)
def test_all_rows_reproduce_the_spread_of_every_half_sample(
    k: int, seed: int, x: list[float]
) -> None:
    """A statistic linear in the shards (here the mean of one value per shard): the full
    design's spread equals the enumeration's exactly, for any values and any seed."""
    xs = np.asarray(x[:k])
    w = balanced_halves(k, 2 * (k - 1), np.random.default_rng(seed))
    assert w is not None
    devs = w @ xs / (k // 2) - xs.mean()
    assert float(np.mean(devs**2)) == pytest.approx(_enumerated_spread(xs), rel=1e-9, abs=1e-9)
    # Complementary rows deviate by opposite amounts: their mean is the full mean.
    assert float(np.mean(devs)) == pytest.approx(0.0, abs=1e-9 * (1 + np.abs(xs).max()))


def test_random_halves_do_not_reproduce_it() -> None:
    """The same check fails for random pairs: what the balanced design removes."""
    xs = np.random.default_rng(1).standard_normal(8)
    w = paired_halves(8, 14, np.random.default_rng(2))
    devs = w @ xs / 4 - xs.mean()
    assert float(np.mean(devs**2)) != pytest.approx(_enumerated_spread(xs), rel=0.01)


def _sharded(shards: int, positions: int = 12) -> Counts:
    texts = synth_texts(SynthSpec(positions=positions, vocab=40, sequences=400, seed=0))
    return count_texts(texts, load_tokenizer(), shards=shards, shard_seed=0, max_len=positions)


def test_bootstrap_uses_the_balanced_design_where_it_can() -> None:
    sc = _sharded(8)
    n = sc.matrix.shape[0]
    encs = [make_encoding("sinusoidal", n, {"d": 16})]
    iv = bootstrap_stress(sc, n, encs, [0.5], replicates=14, seed=1)
    assert (iv.design, iv.replicates, iv.method) == ("balanced", 14, "t")
    iv = bootstrap_stress(sc, n, encs, [0.5], replicates=16, seed=1)
    assert iv.design == "random"


def test_report_names_the_balanced_design() -> None:
    sc = _sharded(8, uncertainty.BALANCED_FROM)
    rep = stress_report(sc, ["sinusoidal", "mds-2"], analysis=Analysis(min_count=10))
    assert rep.uncertainty is not None
    assert (rep.uncertainty.replicates, rep.uncertainty.design) == (14, "balanced")
    assert (
        "95% shard bootstrap (8 shards, 14 balanced replicates, t interval from their sd, seed 0"
        in rep.uncertainty.describe()
    )


def test_cli_json_carries_the_design(cli: Callable[..., Result], synth_corpus: Path) -> None:
    base = ["stress", str(synth_corpus), "--min-count", "10", "-e", "sinusoidal", "--shards", "8"]
    res = cli([*base, "--replicates", "10", "--json"])
    assert res.exit_code == 0, res.output
    unc = json.loads(res.stdout)["uncertainty"]
    assert (unc["replicates"], unc["design"]) == (10, "balanced")
    res = cli([*base, "--json"])
    unc = json.loads(res.stdout)["uncertainty"]
    assert (unc["replicates"], unc["design"]) == (200, "random")
    res = cli([*base, "--shards", "0", "--json"])
    assert json.loads(res.stdout)["uncertainty"]["design"] == ""
