"""Sources, tokenizers, views and counts of the core pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from posdiag.counts import Counts, count_texts, load_counts, save_counts
from posdiag.errors import PosdiagError
from posdiag.sources import open_source
from posdiag.synthetic import drift_distributions, expected_counts
from posdiag.tokenize import WhitespaceTokenizer, load_tokenizer, view


def brute_counts(seqs: list[list[int]], n: int, v: int) -> np.ndarray:
    c = np.zeros((n, v), dtype=np.int64)
    for s in seqs:
        for i, t in enumerate(s):
            c[i, t] += 1
    return c


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


def test_count_texts_matches_brute_force() -> None:
    texts = ["a b c", "b c", "c a b d e", "a"]
    seqs = [s for b, _ in view(texts, WhitespaceTokenizer(), "text", 4) for s in b]
    c = count_texts(texts, WhitespaceTokenizer(), max_len=4)
    np.testing.assert_array_equal(c.matrix.toarray(), brute_counts(seqs, 4, c.vocab_size))
    assert c.meta["sequences"] == 4 and c.meta["tokens"] == 3 + 2 + 4 + 1
    assert c.supports.tolist() == [4, 3, 2, 1]


def test_accumulator_compaction_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    from posdiag.counts import CountAccumulator

    monkeypatch.setattr(CountAccumulator, "_COMPACT_AT", 5)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 9, size=rng.integers(1, 7)).tolist() for _ in range(300)]
    acc = CountAccumulator(6)
    for k in range(0, 300, 7):
        acc.add_sequences(seqs[k : k + 7])
    np.testing.assert_array_equal(acc.matrix(9).toarray(), brute_counts(seqs, 6, 9))


def test_two_shards_sum_to_whole_corpus() -> None:
    lines = Path(__file__).resolve().parents[1].joinpath("fixtures/corpus_en.txt").read_text()
    texts = lines.splitlines()[:300]
    whole = count_texts(texts, WhitespaceTokenizer(), max_len=64)
    tok = WhitespaceTokenizer()  # one tokenizer for both shards, so ids agree
    a = count_texts(texts[:170], tok, max_len=64)
    b = count_texts(texts[170:], tok, max_len=64)
    total = a + b
    assert (total.matrix != whole.matrix).nnz == 0
    assert total.meta["tokens"] == whole.meta["tokens"]


def test_counts_file_roundtrip_and_load_npz(tmp_path: Path) -> None:
    c = count_texts(["a b", "b a c"], WhitespaceTokenizer(), max_len=3, source="mem")
    path = save_counts(c, tmp_path / "c.npz")
    plain = sp.load_npz(path)
    np.testing.assert_array_equal(plain.toarray(), c.matrix.toarray())
    with np.load(path) as z:
        meta = json.loads(str(z["posdiag_meta"]))
    assert meta["source"] == "mem" and meta["max_len"] == 3 and meta["view"] == "text"
    back = load_counts(path)
    assert (back.matrix != c.matrix).nnz == 0 and back.meta == c.meta
    with pytest.raises(PosdiagError, match=r"already exists; pass --force to overwrite$"):
        save_counts(c, path)
    save_counts(c, path, force=True)


def test_synthetic_expected_counts_give_exact_geometry() -> None:
    mu = drift_distributions(10, 40, rank=2, seed=3)
    c = Counts(sp.csr_matrix(expected_counts(mu, 10**9)))
    from posdiag.geometry import hellinger_distances

    s = np.sqrt(mu) / np.sqrt(2)
    exact = np.sqrt(((s[:, None, :] - s[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(hellinger_distances(c.matrix), exact, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "content", "column", "expected"),
    [
        ("c.txt", "one\n\n  two  \n", None, ["one", "two"]),
        ("c.jsonl", '{"text": "a"}\n{"text": null}\n{"text": "b", "x": 1}\n', None, ["a", "b"]),
        ("c.jsonl", '{"body": "a"}\n', "body", ["a"]),
        ("c.csv", 'id,text\n1,"hello, world"\n2,x\n', None, ["hello, world", "x"]),
        ("c.tsv", "text\tid\nab\t1\n", None, ["ab"]),
    ],
)
def test_source_formats(
    tmp_path: Path, name: str, content: str, column: str | None, expected: list[str]
) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert list(open_source(str(path), column).texts()) == expected


def test_source_errors(tmp_path: Path) -> None:
    with pytest.raises(PosdiagError, match=r"^missing\.txt: no such file$"):
        open_source("missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(
        PosdiagError, match=r"bad.txt: line 2 is not valid UTF-8 \(byte 0xff at column 5\)$"
    ):
        list(open_source(str(bad)).texts())
    j = tmp_path / "c.jsonl"
    j.write_text('{"text": "a"}\n{"body": "b"}\n')
    with pytest.raises(PosdiagError, match=r"c.jsonl: line 2 has no column 'text'; columns: body$"):
        list(open_source(str(j)).texts())
    c = tmp_path / "c.csv"
    c.write_text("a,b\n1,2\n")
    with pytest.raises(PosdiagError, match=r"c.csv: no column 'text'; columns: a, b$"):
        list(open_source(str(c)).texts())
    with pytest.raises(
        PosdiagError,
        match=(
            r"bad.txt: --column applies to .jsonl, .json, .csv, .tsv, .parquet and data sets; "
            r"this is plain text \(one sequence per line\); got column .text.$"
        ),
    ):
        open_source(str(bad), "text")


def test_adding_whitespace_counts_of_separate_runs_aligns_words() -> None:
    """Two runs number words differently; + aligns them through the stored vocabularies."""
    texts = ["the cat sat", "a dog ran", "the dog sat", "a cat ran"]
    whole = count_texts(texts, WhitespaceTokenizer(), max_len=3)
    a = count_texts(texts[:2], WhitespaceTokenizer(), max_len=3)
    b = count_texts(texts[2:], WhitespaceTokenizer(), max_len=3)  # its own ids
    total = a + b
    assert total.vocab is not None and whole.vocab is not None
    order = [total.vocab.index(w) for w in whole.vocab]
    np.testing.assert_array_equal(total.matrix.toarray()[:, order], whole.matrix.toarray())
    with pytest.raises(PosdiagError, match=r"cannot merge counts with a different max_len"):
        _ = a + count_texts(texts, WhitespaceTokenizer(), max_len=2)
