"""posdiag check: rules, exit codes, config precedence, JUnit and GitHub output."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

from posdiag.counts.corpus import corpus_counts
from posdiag.errors import PosdiagError
from posdiag.render.gate import github_annotations, junit_xml, rule_line
from posdiag.reports.analysis import corpus_geometry, score_encodings
from posdiag.reports.gate import (
    GateConfig,
    GateFacts,
    build_config,
    evaluate,
    find_config,
    measure,
)


@pytest.fixture
def rope_stress(synth_corpus: Path) -> float:
    # Counted with the shards 'check' counts (same seed): the same cross-fitted geometry.
    geo = corpus_geometry(corpus_counts(str(synth_corpus), shards=20, shard_seed=0))
    return score_encodings(geo, ["rope"])[0].stress


def _run(cli: Callable[..., Result], *args: str) -> tuple[int, str, str]:
    res = cli(["check", *args])
    return res.exit_code, res.stdout, res.stderr


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
    code, _, _ = _run(
        cli,
        str(synth_corpus),
        "--no-config",
        "--junit",
        str(out_file),
        "-e",
        "rope",
        "-e",
        "nope",
        "--max-stress",
        f"{rope_stress + 0.01}",
        "--max-stress",
        "0.5",
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
    code, _, _ = _run(
        cli,
        str(synth_corpus),
        "--no-config",
        "--junit",
        str(out_file),
        "--min-support",
        "1",
        "-n",
        "12",
    )
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
        "-e",
        "rope",
        "-e",
        "nope",
        "--max-stress",
        f"{rope_stress + 0.01}",
        "--max-stress",
        "0.5",
    )
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("::notice title=posdiag max-stress[rope]::PASS  max-stress[rope]")
    assert lines[1].startswith("::error title=posdiag max-stress[nope]::FAIL  max-stress[nope]")
    assert lines[2].startswith("::error::1 passed, 1 failed of 2 rules")


def _facts_with_interval(synth_corpus: Path, ci_high: float) -> tuple[GateConfig, GateFacts]:
    import dataclasses

    cfg = build_config(encodings=["rope"], max_stress=[0.9])
    counts = corpus_counts(str(synth_corpus))
    s = measure(counts, cfg).scores["rope"]
    scored = dataclasses.replace(s, ci_low=s.stress - 0.01, ci_high=ci_high)
    # Precomputed scores (as the bootstrap would give them) are used as they are.
    facts = measure(counts, cfg, scores={"rope:": scored})
    assert facts.scores["rope"] is scored
    return cfg, facts


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
    from posdiag.reports.analysis import stress_report
    from posdiag.uncertainty.bootstrap import corpus_counts_sharded

    sharded = corpus_counts_sharded(str(synth_corpus), shards=10, seed=0)
    ref = stress_report(sharded, ["rope"], replicates=50, seed=0).encodings[0]
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
