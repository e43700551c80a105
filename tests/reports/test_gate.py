"""posdiag check: rules, exit codes, config precedence, JUnit and GitHub output."""

from __future__ import annotations

import dataclasses
import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import Result

from posdiag.counts.core import Counts
from posdiag.counts.corpus import corpus_counts
from posdiag.errors import PosdiagError
from posdiag.render.gate import github_annotations, junit_xml, rule_line
from posdiag.reports.analysis import corpus_geometry
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
from posdiag.reports.options import Analysis
from posdiag.reports.scores import score_encodings


@pytest.fixture
def rope_stress(synth_corpus: Path) -> float:
    # Counted with the shards 'check' counts (same seed): the same cross-fitted geometry.
    geo = corpus_geometry(corpus_counts(str(synth_corpus), shards=20, shard_seed=0))
    return score_encodings(geo, ["rope"])[0].stress


def _run(cli: Callable[..., Result], *args: str) -> tuple[int, str, str]:
    res = cli(["check", *args])
    return res.exit_code, res.stdout, res.stderr


def _rope_passes_nope_fails(rope_stress: float) -> tuple[str, ...]:
    """Two max-stress rules: rope's just above its stress, nope's (stress 1) at 0.5."""
    return (
        "-e",
        "rope",
        "-e",
        "nope",
        "--max-stress",
        f"{rope_stress + 0.01}",
        "--max-stress",
        "0.5",
    )


def test_exit_0_when_every_rule_passes(
    cli: Callable[..., Result], synth_corpus: Path, rope_stress: float
) -> None:
    code, out, _ = _run(
        cli, str(synth_corpus), "--no-config", "-e", "rope", "--max-stress", f"{rope_stress + 0.01}"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith("PASS  max-stress[rope]: stress ")
    assert f"{rope_stress:.4f} <= {rope_stress + 0.01:.4f}" in lines[1]
    assert lines[-1] == "1 passed, 0 failed of 1 rule"


def test_exit_1_when_a_rule_fails(
    cli: Callable[..., Result], synth_corpus: Path, rope_stress: float
) -> None:
    code, out, _ = _run(
        cli,
        str(synth_corpus),
        "--no-config",
        "-e",
        "rope",
        "--max-stress",
        f"{rope_stress + 0.01}",
        "-e",
        "sinusoidal",
        "--max-stress",
        "0.0001",
    )
    assert code == 1
    assert "FAIL  max-stress[sinusoidal]: stress " in out
    assert "PASS  max-stress[rope]" in out
    assert out.splitlines()[-1] == "1 passed, 1 failed of 2 rules"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "Error: no rules to check: give --encoding NAME --max-stress X"),
        (("-e", "rope"), "Error: '--encoding rope' needs a threshold: add --max-stress"),
        (("--max-stress", "0.5"), "Error: '--max-stress' needs the encoding it applies to"),
        (
            ("-e", "rope", "-e", "t5", "-e", "nope", "--max-stress", "0.5", "--max-stress", "1"),
            "Error: '--max-stress' must be given once or once per --encoding (3); got 2",
        ),
        (("-e", "rope", "--max-stress", "1.5"), "'max-stress rope' must be a float in [0, 1]"),
        (("-e", "ropy", "--max-stress", "0.5"), "Error: unknown encoding 'ropy'"),
        (
            ("--max-rank-for-stress", "0.1"),
            "Error: 'max-rank-for-stress' must look like EPS:RANK (e.g. 0.1:8); got '0.1'",
        ),
        (
            ("--max-rank-for-stress", "0.1:0"),
            "Error: 'max-rank-for-stress rank' must be an int in [1, inf]; got 0",
        ),
        (
            ("--max-rank-for-stress", "2:3"),
            "Error: 'max-rank-for-stress stress' must be a float in [0, 1]; got 2.0",
        ),
        (("--min-support", "0"), "Error: 'min-support' must be an int in [1, inf]; got 0"),
        (("--min-positional-info", "-1"), "'min-positional-info' must be a float in [0, inf]"),
        (("--min-support", "5", "--format", "gitlab"), "'format' must be one of text, github"),
    ],
)
def test_exit_2_on_invalid_rules(
    cli: Callable[..., Result], synth_corpus: Path, args: tuple[str, ...], message: str
) -> None:
    code, out, err = _run(cli, str(synth_corpus), "--no-config", *args)
    assert code == 2
    assert message in err
    assert out == ""


def test_exit_2_on_data_error(cli: Callable[..., Result], tmp_path: Path) -> None:
    code, _, err = _run(cli, str(tmp_path / "missing.txt"), "--no-config", "--min-support", "1")
    assert code == 2
    assert err.strip() == f"Error: {tmp_path / 'missing.txt'}: no such file"


def test_figures_match_independent_computations(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    code, out, _ = _run(
        cli,
        str(synth_corpus),
        "--no-config",
        "--json",
        "--max-len",
        "16",
        "--min-count",
        "50",
        "--max-rank-for-stress",
        "0.05:3",
        "--min-positional-info",
        "0",
        "--min-support",
        "1",
    )
    doc = json.loads(out)
    rules = {r["id"]: r for r in doc["rules"]}
    # Brute force from the text: dense counts per position, whitespace tokens.
    lines = [ln.split() for ln in synth_corpus.read_text().splitlines() if ln.strip()]
    vocab = sorted({w for ln in lines for w in ln})
    idx = {w: k for k, w in enumerate(vocab)}
    c = np.zeros((16, len(vocab)))
    for ln in lines:
        for i, w in enumerate(ln[:16]):
            c[i, idx[w]] += 1
    supports = c.sum(axis=1)
    assert rules["min-support"]["figure"] == supports.min() == 0  # the lines have 12 tokens
    assert code == 1 and not rules["min-support"]["passed"]
    n_eff = int(np.argmax(supports < 50))
    mu = c[:n_eff] / supports[:n_eff, None]
    pooled = c[:n_eff].sum(axis=0) / supports[:n_eff].sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.nansum(np.where(mu > 0, mu * np.log2(mu / pooled), 0.0), axis=1)
    info = float(np.sum(supports[:n_eff] / supports[:n_eff].sum() * kl))
    assert rules["min-positional-info"]["figure"] == pytest.approx(info, rel=1e-10)
    # Effective rank from the Torgerson eigenvalues of squared Hellinger distances.
    s = np.sqrt(mu)
    d2 = np.clip(1.0 - s @ s.T, 0.0, 1.0)
    j = np.eye(n_eff) - 1.0 / n_eff
    lam = np.sort(np.linalg.eigvalsh(-0.5 * j @ d2 @ j))[::-1]
    tail = np.array([np.sum(lam[r:] ** 2) for r in range(1, n_eff)]) / np.sum(lam**2)
    rank = int(np.argmax(np.sqrt(tail) <= 0.05)) + 1
    assert rules["max-rank-for-stress[0.05]"]["figure"] == rank
    assert rules["max-rank-for-stress[0.05]"]["passed"] == (rank <= 3)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_config_file_found_in_cwd_and_options_override_it(
    cli: Callable[..., Result],
    synth_corpus: Path,
    rope_stress: float,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.posdiag]\n'
        f"max-stress = {{ rope = {rope_stress - 0.01}, nope = 1.0 }}\n",
    )
    assert find_config(tmp_path) == tmp_path / "pyproject.toml"
    code, out, _ = _run(cli, str(synth_corpus))
    assert code == 1
    assert "FAIL  max-stress[rope]" in out and "PASS  max-stress[nope]" in out
    assert "rules from pyproject.toml" in out.splitlines()[0]
    # The option overrides the file's rope threshold and keeps its nope rule.
    code, out, _ = _run(
        cli, str(synth_corpus), "-e", "rope", "--max-stress", f"{rope_stress + 0.01}"
    )
    assert code == 0
    assert "PASS  max-stress[rope]" in out and "PASS  max-stress[nope]" in out
    # posdiag.toml takes precedence over pyproject.toml.
    _write(tmp_path / "posdiag.toml", "min-support = 601\nmax-len = 12\n")
    code, out, _ = _run(cli, str(synth_corpus))
    assert code == 1
    assert "FAIL  min-support: smallest support 600 sequences < 601 sequences" in out
    assert "max-stress" not in out
    # --min-support on the command line overrides the file's value.
    code, out, _ = _run(cli, str(synth_corpus), "--min-support", "600")
    assert code == 0
    # --no-config ignores both files.
    code, _, err = _run(cli, str(synth_corpus), "--no-config")
    assert code == 2 and "no rules to check" in err


def test_config_reading_options_and_precedence(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    cfg = _write(tmp_path / "gate.toml", 'max-len = 8\nmin-count = 50\nview = "text"\n')
    c = build_config(file=cfg, min_support=1, reading={"max_len": 10, "view": None})
    assert dict(c.reading) == {"max_len": 10, "min_count": 50, "view": "text"}
    code, out, _ = _run(
        cli, str(synth_corpus), "--config", str(cfg), "--min-support", "1", "--json"
    )
    assert code == 0
    assert json.loads(out)["corpus"]["max_len"] == 8
    assert json.loads(out)["corpus"]["min_count"] == 50


def test_config_rank_rules_table_or_list_and_cli_override(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.toml", 'max-rank-for-stress = { "0.1" = 8, "0.05" = 12 }\n')
    b = _write(tmp_path / "b.toml", 'max-rank-for-stress = ["0.1:8", "0.05:12"]\n')
    assert build_config(file=a).max_rank_for_stress == build_config(file=b).max_rank_for_stress
    c = build_config(file=a, max_rank_for_stress=["0.1:3"])
    assert dict(c.max_rank_for_stress) == {0.1: 3, 0.05: 12}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_stress = 1\n", "unknown key 'max_stress'; keys: max-stress,"),
        ("max-stress = 0.5\n", "'max-stress' must be a table of encoding = threshold"),
        ("max-stress = { rope = 2 }\n", "'max-stress rope' must be a float in [0, 1]; got 2"),
        ("strict = 1\n", "'strict' must be true or false; got 1"),
        ("min-support = 1\ntokenizer = 5\n", "'tokenizer' must be a string; got 5"),
        ("min-support = 1\nmax-len = 0\n", "'max-len' must be an int in [1, inf]; got 0"),
        ("min-support = [\n", "not valid TOML"),
        ('max-rank-for-stress = ["0.1"]\n', "must look like EPS:RANK (e.g. 0.1:8); got '0.1'"),
    ],
)
def test_bad_config_files_exit_2(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path, text: str, message: str
) -> None:
    cfg = _write(tmp_path / "posdiag.toml", text)
    code, _, err = _run(cli, str(synth_corpus), "--config", str(cfg))
    assert code == 2
    # A TOML error also gives line:column after the file name.
    assert err.startswith((f"Error: {cfg}: ", f"Error: {cfg}:1:")) and message in err


def test_pyproject_without_posdiag_table(tmp_path: Path) -> None:
    py = _write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n')
    assert find_config(tmp_path) is None
    with pytest.raises(PosdiagError, match=r"has no \[tool.posdiag\] table"):
        build_config(file=py)


def test_junit_xml_one_case_per_rule_with_failures(
    cli: Callable[..., Result], synth_corpus: Path, rope_stress: float, tmp_path: Path
) -> None:
    out_file = tmp_path / "junit.xml"
    junit = (str(synth_corpus), "--no-config", "--junit", str(out_file))
    code, _, _ = _run(
        cli,
        *junit,
        *_rope_passes_nope_fails(rope_stress),
        "--min-support",
        "601",
        "--min-positional-info",
        "0",
    )
    assert code == 1
    root = ET.fromstring(out_file.read_bytes())
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    names = [c.get("name") for c in cases]
    assert names == ["max-stress[rope]", "max-stress[nope]", "min-positional-info", "min-support"]
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["max-stress[nope]", "min-support"]
    assert suite.get("tests") == "4" and suite.get("failures") == "2"
    # An existing report is replaced, as pytest's --junitxml does (tests/render/test_ci_outputs.py).
    code, _, _ = _run(cli, *junit, "--min-support", "1", "-n", "12")
    assert code == 0
    assert ET.fromstring(out_file.read_bytes()).find("testsuite").get("failures") == "0"  # type: ignore[union-attr]


def test_github_format_annotations(
    cli: Callable[..., Result], synth_corpus: Path, rope_stress: float
) -> None:
    code, out, _ = _run(
        cli,
        str(synth_corpus),
        "--no-config",
        "--format",
        "github",
        *_rope_passes_nope_fails(rope_stress),
    )
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("::notice title=posdiag max-stress[rope]::PASS  max-stress[rope]")
    assert lines[1].startswith("::error title=posdiag max-stress[nope]::FAIL  max-stress[nope]")
    assert lines[2].startswith("::error::1 passed, 1 failed of 2 rules")


def _facts_with_interval(synth_corpus: Path, ci_high: float) -> tuple[GateConfig, GateFacts]:
    import dataclasses

    cfg = build_config(encodings=["rope"], max_stress=[0.9])
    facts = measure(corpus_counts(str(synth_corpus)), cfg)
    s = facts.scores["rope"]
    # The interval a bootstrap would give.
    scored = dataclasses.replace(s, ci_low=s.stress - 0.01, ci_high=ci_high)
    return cfg, dataclasses.replace(facts, scores={"rope": scored})


def test_strict_judges_the_upper_bound(synth_corpus: Path) -> None:
    cfg, facts = _facts_with_interval(synth_corpus, ci_high=0.95)
    s = facts.scores["rope"].stress
    assert s < 0.9  # the plain rule passes on this corpus ...
    plain = evaluate(cfg, facts)
    strict = evaluate(replace(cfg, strict=True), facts)
    assert plain.passed
    assert not strict.passed  # ... the strict one fails on the upper bound
    r = strict.results[0]
    assert r.figure == 0.95 and r.measure == "stress upper bound"
    assert rule_line(r) == (
        f"FAIL  max-stress[rope]: stress upper bound 0.9500 > 0.9000 "
        f"(strict; stress {s:.4f}, interval [{s - 0.01:.4f}, 0.9500])"
    )
    _, facts = _facts_with_interval(synth_corpus, ci_high=0.89)
    assert evaluate(replace(cfg, strict=True), facts).passed


def test_strict_without_interval_says_so(cli: Callable[..., Result], synth_corpus: Path) -> None:
    cfg, facts = _facts_with_interval(synth_corpus, ci_high=math.nan)
    r = evaluate(replace(cfg, strict=True), facts).results[0]
    assert r.passed == evaluate(cfg, facts).results[0].passed
    assert r.note == "strict: no confidence interval was available; judged on the stress"
    code, out, _ = _run(
        cli,
        str(synth_corpus),
        "--no-config",
        "--strict",
        "--shards",
        "0",
        "-e",
        "rope",
        "--max-stress",
        "1",
    )
    assert code == 0 and "no confidence interval was available" in out


def test_check_computes_bootstrap_intervals_for_strict(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    from posdiag.reports.stress import stress_report
    from posdiag.uncertainty.bootstrap import corpus_counts_sharded

    sharded = corpus_counts_sharded(str(synth_corpus), shards=10, seed=0)
    ref = stress_report(sharded, ["rope"], analysis=Analysis(seed=0, replicates=50)).encodings[0]
    args = [
        "--no-config",
        "-e",
        "rope",
        "--max-stress",
        "1",
        "--shards",
        "10",
        "--replicates",
        "50",
    ]
    code, out, _ = _run(cli, str(synth_corpus), *args, "--strict")
    assert code == 0
    assert out.splitlines()[1] == (
        f"PASS  max-stress[rope]: stress upper bound {ref.ci_high:.4f} <= 1.0000 "
        f"(strict; stress {ref.stress:.4f}, interval [{ref.ci_low:.4f}, {ref.ci_high:.4f}])"
    )
    thr = (ref.stress + ref.ci_high) / 2  # between the estimate and its upper bound
    assert _run(cli, str(synth_corpus), *args[:3], "--max-stress", f"{thr}", *args[5:])[0] == 0
    assert (
        _run(cli, str(synth_corpus), *args[:3], "--max-stress", f"{thr}", *args[5:], "--strict")[0]
        == 1
    )


def test_github_escapes_and_junit_of_report(synth_corpus: Path) -> None:
    cfg = build_config(encodings=["rope:base=500"], max_stress=[0.0])
    facts = measure(corpus_counts(str(synth_corpus)), cfg)
    report = evaluate(cfg, facts)
    ann = github_annotations(report)[0]
    # ':' and ',' are escaped in the title property, '%' in the message.
    assert ann.startswith("::error title=posdiag max-stress[rope%3Abase=500.0]::FAIL")
    root = ET.fromstring(junit_xml(report))
    assert [c.get("name") for c in root.iter("testcase")] == ["max-stress[rope:base=500.0]"]


def test_documented_config_example_is_valid(repo_root: Path, tmp_path: Path) -> None:
    """The config file example of docs/cli.md (moved there from the README) parses as documented."""
    cli_md = (repo_root / "docs" / "cli.md").read_text(encoding="utf-8")
    block = cli_md.split("## Use in CI", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    cfg = build_config(file=_write(tmp_path / "pyproject.toml", block))
    assert dict(cfg.max_stress) == {"rope": 0.85, "sinusoidal:d=768": 0.85}
    assert dict(cfg.max_rank_for_stress) == {0.1: 70}
    assert cfg.min_positional_info == 0.5 and cfg.min_support == 100 and not cfg.strict
    assert dict(cfg.reading) == {
        "tokenizer": "whitespace",
        "view": "text",
        "max_len": 64,
        "min_count": 100,
    }


def test_min_support_rule_judges_a_corpus_too_thin_for_a_geometry(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    corpus = tmp_path / "thin.txt"
    corpus.write_text("a b c\nb c a\nc a\n")
    res = cli(["check", str(corpus), "-n", "3", "--no-config", "--min-support", "10"])
    assert res.exit_code == 1, res.stderr
    assert "FAIL  min-support: smallest support 2 sequences < 10 sequences" in res.stdout


# Mutation-strength tests: reports.gate rules judged on hand-made counts, thresholds that can fail.

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
    facts = measure(counts(), cfg, analysis=Analysis(min_count=13))
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
        facts = measure(c, cfg, analysis=Analysis(estimator="plugin"))
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
    assert measure(counts(), cfg, analysis=Analysis(min_count=5)).corpus.n_eff == 5
    assert run_gate(counts(), cfg, analysis=Analysis(min_count=5)).corpus.n_eff == 5
    with pytest.raises(PosdiagError, match="fewer than 2 positions"):
        measure(counts(), build_config(encodings=["alibi"], max_stress=[1.0]))
    with pytest.raises(PosdiagError) as exc:
        measure(counts(), cfg, analysis=Analysis(min_count=0))
    assert str(exc.value) == "'min_count' must be an int in [1, inf]; got 0"


def test_sharded_counts_give_intervals_and_strict_judges_the_upper_bound() -> None:
    rng = np.random.default_rng(0)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(4, 6))) for _ in range(4))
    total = sum(s.toarray() for s in shards)
    sharded = dataclasses.replace(counts(total), shards=tuple(shards))
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    # The plug-in: a cross-fit by 4 shards of 4 x 6 counts has no geometry left (stress 1).
    facts = measure(sharded, cfg, analysis=Analysis(seed=1, replicates=30, estimator="plugin"))
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
    one = dataclasses.replace(counts(total), shards=tuple(shards[:1]))
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


def test_run_gate_passes_the_seed_on() -> None:
    rng = np.random.default_rng(2)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(4, 6))) for _ in range(4))
    sharded = dataclasses.replace(counts(sum(s.toarray() for s in shards)), shards=tuple(shards))
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    (r,) = run_gate(sharded, cfg, analysis=Analysis(replicates=20)).results
    ref = measure(sharded, cfg, analysis=Analysis(seed=0, replicates=20)).scores["alibi"]
    other = measure(sharded, cfg, analysis=Analysis(seed=1, replicates=20)).scores["alibi"]
    assert r.note == f"interval [{ref.ci_low:.4f}, {ref.ci_high:.4f}]"
    assert (ref.ci_low, ref.ci_high) != (other.ci_low, other.ci_high)


def test_run_gate_passes_level_and_progress_on() -> None:
    rng = np.random.default_rng(3)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(4, 6))) for _ in range(4))
    sharded = dataclasses.replace(counts(sum(s.toarray() for s in shards)), shards=tuple(shards))
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    calls: list[tuple[int, int]] = []
    (r,) = run_gate(
        sharded,
        cfg,
        analysis=Analysis(seed=4, level=0.5, replicates=12),
        progress=lambda d, t: calls.append((d, t)),
    ).results
    ref = measure(sharded, cfg, analysis=Analysis(seed=4, level=0.5, replicates=12)).scores["alibi"]
    wide = measure(sharded, cfg, analysis=Analysis(seed=4, level=0.99, replicates=12)).scores[
        "alibi"
    ]
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
    report = evaluate(cfg, measure(counts(), cfg, analysis=Analysis(min_count=10)))
    assert (report.strict, report.config_file) == (True, str(f))
    assert [(r.rule, r.target, r.id) for r in report.results] == [
        ("min-positional-info", "", "min-positional-info"),
        ("min-support", "", "min-support"),
    ]
    assert [r.comparison for r in report.results] == [">=", ">="]


def sharded_counts(k: int, seed: int = 5) -> Counts:
    rng = np.random.default_rng(seed)
    shards = tuple(sp.csr_matrix(rng.integers(1, 9, size=(5, 7))) for _ in range(k))
    return dataclasses.replace(counts(sum(s.toarray() for s in shards)), shards=tuple(shards))


def test_measure_intervals_from_two_shards_with_the_default_seed() -> None:
    # Two shards are enough for plug-in intervals (the cross-fit needs four).
    sharded = sharded_counts(2)
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    s = measure(sharded, cfg, analysis=Analysis(estimator="plugin", replicates=16)).scores["alibi"]
    ref = measure(
        sharded, cfg, analysis=Analysis(estimator="plugin", seed=0, replicates=16)
    ).scores["alibi"]
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
    scores = measure(sharded, cfg, analysis=Analysis(seed=2, replicates=16)).scores
    line, kp = scores["alibi"], scores["kerple-power:p=2.0"]
    assert kp.stress == pytest.approx(line.stress, rel=1e-12)
    assert (kp.ci_low, kp.ci_high) == pytest.approx((line.ci_low, line.ci_high), rel=1e-12)
    assert 0.0 <= scores["mds-1"].ci_low <= scores["mds-1"].ci_high <= 1.0


def test_run_gate_passes_the_estimator_on() -> None:
    sharded = sharded_counts(4, seed=8)
    cfg = build_config(encodings=["alibi"], max_stress=[1.0], reading={"min_count": 1})
    for estimator in ("plugin", "crossfit"):
        (r,) = run_gate(sharded, cfg, analysis=Analysis(estimator=estimator, replicates=8)).results
        ref = measure(sharded, cfg, analysis=Analysis(estimator=estimator, replicates=8)).scores[
            "alibi"
        ]
        assert r.figure == ref.stress
    plug = (
        measure(sharded, cfg, analysis=Analysis(estimator="plugin", replicates=8))
        .scores["alibi"]
        .stress
    )
    cross = (
        measure(sharded, cfg, analysis=Analysis(replicates=8)).scores["alibi"].stress
    )  # the default
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


def test_rank_rules_settled_by_reaching_the_tolerance_or_passing_the_rank() -> None:
    """The top k pairs settle a max-rank-for-stress rule when its tolerance is reached within
    them (stress <= eps, equality included) or k already exceeds its rank; otherwise more pairs
    are needed (the gate grows the Lanczos)."""
    from posdiag.reports import gate

    by_rank = np.array([0.5, 0.3, 0.2, 0.1])
    base = gate.build_config(encodings=["sinusoidal"], max_stress=[0.9])

    def settled(rules: dict[float, int], k: int) -> bool:
        return gate._rank_rules_settled(by_rank, k, replace(base, max_rank_for_stress=rules))

    assert settled({0.3: 5}, 3)  # reached at rank 2 (equal to eps), though k <= rank
    assert not settled({0.05: 3}, 3)  # not reached and k == rank: rank + 1 is unknown
    assert settled({0.05: 2}, 3)  # not reached, but more than 2 ranks are known to miss it
    assert not settled({0.3: 5, 0.05: 5}, 3)  # every rule must be settled
    assert not settled({0.1: 5}, 3)  # rank 4 reaches 0.1, but only 3 pairs are read


def test_partial_rank_reads_reached_floor_and_more_than_k() -> None:
    """A partial spectrum's rank figure: the first rank with stress <= eps (equality counts);
    infinity when a known floor lies strictly above eps; else k + 1, "more than k"."""
    from posdiag.reports import gate

    def rank(by_rank: tuple[float, ...], floor: float | None, eps: float) -> tuple[float, str]:
        facts = gate.GateFacts(None, {}, (), 0.0, by_rank, floor)  # type: ignore[arg-type]
        return gate._partial_rank(facts, eps, "n")

    assert rank((0.5, 0.3), None, 0.3) == (2.0, "n")
    assert rank((0.5, 0.4), 0.2, 0.2) == (
        3.0,
        "n: more than 2 (only the top 2 eigenvalues were computed)",
    )
    assert rank((0.5, 0.4), 0.25, 0.2) == (math.inf, "n: not reached (floor 0.250)")
