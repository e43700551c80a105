"""The model view pads every sequence to max_len: supports are flat there, so posdiag counts real
(non-pad) tokens for min_count and check --min-support, reports the real-token share per
position, and warns when positions are pad-only or nearly so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.counts.core import load_counts, save_counts
from posdiag.counts.corpus import corpus_counts
from posdiag.reports.analysis import corpus_summary

runner = CliRunner()


def _corpus(path: Path, lengths: list[int], seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    words = [f"w{k}" for k in range(40)]
    lines = [" ".join(rng.choice(words, size=n)) for n in lengths]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _real_by_brute_force(lengths: list[int], n: int) -> np.ndarray:
    """[CLS] text [SEP] cut to n: position i holds a real token iff min(len + 2, n) > i."""
    seq = np.minimum(np.asarray(lengths) + 2, n)
    return np.array([(seq > i).sum() for i in range(n)])


@pytest.fixture
def short(tmp_path: Path) -> tuple[Path, list[int]]:
    rng = np.random.default_rng(3)
    lengths = [int(x) for x in rng.integers(1, 6, size=400)]  # at most 5 words: 7 tokens
    return _corpus(tmp_path / "short.txt", lengths), lengths


def test_min_count_counts_real_tokens_in_the_model_view(short: tuple[Path, list[int]]) -> None:
    path, lengths = short
    counts = corpus_counts(str(path), view_name="model", max_len=16)
    assert counts.pad_id == 0
    # Every sequence reaches every position: the flat supports that hid the padding.
    assert counts.supports.tolist() == [400] * 16
    real = _real_by_brute_force(lengths, 16)
    assert counts.real_supports.tolist() == real.tolist()
    s = corpus_summary(counts, min_count=10)
    assert s.support_unit == "real tokens"
    assert s.n_eff == int(np.flatnonzero(real < 10)[0])
    assert s.n_eff <= 7
    assert s.real_share[0] == 1.0 and s.real_share[15] == 0.0
    # The text view counts sequences, as before.
    text = corpus_summary(corpus_counts(str(path), max_len=16), min_count=10)
    assert text.support_unit == "sequences" and text.real_supports == ()
    # The pad id survives a counts file.
    out = path.with_suffix(".npz")
    save_counts(counts, out)
    assert load_counts(out).real_supports.tolist() == real.tolist()


def test_pad_only_positions_are_named_in_a_warning(short: tuple[Path, list[int]]) -> None:
    path, lengths = short
    r = runner.invoke(
        app, ["stress", str(path), "--view", "model", "-n", "16", "--min-count", "10", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    real = _real_by_brute_force(lengths, 16)
    assert doc["corpus"]["real_supports"] == real.tolist()
    # The per-position real-token share, in the JSON too.
    assert doc["corpus"]["real_share"] == pytest.approx((real / 400).tolist())
    assert doc["corpus"]["n_eff"] == int(np.flatnonzero(real < 10)[0])
    # Positions 7..15 hold only [PAD]: before the fix, n_eff was 16 and nothing was said.
    assert "positions 7-15 hold only padding in every sequence" in doc["warnings"][0]
    assert "positions 7-15 hold only padding" in r.stderr


def test_nearly_pad_only_positions_warn(tmp_path: Path) -> None:
    lengths = [3] * 980 + [10] * 20  # positions 5..11: 20 real tokens of 1,000 (2%)
    path = _corpus(tmp_path / "c.txt", lengths)
    r = runner.invoke(
        app, ["stress", str(path), "--view", "model", "-n", "12", "--min-count", "10", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["corpus"]["n_eff"] == 12
    (w,) = [w for w in doc["warnings"] if "padding" in w]
    assert "positions 5-11 are analysed but over 95% padding" in w
    assert "use --max-len 5" in w


def test_check_min_support_counts_real_tokens(short: tuple[Path, list[int]]) -> None:
    path, lengths = short
    args = ["check", str(path), "--no-config", "--view", "model", "-n", "16"]
    r = runner.invoke(app, [*args, "--min-support", "1"])
    assert r.exit_code == 1
    assert "FAIL  min-support: smallest support 0 real tokens < 1 real tokens (at position 7" in (
        r.stdout
    )
    real = _real_by_brute_force(lengths, 7)
    r = runner.invoke(app, [*args[:-1], "7", "--min-support", str(int(real.min()))])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("command", ["stress", "check"])
def test_help_says_what_min_count_counts(command: str) -> None:
    r = runner.invoke(app, [command, "--help"], terminal_width=250, env={"COLUMNS": "250"})
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.stdout).split())
    assert "(--view model: fewer real, non-pad tokens)" in text
    if command == "check":
        assert "real (non-pad) tokens with --view model" in text
