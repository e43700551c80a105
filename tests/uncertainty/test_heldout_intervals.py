"""Intervals of held-out mds-r figures: the replicates come in complementary pairs, and the
spread of a pair's held-out figure (an outer split of the full data) widens them
(posdiag.uncertainty.bootstrap.bootstrap_stress, Notes; docs/theory.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from posdiag.counts.core import Counts
from posdiag.encodings import make_encoding, parse_encoding
from posdiag.errors import PosdiagError
from posdiag.geometry.core import mds_from_gram
from posdiag.geometry.estimator import (
    heldout_pair,
    outer_splits,
)
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from posdiag.synthetic import SynthSpec, synth_texts
from posdiag.uncertainty import bootstrap as uncertainty
from posdiag.uncertainty.bootstrap import bootstrap_stress, paired_halves
from tests._data import sample_sharded_counts, zipf_drift_distributions
from tests.geometry._oracles import heldout_mds_stress, split_half_grams


@settings(max_examples=60, deadline=None)
@given(k=st.integers(2, 25), replicates=st.integers(2, 30), seed=st.integers(0, 2**32 - 1))
def test_replicates_are_complementary_pairs_of_halves(k: int, replicates: int, seed: int) -> None:
    w = paired_halves(k, replicates, np.random.default_rng(seed))
    assert w.shape == (replicates, k)
    assert set(np.unique(w)) <= {0.0, 1.0}
    assert np.all(w.sum(axis=1) == k // 2)
    for j in range(1, replicates, 2):
        assert not np.any(w[j] * w[j - 1])  # disjoint
        if k % 2 == 0:
            np.testing.assert_array_equal(w[j], 1.0 - w[j - 1])
    np.testing.assert_array_equal(w, paired_halves(k, replicates, np.random.default_rng(seed)))


def test_every_replicate_is_a_uniform_half() -> None:
    """The complement of a uniform half is a uniform half (odd k: h of the k - h left out)."""
    k, reps = 5, 6000
    w = paired_halves(k, reps, np.random.default_rng(0))
    for rows in (w[0::2], w[1::2]):
        freq = rows.mean(axis=0)  # each shard kept with probability 2/5
        sd = np.sqrt(0.4 * 0.6 / rows.shape[0])
        assert np.all(np.abs(freq - 0.4) < 5 * sd), freq


def _synthetic(n: int = 16, seed: int = 0, rank: int = 3) -> Counts:
    mu = zipf_drift_distributions(n, 2000, rank, sharpness=2.0, seed=0)
    total, shards = sample_sharded_counts(mu, 1000, shards=20, seed=seed)
    counts = Counts(sp.csr_matrix(total), {"source": "synthetic"}, None, tuple(shards))
    return counts


def test_heldout_pair_is_the_heldout_stress_of_one_outer_split() -> None:
    sc = _synthetic()
    n, ranks = 16, [1, 2, 3, 5]
    halves = split_half_grams(sc.matrix, n, shards=sc.shards, splits=10, seed=3, repeats=1)
    ((g_p, g_q),) = halves.grams
    x_p = mds_from_gram(g_p).coordinates(5)
    x_q = mds_from_gram(g_q).coordinates(5)
    got = heldout_pair(g_p, x_p, g_q, x_q, ranks)
    want = heldout_mds_stress(halves, ranks)
    assert got.keys() == want.keys()
    for r in ranks:
        assert got[r] == pytest.approx(want[r], rel=1e-12, abs=1e-14)
    # Ranks beyond the coordinates given are refused, in the usual format.
    with pytest.raises(
        PosdiagError, match=r"^'rank' must be an int in \[1, fitted ranks=5\]; got 6$"
    ):
        heldout_pair(g_p, x_p, g_q, x_q, [6])


def test_outer_splits_follow_the_split_half_default() -> None:
    assert outer_splits(2) == outer_splits(511) == 4
    assert outer_splits(512) == outer_splits(2048) == 2
    assert outer_splits(2049) == 1
    sc = _synthetic()
    assert len(split_half_grams(sc.matrix, 16, shards=sc.shards).grams) == outer_splits(16)


@pytest.mark.parametrize("replicates", [40, 200])
def test_heldout_intervals_add_the_pairs_spread_in_quadrature(
    replicates: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _synthetic(seed=1)
    n = 16
    geo_mds = mds_from_gram(split_half_grams(sc.matrix, n, shards=sc.shards).grams[0][0])
    encs = [
        make_encoding(nm, n, p, mds=geo_mds)
        for nm, p in map(parse_encoding, ("sinusoidal", "mds-2", "mds-4"))
    ]
    estimates = [0.5, 0.3, 0.2]
    seen: list[dict[int, float]] = []
    real = uncertainty.heldout_pair

    def spy(*args: object) -> dict[int, float]:
        out = real(*args)  # type: ignore[arg-type]
        seen.append(out)
        return out

    monkeypatch.setattr(uncertainty, "heldout_pair", spy)
    kw = {"replicates": replicates, "seed": 2, "estimator": "crossfit"}
    plain = bootstrap_stress(sc, n, encs, estimates, **kw)  # type: ignore[arg-type]
    assert seen == [] and plain.heldout_pairs == 0
    wide = bootstrap_stress(sc, n, encs, estimates, heldout_splits=2, **kw)  # type: ignore[arg-type]
    pairs = np.array([[d[2], d[4]] for d in seen])
    assert wide.heldout_pairs == pairs.shape[0] == replicates // 2  # every replicate kept
    # The same replicates: fixed encodings and the in-sample rank intervals are untouched.
    assert wide.encodings[0] == plain.encodings[0]
    assert wide.stress_by_rank == plain.stress_by_rank
    q = stats.t.ppf(0.975, pairs.shape[0] - 1)
    for idx, col in ((1, 0), (2, 1)):
        est = estimates[idx]
        lo, hi = plain.encodings[idx]
        extra = q * np.std(pairs[:, col], ddof=1) / np.sqrt(2)
        want = (est - np.hypot(est - lo, extra), est + np.hypot(hi - est, extra))
        assert wide.encodings[idx] == pytest.approx(want, rel=1e-12)
        assert extra > 0


def test_the_pairs_spread_is_the_headlines_spread_over_outer_splits() -> None:
    """The premise, on a corpus of true rank 3: the held-out mds-4 figure varies with the seed
    of its outer splits (a choice made given the data) about as much as the pairs say, and far
    more than the in-sample replicates do (the interval before the pairs)."""
    sc = _synthetic(seed=2)
    n = 16
    heads = []
    for seed in range(16):
        halves = split_half_grams(sc.matrix, n, shards=sc.shards, splits=10, seed=seed)
        heads.append(heldout_mds_stress(halves, [4])[4])
    direct = float(np.std(heads, ddof=1))
    rep = stress_report(sc, ["mds-4"], analysis=Analysis(min_count=1, seed=0, replicates=80))
    (score,) = rep.encodings
    assert rep.uncertainty is not None and rep.uncertainty.heldout_pairs == 40
    half_width = (score.ci_high - score.ci_low) / 2
    implied = half_width / stats.t.ppf(0.975, 39)  # >= the pairs' part alone
    assert 0.67 * direct < implied < 1.8 * direct, (implied, direct)
    # The replicates' in-sample tails alone (the interval before the pairs) imply far less.
    geo = rep.geometry
    assert geo is not None
    (enc,) = [make_encoding(nm, n, p, mds=geo.mds) for nm, p in [parse_encoding("mds-4")]]
    lo, hi = bootstrap_stress(
        sc, n, [enc], [score.stress], replicates=80, seed=0, estimator="crossfit"
    ).encodings[0]
    assert (hi - lo) / 2 / stats.t.ppf(0.975, 79) < 0.5 * direct
    in_sample = stress_report(
        sc, ["mds-4"], analysis=Analysis(min_count=1, estimator="plugin", seed=0, replicates=80)
    )
    assert in_sample.uncertainty is not None and in_sample.uncertainty.heldout_pairs == 0


def test_stress_names_the_outer_splits_in_text_and_json(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    path = tmp_path / "s.txt"
    texts = synth_texts(SynthSpec(positions=12, vocab=40, sequences=400, seed=0))
    path.write_text("\n".join(texts) + "\n")
    base = ["stress", str(path), "--min-count", "10", "-e", "mds-2", "-e", "alibi"]
    res = cli([*base, "--shards", "6", "--json"])
    assert res.exit_code == 0, res.output
    unc = json.loads(res.stdout)["uncertainty"]
    assert (unc["replicates"], unc["heldout_pairs"], unc["heldout_splits"]) == (200, 100, 4)
    res = cli([*base, "--shards", "6"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())  # rich wraps the line
    assert (
        "seed 0; held-out mds-r: mean of 4 outer splits, spread also from 100 replicate pairs)"
        in flat
    )
    # No held-out figure, no pairs: the plug-in scores mds-r in-sample.
    res = cli([*base, "--shards", "6", "--estimator", "plugin", "--json"])
    assert res.exit_code == 0, res.output
    unc = json.loads(res.stdout)["uncertainty"]
    assert (unc["heldout_pairs"], unc["heldout_splits"]) == (0, 0)


def test_the_intervals_name_the_outer_splits_the_headline_averages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The count the text prints is the one the pairs' spread was divided by (one rule,
    posdiag.geometry.estimator.outer_splits), also where a threshold makes it 2 or 1."""
    import posdiag.geometry.estimator as est_mod
    import posdiag.geometry.heldout as heldout_mod
    import posdiag.uncertainty.bootstrap as unc_mod

    divided: list[int] = []
    real = unc_mod._split_spread

    def spy(pairs, heldout_ranks, rank, splits):  # type: ignore[no-untyped-def]
        if rank is not None:
            divided.append(splits)
        return real(pairs, heldout_ranks, rank, splits)

    monkeypatch.setattr(unc_mod, "_split_spread", spy)
    sc = _synthetic()
    assert est_mod.outer_splits(sc.matrix.shape[0]) == 4  # below 512 positions
    for want in (4, 2, 1):
        if want < 4:  # the longer contexts' rule on this small input
            for module in (est_mod, heldout_mod):
                monkeypatch.setattr(module, "outer_splits", lambda n, k=want: k)
        divided.clear()
        rep = stress_report(sc, ["mds-2"], analysis=Analysis(min_count=1, seed=1, replicates=40))
        assert rep.uncertainty is not None and rep.geometry is not None
        assert rep.uncertainty.heldout_splits == want and divided == [want]
        said = f"mean of {want} outer splits" if want > 1 else "held-out mds-r: 1 outer split,"
        assert said in rep.uncertainty.describe()


def test_check_judges_held_out_mds_r_on_the_same_widened_interval() -> None:
    from posdiag.reports.gate import build_config, measure

    sc = _synthetic(seed=4)
    report = stress_report(sc, ["mds-3"], analysis=Analysis(min_count=1, seed=1, replicates=60))
    (score,) = report.encodings
    facts = measure(
        sc,
        build_config(encodings=["mds-3"], max_stress=[0.9]),
        analysis=Analysis(min_count=1, seed=1, replicates=60),
    )
    (gated,) = facts.scores.values()
    assert gated.stress == score.stress
    assert (gated.ci_low, gated.ci_high) == (score.ci_low, score.ci_high)
    # Widened: the same replicates without the pairs' spread give a far narrower interval.
    geo = report.geometry
    assert geo is not None
    (enc,) = [make_encoding(nm, geo.n_eff, p, mds=geo.mds) for nm, p in [parse_encoding("mds-3")]]
    narrow = bootstrap_stress(
        sc, geo.n_eff, [enc], [score.stress], replicates=60, seed=1, estimator="crossfit"
    )
    (lo, hi), width = narrow.encodings[0], gated.ci_high - gated.ci_low
    # 1.99x here (4 outer splits: the pairs' spread over sqrt(4)).
    assert width > 1.5 * (hi - lo), (width, hi - lo)


def test_too_few_pairs_fall_back_to_the_in_sample_interval_and_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fewer than 2 complementary pairs kept (most replicates skipped on a thin corpus): the
    held-out interval cannot be widened, and the line says it is too narrow."""
    import posdiag.uncertainty.bootstrap as unc_mod

    real = unc_mod._Samples.result

    def one_pair(self):  # type: ignore[no-untyped-def]
        *rest, pairs = real(self)
        return (*rest, pairs[:1])

    sc = _synthetic()
    wide = stress_report(sc, ["mds-2"], analysis=Analysis(min_count=1, seed=1, replicates=40))
    monkeypatch.setattr(unc_mod._Samples, "result", one_pair)
    rep = stress_report(sc, ["mds-2"], analysis=Analysis(min_count=1, seed=1, replicates=40))
    unc = rep.uncertainty
    assert unc is not None and (unc.heldout_pairs, unc.heldout_splits) == (0, 4)
    assert unc.describe().endswith(
        "; held-out mds-r: mean of 4 outer splits, spread from in-sample replicates only "
        "(fewer than 2 replicate pairs kept: too narrow))"
    )
    ((w,), (s,)) = wide.encodings, rep.encodings
    assert s.stress == w.stress and s.ci_high - s.ci_low < w.ci_high - w.ci_low
