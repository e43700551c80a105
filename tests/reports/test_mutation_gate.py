"""gate.py rules judged on hand-made counts (issue 15): thresholds that can fail, the info-only
path, ``strict`` and ``min-count`` from a config file, every config error message.

The counts are small integer matrices built here, so each figure (stress, positional
information, supports, effective rank) is recomputed independently with numpy.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from posdiag.counts.core import Counts
from posdiag.errors import PosdiagError
from posdiag.reports.analysis import EncodingScore
from posdiag.reports.gate import (
    GateConfig,
    GateFacts,
    RuleResult,
    build_config,
    evaluate,
    find_config,
    load_config,
    measure,
    run_gate,
)
from posdiag.uncertainty.bootstrap import ShardedCounts

# 6 positions, vocabulary 4. Supports 12, 12, 12, 12, 5, 0: with min_count 10, n_eff = 4.
MATRIX = np.array(
    [
        [9, 1, 1, 1],
        [1, 8, 2, 1],
        [2, 2, 6, 2],
        [3, 3, 3, 3],
        [1, 1, 1, 2],
        [0, 0, 0, 0],
    ]
)


def counts(matrix: np.ndarray = MATRIX) -> Counts:
    meta = {"source": "hand", "tokenizer": "t", "view": "v", "max_len": matrix.shape[0]}
    return Counts(sp.csr_matrix(matrix.astype(np.int64)), meta)


def info_bits(c: np.ndarray) -> float:
    """I(position; token) in bits, by a double loop over rows and tokens."""
    total = c.sum()
    pooled = c.sum(axis=0) / total
    out = 0.0
    for row in c:
        n_i = row.sum()
        for v, x in enumerate(row):
            if x > 0:
                out += n_i / total * (x / n_i) * math.log2((x / n_i) / pooled[v])
    return out


def hellinger(c: np.ndarray) -> np.ndarray:
    mu = np.sqrt(c / c.sum(axis=1, keepdims=True))
    return np.sqrt(np.clip(1 - mu @ mu.T, 0, 1)) * (1 - np.eye(len(c)))


def gram(d: np.ndarray) -> np.ndarray:
    j = np.eye(len(d)) - 1 / len(d)
    return -0.5 * j @ (d * d) @ j


# --- the info-only path and the min-positional-info threshold -----------------------------------


def test_info_only_path_measures_the_analysed_prefix() -> None:
    cfg = build_config(min_positional_info=0.0, reading={"min_count": 10})
    facts = measure(counts(), cfg)
    assert facts.scores == {} and facts.eigenvalues == ()
    assert facts.corpus.n_eff == 4
    assert facts.positional_info == pytest.approx(info_bits(MATRIX[:4]), rel=1e-12)
    # A larger min_count argument wins over the config's: n_eff = 0, no information.
    facts = measure(counts(), cfg, min_count=13)
    assert (facts.corpus.n_eff, facts.positional_info) == (0, 0.0)
    # The default min_count (100) leaves nothing either.
    assert measure(counts(), build_config(min_positional_info=0.0)).corpus.n_eff == 0


def test_min_positional_info_passes_at_the_threshold_and_fails_above_it() -> None:
    bits = info_bits(MATRIX[:4])
    for threshold, passed in ((bits, True), (bits * 1.001, False), (0.0, True)):
        cfg = build_config(min_positional_info=threshold, reading={"min_count": 10})
        report = run_gate(counts(), cfg)
        (r,) = report.results
        assert (r.rule, r.target, r.comparison, r.passed) == (
            "min-positional-info",
            "",
            ">=",
            passed,
        )
        assert r.figure == pytest.approx(bits, rel=1e-12) and r.threshold == threshold
        assert (r.measure, r.note, r.unit) == ("I(position; token)", "positions 0..3", " bits")
        assert report.passed is passed and report.failures == (not passed)


def test_min_support_covers_every_counted_position() -> None:
    cfg = build_config(min_support=5, reading={"min_count": 10})
    (r,) = run_gate(counts(), cfg).results
    # Position 5 has support 0 even though only 0..3 are analysed.
    assert (r.figure, r.threshold, r.passed) == (0.0, 5.0, False)
    assert (r.measure, r.note, r.unit) == (
        "smallest support",
        "at position 5 of 0..5",
        " sequences",
    )
    full = MATRIX.copy()
    full[5] = [1, 1, 2, 1]  # support 5 at positions 4 and 5: the first is reported
    (r,) = run_gate(counts(full), cfg).results
    assert (r.figure, r.passed, r.note) == (5.0, True, "at position 4 of 0..5")
    (r,) = run_gate(counts(full), build_config(min_support=6)).results
    assert (r.figure, r.passed) == (5.0, False)


# --- max-stress and max-rank-for-stress ---------------------------------------------------------


def test_max_stress_figure_is_the_stress_and_judges_both_ways() -> None:
    c = counts()
    d = hellinger(MATRIX[:4].astype(float))
    b_h = gram(d)
    lag = np.abs(np.subtract.outer(np.arange(4.0), np.arange(4.0)))
    b_e = gram(lag)
    cos = max(0.0, float(np.sum(b_h * b_e))) / (np.linalg.norm(b_h) * np.linalg.norm(b_e))
    expected = math.sqrt(1 - cos * cos)
    for thr, passed in ((expected + 1e-9, True), (expected - 1e-9, False)):
        cfg = build_config(encodings=["alibi"], max_stress=[thr], reading={"min_count": 10})
        facts = measure(c, cfg, estimator="plugin")
        assert facts.scores["alibi"].stress == pytest.approx(expected, rel=1e-9)
        lam = np.sort(np.linalg.eigvalsh(b_h))[::-1]
        np.testing.assert_allclose(facts.eigenvalues, lam, atol=1e-12)
        assert facts.positional_info == pytest.approx(info_bits(MATRIX[:4]), rel=1e-12)
        (r,) = evaluate(cfg, facts).results
        assert (r.rule, r.target, r.passed, r.measure, r.note, r.id) == (
            "max-stress",
            "alibi",
            passed,
            "stress",
            "",
            "max-stress[alibi]",
        )


def test_measure_uses_the_config_min_count() -> None:
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 10})
    assert measure(counts(), cfg).corpus.n_eff == 4
    assert measure(counts(), cfg, min_count=5).corpus.n_eff == 5
    assert run_gate(counts(), cfg, min_count=5).corpus.n_eff == 5
    with pytest.raises(PosdiagError, match="fewer than 2 positions"):
        measure(counts(), build_config(encodings=["alibi"], max_stress=[1.0]))
    with pytest.raises(PosdiagError) as exc:
        measure(counts(), cfg, min_count=0)
    assert str(exc.value) == "'min_count' must be an int in [1, inf]; got 0"


def test_given_scores_are_used_under_their_canonical_key() -> None:
    cfg = build_config(encodings=["rope:"], max_stress=[0.5], reading={"min_count": 10})
    given = EncodingScore("rope", {}, 0.25, 0.0, 0.0, 0.0, 0)
    facts = measure(counts(), cfg, scores={"rope": given})
    assert facts.scores["rope"] is given
    (r,) = evaluate(cfg, facts).results
    assert (r.figure, r.passed) == (0.25, True)


def test_sharded_counts_give_intervals_and_strict_judges_the_upper_bound() -> None:
    rng = np.random.default_rng(0)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(4, 6))) for _ in range(4))
    total = sum(s.toarray() for s in shards)
    sharded = ShardedCounts(counts(total), shards)
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    facts = measure(sharded, cfg, replicates=30, seed=1)
    s = facts.scores["alibi"]
    assert s.ci_low <= s.stress <= s.ci_high and s.ci_high > s.ci_low
    (r,) = evaluate(cfg, facts).results
    assert r.figure == s.stress and r.note == f"interval [{s.ci_low:.4f}, {s.ci_high:.4f}]"
    strict = build_config(
        encodings=["alibi"], max_stress=[s.stress], strict=True, reading={"min_count": 1}
    )
    (r,) = evaluate(strict, facts).results
    assert (r.figure, r.measure, r.passed) == (s.ci_high, "stress upper bound", False)
    assert r.note == (f"strict; stress {s.stress:.4f}, interval [{s.ci_low:.4f}, {s.ci_high:.4f}]")
    # One shard: no interval, and strict says it judged the stress.
    one = ShardedCounts(counts(total), shards[:1])
    facts = measure(one, strict)
    assert math.isnan(facts.scores["alibi"].ci_high)
    (r,) = evaluate(strict, facts).results
    assert (r.figure, r.measure) == (facts.scores["alibi"].stress, "stress")
    assert r.note == "strict: no confidence interval was available; judged on the stress"


def effective_rank_loop(lam: np.ndarray, eps: float) -> int:
    sq = lam**2
    for r in range(1, len(lam)):
        if math.sqrt(sq[r:].sum() / sq.sum()) <= eps:
            return r
    return len(lam) - 1


def test_max_rank_for_stress_figure_and_verdicts() -> None:
    lam = np.array([5.0, 3.0, 1.0, 0.2])
    facts = GateFacts(measure(counts(), build_config(min_support=1)).corpus, {}, tuple(lam), 0.0)
    cfg = build_config(max_rank_for_stress=["0.1:3", "0.3:1", "0.5:2"])
    results = evaluate(cfg, facts).results
    assert [r.target for r in results] == ["0.5", "0.3", "0.1"]  # tolerances descending
    for r, eps, max_rank in zip(results, (0.5, 0.3, 0.1), (2, 1, 3), strict=True):
        rank = effective_rank_loop(lam, eps)
        assert (r.figure, r.threshold, r.passed) == (rank, max_rank, rank <= max_rank)
        assert (r.rule, r.comparison, r.measure) == ("max-rank-for-stress", "<=", "MDS rank")
        assert r.note == f"smallest rank whose MDS encoding has stress <= {eps:g}"
        assert r.id == f"max-rank-for-stress[{eps:g}]"
    assert [(r.figure, r.passed) for r in results] == [(2, True), (2, False), (3, True)]
    # Fewer than two eigenvalues: rank 0, which passes any limit.
    (r,) = evaluate(
        build_config(max_rank_for_stress=["0.1:1"]), GateFacts(facts.corpus, {}, (1.0,), 0)
    ).results
    assert (r.figure, r.passed) == (0.0, True)


def test_report_counts_failures_and_rule_ids() -> None:
    ok = RuleResult("min-support", "", 5.0, 5.0, ">=", True, "m")
    bad = RuleResult("max-stress", "rope", 0.6, 0.5, "<=", False, "stress")
    from posdiag.reports.gate import GateReport

    corpus = measure(counts(), build_config(min_support=1)).corpus
    report = GateReport(corpus, (ok, bad, bad), False)
    assert (report.passed, report.failures) == (False, 2)
    assert GateReport(corpus, (ok,), False).passed is True
    assert (ok.id, bad.id) == ("min-support", "max-stress[rope]")


# --- build_config ------------------------------------------------------------------------------


def test_build_config_pairs_encodings_and_thresholds() -> None:
    cfg = build_config(encodings=["rope", "alibi:heads=4", "mds:rank=2"], max_stress=[0.3])
    assert cfg.max_stress == {"rope": 0.3, "alibi:heads=4": 0.3, "mds-2": 0.3}
    cfg = build_config(encodings=["rope:head_dim=8,base=100", "t5"], max_stress=[0.1, 0.2])
    assert cfg.max_stress == {"rope:base=100.0,head_dim=8": 0.1, "t5": 0.2}
    assert (cfg.n_rules, cfg.strict, cfg.source, dict(cfg.reading)) == (2, False, None, {})
    cfg = build_config(
        min_positional_info=0.5, min_support=3, max_rank_for_stress=["0.1:4", "0.2:2"]
    )
    assert (cfg.min_positional_info, cfg.min_support, cfg.n_rules) == (0.5, 3, 4)
    assert list(cfg.max_rank_for_stress.items()) == [(0.2, 2), (0.1, 4)]
    cfg = build_config(min_support=1, reading={"tokenizer": "gpt2", "view": None})
    assert dict(cfg.reading) == {"tokenizer": "gpt2"}
    assert GateConfig().n_rules == 0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"max_stress": [0.5]},
         "'--max-stress' needs the encoding it applies to: add --encoding NAME"),
        ({"encodings": ["rope"]},
         "'--encoding rope' needs a threshold: add --max-stress (one per --encoding)"),
        ({"encodings": ["rope", "t5", "alibi"], "max_stress": [0.1, 0.2]},
         "'--max-stress' must be given once or once per --encoding (3); got 2"),
        ({"encodings": ["rope"], "max_stress": [1.5]},
         "'max-stress rope' must be a float in [0, 1]; got 1.5"),
        ({"max_rank_for_stress": ["0.1"]},
         "'max-rank-for-stress' must look like EPS:RANK (e.g. 0.1:8); got '0.1'"),
        ({"max_rank_for_stress": ["x:3"]},
         "'max-rank-for-stress stress' must be a float in [0, 1]; got 'x'"),
        ({"max_rank_for_stress": ["1.5:3"]},
         "'max-rank-for-stress stress' must be a float in [0, 1]; got 1.5"),
        ({"max_rank_for_stress": ["0.1:y"]},
         "'max-rank-for-stress rank' must be an int in [1, inf]; got 'y'"),
        ({"max_rank_for_stress": ["0.1:0"]},
         "'max-rank-for-stress rank' must be an int in [1, inf]; got 0"),
        ({"min_positional_info": -0.1},
         "'min-positional-info' must be a float in [0, inf]; got -0.1"),
        ({"min_support": 0}, "'min-support' must be an int in [1, inf]; got 0"),
        ({}, "no rules to check: give --encoding NAME --max-stress X, --max-rank-for-stress "
             "EPS:RANK, --min-positional-info BITS or --min-support N, or a config file "
             "([tool.posdiag] in pyproject.toml, or posdiag.toml)"),
        ({"strict": True}, "no rules to check: give --encoding NAME --max-stress X, "
         "--max-rank-for-stress EPS:RANK, --min-positional-info BITS or --min-support N, or a "
         "config file ([tool.posdiag] in pyproject.toml, or posdiag.toml)"),
    ],
)  # fmt: skip
def test_build_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(PosdiagError) as exc:
        build_config(**kwargs)
    assert str(exc.value) == message


# --- config files -------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "posdiag.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_strict_and_min_count_from_a_config_file_are_used(tmp_path: Path) -> None:
    f = write(tmp_path, "strict = true\nmin-count = 10\nmax-stress = { alibi = 1.0 }\n")
    cfg = build_config(file=f)
    assert cfg.strict is True and dict(cfg.reading) == {"min_count": 10}
    assert cfg.source == str(f)
    assert measure(counts(), cfg).corpus.n_eff == 4
    assert build_config(file=f, strict=False).strict is False  # the option wins
    f = write(tmp_path, "strict = false\nmin-support = 2\n", "b.toml")
    assert build_config(file=f).strict is False
    assert build_config(file=f, strict=True).strict is True


def test_config_file_values_and_option_precedence(tmp_path: Path) -> None:
    f = write(
        tmp_path,
        'max-stress = { rope = 0.4, "alibi:heads=4" = 0.2 }\n'
        'max-rank-for-stress = { "0.1" = 8, "0.05" = 12 }\n'
        "min-positional-info = 0.25\nmin-support = 7\n"
        'tokenizer = "gpt2"\nview = "docs"\ncolumn = "text"\npad-token = "<pad>"\nmax-len = 64\n',
    )
    cfg = build_config(file=f)
    assert cfg.max_stress == {"rope": 0.4, "alibi:heads=4": 0.2}
    assert cfg.max_rank_for_stress == {0.1: 8, 0.05: 12}
    assert (cfg.min_positional_info, cfg.min_support) == (0.25, 7)
    assert dict(cfg.reading) == {
        "column": "text",
        "tokenizer": "gpt2",
        "view": "docs",
        "max_len": 64,
        "pad_token": "<pad>",
    }
    cfg = build_config(
        file=f,
        encodings=["rope"],
        max_stress=[0.9],
        max_rank_for_stress=["0.1:3"],
        min_positional_info=0.5,
        min_support=9,
        reading={"view": "lines", "tokenizer": None},
    )
    assert cfg.max_stress == {"rope": 0.9, "alibi:heads=4": 0.2}
    assert cfg.max_rank_for_stress == {0.1: 3, 0.05: 12}
    assert (cfg.min_positional_info, cfg.min_support) == (0.5, 9)
    assert cfg.reading["view"] == "lines" and cfg.reading["tokenizer"] == "gpt2"
    f = write(tmp_path, 'max-rank-for-stress = ["0.2:5"]\n', "c.toml")
    assert build_config(file=f).max_rank_for_stress == {0.2: 5}


@pytest.mark.parametrize(
    "text,message",
    [
        ("max-stress = 0.5\n", "'max-stress' must be a table of encoding = threshold "
         "(e.g. max-stress = { rope = 0.5 }); got 0.5"),
        ("max-stress = { rope = 2 }\n", "'max-stress rope' must be a float in [0, 1]; got 2"),
        ("max-rank-for-stress = 3\n", "'max-rank-for-stress' must be a table (e.g. "
         '{ "0.1" = 8 }) or a list of "EPS:RANK" strings; got 3'),
        ('max-rank-for-stress = { "0.1" = 0 }\n',
         "'max-rank-for-stress rank' must be an int in [1, inf]; got 0"),
        ("min-positional-info = -1\n", "'min-positional-info' must be a float in [0, inf]; got -1"),
        ("min-support = 0\n", "'min-support' must be an int in [1, inf]; got 0"),
        ('strict = "yes"\n', "'strict' must be true or false; got 'yes'"),
        ("min-count = 0\nmin-support = 1\n", "'min-count' must be an int in [1, inf]; got 0"),
        ("max-len = 1.5\nmin-support = 1\n", "'max-len' must be an int in [1, inf]; got 1.5"),
        ("tokenizer = 3\nmin-support = 1\n", "'tokenizer' must be a string; got 3"),
        ("column = true\nmin-support = 1\n", "'column' must be a string; got True"),
    ],
)  # fmt: skip
def test_config_file_value_errors_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    f = write(tmp_path, text)
    with pytest.raises(PosdiagError) as exc:
        build_config(file=f)
    assert str(exc.value) == f"{f}: {message}"


def test_load_config_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    cases = [(missing, f"{missing}: no such config file")]
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe = 1\n")
    cases.append((bad, f"{bad}: not UTF-8 text"))
    unknown = write(tmp_path, "colour = 1\n", "u.toml")
    cases.append(
        (
            unknown,
            f"{unknown}: unknown key 'colour'; keys: max-stress, max-rank-for-stress, "
            "min-positional-info, min-support, strict, column, tokenizer, view, max-len, "
            "min-count, pad-token",
        )
    )
    sub = tmp_path / "sub"
    sub.mkdir()
    py = write(sub, "[tool.other]\nx = 1\n", "pyproject.toml")
    cases.append((py, f"{py}: has no [tool.posdiag] table"))
    sub2 = tmp_path / "sub2"
    sub2.mkdir()
    py2 = write(sub2, 'tool = "x"\n', "pyproject.toml")
    cases.append((py2, f"{py2}: has no [tool.posdiag] table"))
    for path, message in cases:
        with pytest.raises(PosdiagError) as exc:
            load_config(path)
        assert str(exc.value) == message
    broken = write(tmp_path, "x = = 1\n", "broken.toml")
    with pytest.raises(PosdiagError) as exc:
        load_config(broken)
    assert str(exc.value).startswith(f"{broken}:1:5: not valid TOML (")


def test_load_config_reads_pyproject_table(tmp_path: Path) -> None:
    py = write(tmp_path, "[tool.posdiag]\nmin-support = 3\n[tool.other]\nx = 1\n", "pyproject.toml")
    assert load_config(py) == {"min-support": 3}
    other = write(tmp_path, "min-support = 4\n", "elsewhere.toml")
    assert load_config(other) == {"min-support": 4}


def test_find_config_order_and_misses(tmp_path: Path) -> None:
    # Each folder is its own repository root, so the upward search stops there.
    (tmp_path / ".git").mkdir()
    assert find_config(tmp_path) is None
    write(tmp_path, "[project]\nname = 'x'\n", "pyproject.toml")
    assert find_config(tmp_path) is None
    write(tmp_path, "[tool.posdiag]\nmin-support = 1\n", "pyproject.toml")
    assert find_config(tmp_path) == tmp_path / "pyproject.toml"
    write(tmp_path, "min-support = 2\n", "posdiag.toml")
    assert find_config(tmp_path) == tmp_path / "posdiag.toml"
    broken = tmp_path / "b"
    (broken / ".git").mkdir(parents=True)
    write(broken, "[tool.posdiag\n", "pyproject.toml")
    # A broken file that would be used is an error, never a silent skip (issue 12).
    with pytest.raises(PosdiagError, match=r"pyproject.toml:1:14: not valid TOML"):
        find_config(broken)
    toolstr = tmp_path / "c"
    (toolstr / ".git").mkdir(parents=True)
    write(toolstr, 'tool = "posdiag"\n', "pyproject.toml")
    assert find_config(toolstr) is None


def test_find_config_defaults_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "min-support = 2\n")
    monkeypatch.chdir(tmp_path)
    assert find_config() == Path("posdiag.toml")


def test_rank_rule_splits_at_the_first_colon() -> None:
    with pytest.raises(PosdiagError) as exc:
        build_config(max_rank_for_stress=["0.1:3:4"])
    assert str(exc.value) == "'max-rank-for-stress rank' must be an int in [1, inf]; got '3:4'"


def test_run_gate_passes_scores_and_seed_on() -> None:
    cfg = build_config(encodings=["alibi"], max_stress=[0.5], reading={"min_count": 10})
    given = EncodingScore("alibi", {}, 0.75, 0.0, 0.0, 0.0, 0)
    (r,) = run_gate(counts(), cfg, scores={"alibi": given}).results
    assert (r.figure, r.passed) == (0.75, False)
    rng = np.random.default_rng(2)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(4, 6))) for _ in range(4))
    sharded = ShardedCounts(counts(sum(s.toarray() for s in shards)), shards)
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    (r,) = run_gate(sharded, cfg, replicates=20).results
    ref = measure(sharded, cfg, replicates=20, seed=0).scores["alibi"]
    other = measure(sharded, cfg, replicates=20, seed=1).scores["alibi"]
    assert r.note == f"interval [{ref.ci_low:.4f}, {ref.ci_high:.4f}]"
    assert (ref.ci_low, ref.ci_high) != (other.ci_low, other.ci_high)


def test_run_gate_passes_level_and_progress_on() -> None:
    rng = np.random.default_rng(3)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(4, 6))) for _ in range(4))
    sharded = ShardedCounts(counts(sum(s.toarray() for s in shards)), shards)
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    calls: list[tuple[int, int]] = []
    (r,) = run_gate(
        sharded, cfg, replicates=12, seed=4, level=0.5, progress=lambda d, t: calls.append((d, t))
    ).results
    ref = measure(sharded, cfg, replicates=12, seed=4, level=0.5).scores["alibi"]
    wide = measure(sharded, cfg, replicates=12, seed=4, level=0.99).scores["alibi"]
    assert r.note == f"interval [{ref.ci_low:.4f}, {ref.ci_high:.4f}]"
    assert wide.ci_high - wide.ci_low > ref.ci_high - ref.ci_low
    assert calls and calls[-1] == (12, 12)


def test_scores_without_interval_fields_are_judged_on_the_stress() -> None:
    from types import SimpleNamespace

    corpus = measure(counts(), build_config(min_support=1)).corpus
    facts = GateFacts(corpus, {"rope": SimpleNamespace(stress=0.3)}, (), 0.0)
    for strict in (False, True):
        cfg = GateConfig(max_stress={"rope": 0.25}, strict=strict)
        (r,) = evaluate(cfg, facts).results
        assert (r.figure, r.measure, r.passed) == (0.3, "stress", False)
    assert r.note == "strict: no confidence interval was available; judged on the stress"


def test_mds_keys() -> None:
    cfg = build_config(encodings=["mds", "mds-3", "mds:rank=3"], max_stress=[0.5])
    assert cfg.max_stress == {"mds": 0.5, "mds-3": 0.5}


def test_rank_rule_on_two_and_one_eigenvalues() -> None:
    corpus = measure(counts(), build_config(min_support=1)).corpus
    cfg = build_config(max_rank_for_stress=["0.5:1"])
    (r,) = evaluate(cfg, GateFacts(corpus, {}, (2.0, 1.0), 0.0)).results
    assert (r.figure, r.passed) == (1.0, True)  # n = 2: rank 1 is the only rank
    (r,) = evaluate(cfg, GateFacts(corpus, {}, (2.0,), 0.0)).results
    assert (r.figure, r.passed) == (0.0, True)


def test_report_carries_strict_source_and_empty_targets(tmp_path: Path) -> None:
    f = write(tmp_path, "strict = true\nmin-support = 1\nmin-positional-info = 0\n")
    cfg = build_config(file=f)
    report = evaluate(cfg, measure(counts(), cfg, min_count=10))
    assert (report.strict, report.config_file) == (True, str(f))
    assert [(r.rule, r.target, r.id) for r in report.results] == [
        ("min-positional-info", "", "min-positional-info"),
        ("min-support", "", "min-support"),
    ]
    assert [r.comparison for r in report.results] == [">=", ">="]


def sharded_counts(k: int, seed: int = 5) -> ShardedCounts:
    rng = np.random.default_rng(seed)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(5, 7))) for _ in range(k))
    return ShardedCounts(counts(sum(s.toarray() for s in shards)), shards)


def test_measure_intervals_from_two_shards_with_the_default_seed() -> None:
    # Two shards are enough for plug-in intervals (the cross-fit needs four).
    sharded = sharded_counts(2)
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    s = measure(sharded, cfg, replicates=16, estimator="plugin").scores["alibi"]
    ref = measure(sharded, cfg, replicates=16, seed=0, estimator="plugin").scores["alibi"]
    assert not math.isnan(s.ci_high) and (s.ci_low, s.ci_high) == (ref.ci_low, ref.ci_high)


def test_measure_intervals_use_the_encoding_parameters_and_the_corpus_mds() -> None:
    # kerple-power with p = 2 is the line |i - j|, the same distances as alibi: same intervals
    # under the same seed (its default p = 1 would be sqrt|i - j|).
    sharded = sharded_counts(4)
    cfg = build_config(
        encodings=["alibi", "kerple-power:p=2", "mds-1"],
        max_stress=[1.0],
        reading={"min_count": 1},
    )
    scores = measure(sharded, cfg, replicates=16, seed=2).scores
    line, kp = scores["alibi"], scores["kerple-power:p=2.0"]
    assert kp.stress == pytest.approx(line.stress, rel=1e-12)
    assert (kp.ci_low, kp.ci_high) == pytest.approx((line.ci_low, line.ci_high), rel=1e-12)
    assert 0.0 <= scores["mds-1"].ci_low <= scores["mds-1"].ci_high <= 1.0


def test_run_gate_passes_the_estimator_on() -> None:
    sharded = sharded_counts(4, seed=8)
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    for estimator in ("plugin", "crossfit"):
        (r,) = run_gate(sharded, cfg, replicates=8, estimator=estimator).results
        ref = measure(sharded, cfg, replicates=8, estimator=estimator).scores["alibi"]
        assert r.figure == ref.stress
    plug = measure(sharded, cfg, replicates=8, estimator="plugin").scores["alibi"].stress
    cross = measure(sharded, cfg, replicates=8).scores["alibi"].stress  # the default
    assert plug != cross


def test_rank_below_the_floor_is_not_reached_and_names_the_floor() -> None:
    # Hand values: eigenvalues (4, 2, 1, 0, -1): floor sqrt(1 / 22) = 0.2132, above eps = 0.1.
    lam = (4.0, 2.0, 1.0, 0.0, -1.0)
    facts = GateFacts(measure(counts(), build_config(min_support=1)).corpus, {}, lam, 0.0)
    (r,) = evaluate(build_config(max_rank_for_stress=["0.1:4"]), facts).results
    assert (r.figure, r.passed) == (math.inf, False)
    assert r.note == (
        "smallest rank whose MDS encoding has stress <= 0.1: not reached (floor "
        f"{math.sqrt(1 / 22):.3f})"
    )
    assert f"{math.sqrt(1 / 22):.3f}" == "0.213"
