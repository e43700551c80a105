"""Tokenizers: bytes, tokenizer.json (its own pad token), hub names offline, progress bar."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, processors
from typer.testing import CliRunner

from posdiag._cli_options import CountingBar, counting_columns
from posdiag.cli import app
from posdiag.errors import PosdiagError
from posdiag.sources import HubUnavailable
from posdiag.tokenize import load_tokenizer, view

runner = CliRunner()
WORDS = ["<unk>", "<blank>", "<s>", "</s>", "the", "cat", "sat", "on", "mat"]


def _tokenizer_json(path: Path, *, padding: bool) -> Path:
    """A word-level tokenizer with <s> ... </s> and, if ``padding``, its own pad <blank>."""
    tok = HFTokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    if padding:
        tok.enable_padding(pad_id=1, pad_token="<blank>")
    tok.save(str(path))
    return path


def test_bytes_tokenizer_is_utf8_bytes() -> None:
    tok = load_tokenizer("bytes")
    assert tok.vocab_size == 256
    assert tok.encode_batch(["é a"]) == [list("é a".encode())] == [[195, 169, 32, 97]]
    packed = [s for batch, _ in view(["ab", "c"], tok, "packed", 2) for s in batch]
    assert packed == [[97, 98], [10, 99], [10]]  # documents joined by newline, byte 10
    with pytest.raises(PosdiagError, match=r"has no pad token.*--pad-token"):
        list(view(["ab"], tok, "model", 4))
    model = load_tokenizer("bytes", pad_token="0")
    assert [s for b, _ in view(["ab", "abcdef"], model, "model", 4) for s in b] == [
        [97, 98, 0, 0],
        [97, 98, 99, 100],
    ]


def test_model_view_uses_the_tokenizers_own_pad_token(tmp_path: Path) -> None:
    own = load_tokenizer(str(_tokenizer_json(tmp_path / "own.json", padding=True)))
    seqs = [s for b, _ in view(["the cat", "the cat sat on the mat"], own, "model", 5) for s in b]
    assert seqs == [[2, 4, 5, 3, 1], [2, 4, 5, 6, 3]]
    plain = load_tokenizer(str(_tokenizer_json(tmp_path / "plain.json", padding=False)))
    with pytest.raises(PosdiagError, match=r"has no pad token .*name one with --pad-token$"):
        list(view(["the cat"], plain, "model", 5))
    named = load_tokenizer(str(tmp_path / "plain.json"), pad_token="<unk>")
    assert [s for b, _ in view(["the"], named, "model", 4) for s in b] == [[2, 4, 3, 0]]
    # Same tokenizer, different path: same fingerprint; different padding config too.
    (tmp_path / "copy.json").write_bytes((tmp_path / "plain.json").read_bytes())
    assert load_tokenizer(str(tmp_path / "copy.json")).fingerprint == plain.fingerprint


def test_hub_tokenizer_offline_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    t0 = time.perf_counter()
    with pytest.raises(HubUnavailable):
        load_tokenizer("no-such-model-xyz")
    assert time.perf_counter() - t0 < 20
    r = runner.invoke(app, ["stress", "-", "-t", "bert-base-uncased"], input="a b\n")
    assert r.exit_code == 2
    assert r.stderr == (
        "Error: tokenizer 'bert-base-uncased': not a file, and the Hugging Face Hub is out of "
        "reach (HF_HUB_OFFLINE=1) with no cached copy; pass a tokenizer.json path (built-in "
        "tokenizers: whitespace, bytes)\n"
    )


def test_progress_bar_shows_sequences_tokens_rate_and_eta() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=200)
    with Progress(*counting_columns(), console=console, auto_refresh=False) as prog:
        bar = CountingBar(prog)
        bar.start(100, "documents")
        bar(50, 60, 1234)
        prog.refresh()
    text = buf.getvalue()
    assert "50%" in text and "60 seqs" in text and "1,234 tokens" in text and "tok/s" in text
    assert "ETA" in text
