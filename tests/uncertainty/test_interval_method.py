"""How intervals are read from the replicates: percentiles from 100 replicates, a t interval
below; 200 replicates by default, from 128 positions 50, or where a Hadamard matrix of the shard
count is built 2 (shards - 1) balanced ones up to 50 (posdiag._util.defaults)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import Result
from scipy import stats

from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import Counts, count_texts
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from posdiag.synthetic import SynthSpec, synth_texts
from posdiag.uncertainty import bootstrap as uncertainty
from posdiag.uncertainty.bootstrap import default_replicates, interval_method


def _sharded(positions: int = 12) -> Counts:
    """6 shards of 400 sequences; ``BALANCED_FROM`` positions make the corpus long."""
    texts = synth_texts(SynthSpec(positions=positions, vocab=40, sequences=400, seed=0))
    return count_texts(texts, load_tokenizer(), shards=6, shard_seed=0, max_len=positions)


@pytest.mark.parametrize("size", [2, 7, 50, 99])
def test_few_replicates_give_a_student_t_interval(size: int) -> None:
    rng = np.random.default_rng(size)
    samples = 0.4 + 0.02 * rng.standard_normal(size)
    lo, hi = uncertainty._interval(0.5, samples, 0.9, scale=0.8)
    half = stats.t.ppf(0.95, size - 1) * np.std(samples, ddof=1) * 0.8
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half), rel=1e-12)
    assert interval_method(size) == "t"


@pytest.mark.parametrize("size", [100, 200])
def test_many_replicates_give_the_centred_percentile_interval(size: int) -> None:
    rng = np.random.default_rng(size)
    samples = rng.gamma(2.0, 0.01, size)  # skewed: a t interval would be symmetric
    lo, hi = uncertainty._interval(0.5, samples, 0.9, scale=0.8)
    ordered = np.sort(samples)
    # np.quantile's default (linear) rule, written out
    at = 0.05 * (size - 1)
    q_lo = ordered[int(at)] + (at - int(at)) * (ordered[int(at) + 1] - ordered[int(at)])
    at = 0.95 * (size - 1)
    q_hi = ordered[int(at)] + (at - int(at)) * (ordered[int(at) + 1] - ordered[int(at)])
    mean = samples.mean()
    assert (lo, hi) == pytest.approx((0.5 + 0.8 * (q_lo - mean), 0.5 + 0.8 * (q_hi - mean)))
    assert hi - 0.5 != pytest.approx(0.5 - lo, rel=0.05)
    assert interval_method(size) == "percentile"


def test_a_t_interval_is_clipped_to_the_unit_interval() -> None:
    assert uncertainty._interval(0.99, np.array([0.9, 1.0, 0.95]), 0.95) == (
        pytest.approx(0.99 - stats.t.ppf(0.975, 2) * 0.05),
        1.0,
    )


def test_default_replicates_fall_from_128_positions() -> None:
    # Issue 33: from 128 positions, where 200 replicates cost 14-35x the estimate.
    assert [default_replicates(n) for n in (2, 127, 128, 512, 1024, 16_384)] == [
        200,
        200,
        38,
        38,
        38,
        38,
    ]
    # Balanced where a Hadamard matrix of the shard count is built: every row and its
    # complement, up to 50; 50 random replicates otherwise.
    by_shards = {k: default_replicates(4096, k) for k in (2, 4, 6, 8, 12, 16, 20, 28, 40)}
    assert by_shards == {2: 2, 4: 6, 6: 50, 8: 14, 12: 22, 16: 30, 20: 38, 28: 50, 40: 50}
    assert default_replicates(127, 8) == 200
    assert default_replicates(128, 8) == 14


def test_the_default_follows_n_eff_and_an_explicit_count_wins() -> None:
    sc = _sharded(uncertainty.BALANCED_FROM - 1)
    rep = stress_report(sc, ["sinusoidal", "mds-2"], analysis=Analysis(min_count=10))
    assert rep.uncertainty is not None
    assert (rep.uncertainty.replicates, rep.uncertainty.method) == (200, "percentile")
    # The corpus made long: every other input the same.
    sc = _sharded(uncertainty.BALANCED_FROM)
    rep = stress_report(sc, ["sinusoidal", "mds-2"], analysis=Analysis(min_count=10))
    assert rep.uncertainty is not None
    assert (rep.uncertainty.replicates, rep.uncertainty.method) == (50, "t")
    assert "50 replicates, t interval from their sd" in rep.uncertainty.describe()
    rep = stress_report(sc, ["sinusoidal"], analysis=Analysis(min_count=10, replicates=120))
    assert rep.uncertainty is not None
    assert (rep.uncertainty.replicates, rep.uncertainty.method) == (120, "percentile")


def test_the_default_t_interval_is_the_t_interval_of_its_replicates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = _sharded(uncertainty.BALANCED_FROM)
    seen: list[np.ndarray] = []
    real = uncertainty._interval

    def spy(est: float, samples: np.ndarray, *rest: Any) -> object:
        seen.append(np.asarray(samples, dtype=np.float64))
        return real(est, samples, *rest)

    monkeypatch.setattr(uncertainty, "_interval", spy)
    rep = stress_report(sc, ["sinusoidal"], analysis=Analysis(min_count=10, seed=4))
    (score,) = rep.encodings
    samples = seen[0]
    assert samples.size == 50
    half = stats.t.ppf(0.975, 49) * np.std(samples, ddof=1)  # 6 shards: scale 1
    assert (score.ci_low, score.ci_high) == pytest.approx(
        (score.stress - half, score.stress + half), rel=1e-12
    )


def test_cli_names_the_interval_in_text_and_json(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    path, long = tmp_path / "s.txt", tmp_path / "long.txt"
    texts = synth_texts(SynthSpec(positions=12, vocab=40, sequences=400, seed=0))
    path.write_text("\n".join(texts) + "\n")
    n = uncertainty.BALANCED_FROM
    long.write_text("\n".join(synth_texts(SynthSpec(positions=n, vocab=40, sequences=400))) + "\n")
    opts = ["--min-count", "10", "-e", "sinusoidal", "--shards", "6"]
    res = cli(["stress", str(path), *opts, "--json"])
    assert res.exit_code == 0, res.output
    unc = json.loads(res.stdout)["uncertainty"]
    assert (unc["replicates"], unc["method"]) == (200, "percentile")
    base = ["stress", str(long), *opts, "--max-len", str(n)]
    res = cli([*base, "--json"])
    unc = json.loads(res.stdout)["uncertainty"]
    assert (unc["replicates"], unc["method"]) == (50, "t")
    res = cli(base)
    assert res.exit_code == 0, res.output
    assert (
        "intervals: 95% shard bootstrap (6 shards, 50 replicates, t interval from their sd, "
        "seed 0)" in " ".join(res.stdout.split())
    )
    res = cli([*base, "--replicates", "100", "--json"])
    unc = json.loads(res.stdout)["uncertainty"]
    assert (unc["replicates"], unc["method"]) == (100, "percentile")
    res = cli([*base, "--replicates", "1"])
    assert res.exit_code == 2
    assert res.stderr == "Error: 'replicates' must be an int in [2, inf]; got 1\n"
