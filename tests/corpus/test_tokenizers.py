"""Tokenizers: bytes, tokenizer.json (its own pad token), hub names offline, progress bar."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from rich.console import Console
from rich.progress import Progress
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from posdiag.cli.options import CountingBar, counting_columns
from posdiag.corpus.sources import HubUnavailable
from posdiag.corpus.tokenizers import WhitespaceTokenizer, load_tokenizer, view
from posdiag.errors import PosdiagError

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


def test_hub_tokenizer_offline_fails_fast(cli: Callable[..., Result], offline_hub: None) -> None:
    t0 = time.perf_counter()
    with pytest.raises(HubUnavailable):
        load_tokenizer("no-such-model-xyz")
    assert time.perf_counter() - t0 < 20
    r = cli(["stress", "-", "-t", "bert-base-uncased"], input="a b\n")
    assert r.exit_code == 2
    assert r.stderr == (
        "Error: tokenizer 'bert-base-uncased': not a file, and the Hugging Face Hub is out of "
        "reach (HF_HUB_OFFLINE=1) with no cached copy; pass a tokenizer.json path (built-in "
        "tokenizers: whitespace, bytes)\n"
    )


def test_progress_bar_shows_sequences_tokens_rate_and_eta() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=200)
    clock = [0.0]
    with Progress(
        *counting_columns(), console=console, auto_refresh=False, get_time=lambda: clock[0]
    ) as prog:
        bar = CountingBar(prog)
        bar.start(100, "documents")
        clock[0] = 5.0
        bar(25, 30, 617)
        clock[0] = 10.0
        bar(50, 60, 1234)  # 25 documents in 5 s: the other 50 take 10 s
        prog.refresh()
    text = buf.getvalue()
    assert "50%" in text and "60 seqs" in text and "1,234 tokens" in text and "123 tok/s" in text
    assert "ETA 0:00:10" in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


@pytest.fixture
def word_tokenizer_file(tmp_path: Path) -> Path:
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "b": 5, "c": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_whitespace_tokenizer_uses_pretokenizer_and_first_seen_ids() -> None:
    tok = WhitespaceTokenizer()
    assert tok.encode_batch(["b a, b", "c"]) == [[3, 4, 5, 3], [6]]  # "," is its own token
    assert tok.vocab_size == 7


def test_views_whitespace() -> None:
    texts = ["x y z", "y"]
    assert list(view(texts, WhitespaceTokenizer(), "text", 2)) == [([[3, 4], [4]], 2)]
    model = list(view(texts, WhitespaceTokenizer(), "model", 4))
    assert model == [([[1, 3, 4, 2], [1, 4, 2, 0]], 2)]
    packed = list(view(texts, WhitespaceTokenizer(), "packed", 3, batch_size=1))
    # "x y z [SEP] y [SEP]" in windows of 3
    assert packed == [([[3, 4, 5]], 1), ([[2, 4, 2]], 1)]


def test_views_with_tokenizer_json(word_tokenizer_file: Path) -> None:
    tok = load_tokenizer(str(word_tokenizer_file))
    assert list(view(["a b c a", "b"], tok, "text", 3)) == [([[4, 5, 6], [5]], 2)]
    model = list(view(["a b c a", "b"], tok, "model", 4))[0][0]
    assert model == [[2, 4, 5, 3], [2, 5, 3, 0]]  # truncation keeps [SEP]; padding counted
    packed = list(view(["a b", "c"], tok, "packed", 2))[0][0]
    assert packed == [[4, 5], [3, 6]]


def test_tokenizer_errors(tmp_path: Path) -> None:
    with pytest.raises(PosdiagError, match=r"^tokenizer 'nope\.json': no such file \(built-in"):
        load_tokenizer("nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PosdiagError, match=rf"^{bad}: not a valid tokenizer.json \("):
        load_tokenizer(str(bad))
    plain = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    path = tmp_path / "nopad.json"
    plain.save(str(path))
    with pytest.raises(PosdiagError, match=r"has no pad token \(looked for \[PAD\], <pad>"):
        list(view(["a"], load_tokenizer(str(path)), "model", 4))
    assert list(view(["a"], load_tokenizer(str(path), pad_token="[UNK]"), "model", 3))[0][0] == [
        [0, 1, 1]
    ]


def test_model_view_shorter_than_the_special_tokens(
    bundled_corpus: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    path = tmp_path / "tok.json"
    tok.save(str(path))
    res = cli(["stress", str(bundled_corpus), "-t", str(path), "--view", "model", "-n", "1"])
    assert res.exit_code == 2
    assert res.stderr == (
        f"Error: tokenizer {path}: --max-len 1 is shorter than the 2 special tokens its "
        "post-processor adds in the model view\n"
    )
