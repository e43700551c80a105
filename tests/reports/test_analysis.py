"""The theory diagnostics: positional information, shift-equivariance, smoothness, monotonicity,
noise floor and the recommendation (docs/geometry.md section 8)."""

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
from scipy.linalg import toeplitz

from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import Counts, count_texts
from posdiag.geometry.core import (
    hellinger_distances,
    pairwise_distances,
    parameter_saving,
    positional_information,
    shift_equivariance,
    smoothness,
    violation_rate,
)
from posdiag.reports.diagnosis import diagnose
from posdiag.reports.options import Analysis
from posdiag.synthetic import SynthSpec, synth_texts
from tests._data import sample_texts


def _iid_counts(sequences: int, positions: int = 10, vocab: int = 30, seed: int = 0) -> Counts:
    p = np.random.default_rng(seed).dirichlet(np.ones(vocab))
    mu = np.tile(p, (positions, 1))
    return count_texts(sample_texts(mu, sequences, seed=seed), load_tokenizer(), max_len=positions)


def test_positional_information_matches_a_dense_brute_force() -> None:
    c = np.random.default_rng(0).integers(0, 5, size=(4, 6))
    c[:, 0] += 1
    joint = c / c.sum()
    pos = joint.sum(axis=1, keepdims=True)
    tok = joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    brute = float(np.sum(joint[nz] * np.log2(joint[nz] / (pos @ tok)[nz])))
    bits, _ = positional_information(c)
    assert bits == pytest.approx(brute, abs=1e-12)


def test_information_is_zero_within_noise_on_iid_positions() -> None:
    counts = _iid_counts(3_000)
    d = diagnose(counts, analysis=Analysis(min_count=10, level=0.95))
    info = d.information
    # The plug-in I of the supported positions, by a dense brute force over the joint table.
    c = counts.matrix[: d.corpus.n_eff].toarray().astype(float)
    joint = c / c.sum()
    outer = joint.sum(axis=1, keepdims=True) @ joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    assert info.bits == pytest.approx(np.sum(joint[nz] * np.log2(joint[nz] / outer[nz])), abs=1e-12)
    assert info.excess == pytest.approx(info.bits - info.null_mean, abs=1e-15)
    assert abs(info.z) < 3  # ... but sits within the noise of independent data
    assert not info.significant
    assert d.recommendation.encoding == "nope"


def test_information_is_large_on_a_position_dependent_corpus() -> None:
    texts = synth_texts(SynthSpec(positions=10, vocab=30, sequences=3_000))
    counts = count_texts(texts, load_tokenizer(), max_len=10)
    info = diagnose(counts, analysis=Analysis(min_count=10)).information
    assert info.significant and info.z > 50
    assert info.excess > 0.1
    iid = diagnose(_iid_counts(3_000), analysis=Analysis(min_count=10)).information
    assert info.bits > 10 * iid.bits


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.01, 5.0), min_size=2, max_size=12))
def test_shift_r2_is_one_for_any_toeplitz_geometry(profile: list[float]) -> None:
    d = toeplitz(np.r_[0.0, profile])
    fit = shift_equivariance(d)
    if np.ptp(profile) == 0:
        assert np.isnan(fit.r2)  # all distances equal: nothing to explain
    elif np.ptp(profile) <= 1e-9 * max(profile):
        # A spread at rounding level counts as constant (NaN) or fits exactly: both are right.
        assert np.isnan(fit.r2) or fit.r2 == pytest.approx(1.0, abs=1e-9)
    else:
        assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert np.allclose(fit.profile, profile)


def test_shift_r2_matches_a_brute_force_least_squares_fit() -> None:
    rng = np.random.default_rng(3)
    d = pairwise_distances(rng.standard_normal((9, 4)))
    n = d.shape[0]
    pairs = list(itertools.combinations(range(n), 2))
    y = np.array([d[i, j] for i, j in pairs])
    x = np.zeros((len(pairs), n - 1))  # one indicator column per lag
    for row, (i, j) in enumerate(pairs):
        x[row, j - i - 1] = 1.0
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    r2 = 1 - np.sum((y - x @ coef) ** 2) / np.sum((y - y.mean()) ** 2)
    fit = shift_equivariance(d)
    assert fit.r2 == pytest.approx(r2, abs=1e-12)
    assert 0 <= fit.r2 < 1


def test_smoothness_is_neighbour_mean_over_all_pairs() -> None:
    d = pairwise_distances(np.arange(6, dtype=float)[:, None])  # the line: d = |i-j|
    assert smoothness(d) == pytest.approx(1.0 / (35 / 15))  # sum of lag*(6-lag) = 35


def _brute_discordant(a: np.ndarray, b: np.ndarray) -> float:
    iu = np.triu_indices(a.shape[0], k=1)
    x, y = a[iu], b[iu]
    pairs = list(itertools.combinations(range(x.size), 2))
    bad = sum((x[p] - x[q]) * (y[p] - y[q]) < 0 for p, q in pairs)
    return bad / len(pairs)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(3, 8))
def test_violation_rate_matches_brute_force_discordant_pairs(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    a = pairwise_distances(rng.standard_normal((n, 3)))
    b = pairwise_distances(rng.standard_normal((n, 2)))
    assert violation_rate(a, b) == pytest.approx(_brute_discordant(a, b), abs=1e-12)


def test_violation_rate_is_zero_for_a_monotone_transform_and_one_reversed() -> None:
    d = pairwise_distances(np.random.default_rng(1).standard_normal((7, 3)))
    assert violation_rate(d, np.sqrt(d)) == pytest.approx(0.0)
    assert violation_rate(d, -d) == pytest.approx(1.0)


def test_parameter_saving_of_the_paper() -> None:
    assert parameter_saving(3, 32, 128) == pytest.approx(1 - 3 * 160 / 4096)
    assert round(parameter_saving(3, 32, 128), 2) == 0.88


def test_noise_floor_flags_identical_positions_as_indistinguishable() -> None:
    # Positions 0-2 share one distribution, 3-5 another: only pairs inside a group are noise.
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(20)), rng.dirichlet(np.ones(20))
    mu = np.vstack([p, p, p, q, q, q])
    counts = count_texts(sample_texts(mu, 2_000, seed=1), load_tokenizer(), max_len=6)
    d = diagnose(counts, analysis=Analysis(min_count=10, level=0.95))
    within = {(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5)}
    found = set(d.noise.pairs)
    assert found <= within
    assert len(found) >= 3  # d_H within a group is at the floor: about half fall below it
    assert d.noise.n_indistinguishable == len(found)
    assert d.noise.fraction == pytest.approx(len(found) / 15)


def test_diagnose_on_the_shift_corpus_recommends_a_relative_encoding() -> None:
    spec = SynthSpec(mode="shift", positions=16, vocab=80, sequences=4_000)
    sc = count_texts(synth_texts(spec), load_tokenizer(), shards=10, max_len=16)
    d = diagnose(sc, analysis=Analysis(min_count=10), dim=128)
    assert d.shift.r2 > 0.95
    assert d.recommendation.family == "relative: attention bias"
    assert d.recommendation.encoding == "alibi"
    assert "|i-j|" in d.recommendation.text
    for e in d.encodings:
        assert e.ci_low <= e.stress <= e.ci_high


def _corpus(tmp_path: Path, spec: SynthSpec) -> Path:
    path = tmp_path / "c.txt"
    path.write_text("\n".join(synth_texts(spec)) + "\n")
    return path


def test_cli_diagnose_json(cli: Callable[..., Result], tmp_path: Path) -> None:
    path = _corpus(tmp_path, SynthSpec(positions=12, vocab=40, sequences=800))
    res = cli(
        ["diagnose", str(path), "--min-count", "10", "--dim", "128", "--json", "--shards", "8"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) >= {"information", "noise", "shift", "rank", "encodings", "recommendation"}
    assert doc["rank"]["dim"] == 128
    assert doc["rank"]["saving"] == pytest.approx(1 - doc["rank"]["rank"] * (12 + 128) / (12 * 128))
    assert len(doc["rank"]["spectrum"]["stress_by_rank_ci"]) == 11
    assert doc["uncertainty"]["shards"] == 8
    assert all(e["ci_low"] is not None for e in doc["encodings"])
    human = cli(["diagnose", str(path), "--min-count", "10", "--shards", "0"])
    assert human.exit_code == 0, human.output
    assert "Recommendation:" in human.stdout and "no intervals" in human.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "0"], "Error: 'target' must be a float in (0, 1]; got 0.0\n"),
        (["--dim", "0"], "Error: 'dim' must be an int in [1, inf]; got 0\n"),
        (["--ci", "0"], "Error: 'ci' must be a float in (0, 1); got 0.0\n"),
    ],
)
def test_cli_diagnose_rejects_bad_options(
    cli: Callable[..., Result], tmp_path: Path, args: list[str], message: str
) -> None:
    path = _corpus(tmp_path, SynthSpec(positions=4, vocab=10, sequences=20))
    res = cli(["diagnose", str(path), *args])
    assert res.exit_code == 2
    assert res.stderr == message


def test_hellinger_of_the_synthetic_distributions_is_exact() -> None:
    # Sanity link between synthetic.py and the geometry: exact rows give exact distances.
    mu = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    d = hellinger_distances(mu)
    assert d[0, 1] == pytest.approx(np.sqrt(0.5))


def test_noise_dominated_positions_are_flagged_unstable() -> None:
    # Position 0 has its own distribution; positions 1-15 share one, so everything that
    # separates them is sampling noise: they are flagged, position 0 is not.
    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.ones(25)), rng.dirichlet(np.ones(25))
    mu = np.vstack([p, *[q] * 15])
    counts = count_texts(sample_texts(mu, 500, seed=3), load_tokenizer(), max_len=16)
    d = diagnose(counts, analysis=Analysis(min_count=10))
    # The split-half noise bound is itself one random split: on this seed 14 of the 15 noise
    # positions cross the flagging rule (position 6 has 7 of 15 pairs within noise, the rule
    # needs 8, and a share of 0.2). Before the thinning cross-fit averaged over every split
    # (issue 13) the leftover split noise inflated the bound and all 15 were flagged.
    assert 0 not in d.noise.unstable
    assert set(d.noise.unstable) <= set(range(1, 16)) and len(d.noise.unstable) >= 14
    assert d.noise.position_share[0] < 0.1
    assert d.uncertainty.unstable == d.noise.unstable
    # With position 0 alone distinct, each of 1-15 is within the floor of several others.
    assert all(k > 0 for k in d.noise.per_position[1:]) and d.noise.per_position[0] == 0


def test_ranges_formats_runs() -> None:
    from posdiag.render._format import ranges

    assert ranges((0, 1, 2, 3, 7, 9, 10)) == "0-3, 7, 9-10"
    assert ranges((4,)) == "4" and ranges(()) == "none"


def test_identical_positional_distributions_are_one_clear_error(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    corpus = tmp_path / "same.txt"
    corpus.write_text("a b c\nb c a\nc a b\n")  # every position: a, b, c once each
    message = (
        f"Error: {corpus}: all 3 analysed positions have the same token distribution "
        "(largest Hellinger distance 0); there is no positional geometry to fit\n"
    )
    for cmd in (
        ["stress"],
        ["diagnose"],
        ["build-encoding", "-r", "1", "-o", str(tmp_path / "e.npy")],
    ):
        res = cli([*cmd, str(corpus), "--min-count", "1"])
        assert (res.exit_code, res.stderr) == (2, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.txt"]


def test_recommendation_reason_fits_a_relative_winner(
    bundled_corpus: Path, cli: Callable[..., Result]
) -> None:
    res = cli(
        ["diagnose", str(bundled_corpus), "-n", "4", "--replicates", "5", "--json", "--quiet"]
    )
    assert res.exit_code == 0, res.stderr
    rec = json.loads(res.stdout)["recommendation"]
    assert rec["family"].startswith("relative: ")  # the case the review found
    assert f"{rec['encoding']} ({rec['family']}) fits best" in rec["text"]
    assert "absolute position matters" not in rec["text"]
    assert "it has the lowest stress, although D_H is not shift-equivariant" in rec["text"]


def test_two_positions_warn_that_the_comparison_is_empty(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    corpus = tmp_path / "two.txt"
    corpus.write_text("a b\nb c\nc a\nb a\n")
    # Plug-in: 4 sequences are too few for a cross-fit to say anything (its estimate of the one
    # squared distance may come out negative, and every stress is then 1).
    args = ["stress", str(corpus), "--min-count", "1", "--shards", "0", "--json"]
    res = cli([*args, "--estimator", "plugin"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["corpus"]["n_eff"] == 2
    assert max(e["stress"] for e in doc["encodings"] if e["name"] != "nope") < 1e-7
    note = (
        f"{corpus}: only 2 positions are analysed (n_eff=2), so every encoding that separates "
        "them has stress 0; lower --min-count or add data to compare encodings"
    )
    # Four sequences: both positions are within their noise floor, which is warned too.
    assert doc["warnings"] == [
        note,
        "2 of 2 positions are unstable (mostly sampling noise): 0-1 (support 4); only more "
        "data reaching these positions narrows it",
    ]
    assert res.stderr == "".join(f"Warning: {w}\n" for w in doc["warnings"])


def test_diagnose_recommends_no_mds_rank_when_none_reaches_the_target(
    cli: Callable[..., Result], bundled_corpus: Path
) -> None:
    """Issue 34 item 3: on the bundled corpus no rank reaches 0.1 (floor 0.120): the JSON's
    recommended mds_rank is null, and no parameter saving is claimed for the signal rank."""
    args = ["diagnose", str(bundled_corpus), "--shards", "0"]
    doc = json.loads(cli([*args, "--json"]).stdout)
    rank = doc["rank"]
    assert rank["reached"] is False and doc["recommendation"]["mds_rank"] is None
    assert rank["rank"] == rank["spectrum"]["signal_rank"]
    text = doc["recommendation"]["text"]
    floor, st = rank["spectrum"]["floor"], rank["rank_stress"]
    assert text.endswith(
        f"no MDS rank reaches stress <= 0.1 (the estimate's floor is {floor:.3f}; the signal "
        f"rank {rank['rank']} has {st:.3f})."
    )
    assert "fewer parameters" not in text
    shown = " ".join(cli(args).stdout.split())
    assert f"the signal rank {rank['rank']} has {st:.3f})." in shown
    assert "fewer parameters than a full table" not in shown


def test_small_corpus_errors_name_the_option_to_change(
    cli: Callable[..., Result], bundled_corpus: Path, tmp_path: Path
) -> None:
    """Issue 34 item 6: each error on a small corpus names what to change and the numbers, and
    following it does not lead to an error that contradicts it."""
    lines = bundled_corpus.read_text(encoding="utf-8").splitlines()
    tiny, small = tmp_path / "tiny.txt", tmp_path / "small.txt"
    tiny.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    small.write_text("\n".join(lines[:30]) + "\n", encoding="utf-8")

    def error(path: Path, *args: str) -> str:
        res = cli(["stress", str(path), "--shards", "0", *args])
        assert res.exit_code == 2, res.stdout
        return res.stderr

    need = "the cross-fitted geometry needs >= 4 tokens at every analysed position"
    assert error(tiny) == (
        f"Error: {tiny}: fewer than 2 positions have support >= min_count=100 (n_eff=0; supports "
        "of positions 0..4: 3, 3, 3, 3, 3); add data (the cross-fit needs >= 4 tokens at each "
        "position, positions 0 and 1 have 3 and 3), or use --estimator plugin with --min-count 3\n"
    )
    assert error(tiny, "--min-count", "2") == (
        f"Error: {tiny}: {need}; position 0 has 3 (--min-count 2 kept positions 0..26): add data "
        "or use --estimator plugin\n"
    )
    ok = cli(["stress", str(tiny), "--shards", "0", "--min-count", "3", "--estimator", "plugin"])
    assert ok.exit_code == 0, ok.stderr
    assert error(small) == (
        f"Error: {small}: fewer than 2 positions have support >= min_count=100 (n_eff=0; "
        "supports of positions 0..4: 30, 30, 30, 30, 30; distinct sampling units: 29, 29, 29, 29, "
        "29); lower --min-count to 29 or add data\n"
    )
    assert error(small, "--min-count", "2") == (
        f"Error: {small}: {need}; position 28 has 3 (--min-count 2 kept positions 0..49): raise "
        "--min-count to 4, lower --max-len to 28, or use --estimator plugin\n"
    )
    for fix in (["--min-count", "29"], ["--min-count", "4"], ["--min-count", "2", "-n", "28"]):
        ok = cli(["stress", str(small), "--shards", "0", *fix])
        assert ok.exit_code == 0, (fix, ok.stderr)
    # Two lines, every position analysed: the same rule, not the estimator's internal one.
    two = tmp_path / "two.txt"
    two.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    assert error(two, "--min-count", "1", "--json") == (
        f"Error: {two}: {need}; position 0 has 2 (--min-count 1 kept positions 0..49): add data "
        "or use --estimator plugin\n"
    )
