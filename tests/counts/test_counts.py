"""Counting: dense vs sparse vs brute force, pre-tokenized ids, merging, the counts file."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.corpus.sources import open_source
from posdiag.corpus.tokenizers import WhitespaceTokenizer, load_tokenizer, view
from posdiag.counts.core import (
    CountAccumulator,
    Counts,
    columns,
    count_texts,
    load_counts,
    merge_counts,
    save_counts,
)
from posdiag.counts.corpus import corpus_counts
from posdiag.counts.ids import count_ids
from posdiag.errors import PosdiagError


def _brute(seqs: list[list[int]], n: int, v: int) -> np.ndarray:
    out = np.zeros((n, v), dtype=np.int64)
    for s in seqs:
        for i, t in enumerate(s):
            out[i, t] += 1
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 9), max_size=6), max_size=12),
    st.integers(1, 3),
)
def test_dense_and_sparse_accumulators_match_brute_force(
    seqs: list[list[int]], batches: int
) -> None:
    dense = CountAccumulator(6, vocab_size=10)
    sparse = CountAccumulator(6)
    assert dense.dense and not sparse.dense
    for k in range(batches):
        part = seqs[k::batches]
        assert dense.add_sequences(part) == sparse.add_sequences(part) == sum(map(len, part))
    expect = _brute(seqs, 6, 10)
    assert (dense.matrix(10).toarray() == expect).all()
    assert (sparse.matrix(10).toarray() == expect).all()


def test_dense_block_spills_to_int64_before_int32_could_overflow() -> None:
    rng = np.random.default_rng(2)
    seqs = [rng.integers(0, 5, size=rng.integers(0, 5)).tolist() for _ in range(40)]
    block = rng.integers(0, 5, size=(30, 4))
    acc = CountAccumulator(4, vocab_size=5)
    acc._INT32_MAX = 7  # type: ignore[misc]  # spill every few batches
    for k in range(0, 40, 6):
        acc.add_sequences(seqs[k : k + 6])
    for k in range(0, 30, 4):
        acc.add_columns(columns(block[k : k + 4]))
    assert acc._spill is not None
    expect = _brute(seqs, 4, 5) + _brute(block.tolist(), 4, 5)
    assert (acc.matrix(5).toarray() == expect).all()


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "npy"])
def test_token_files_count_like_brute_force(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 70, size=1003)
    if dtype == "npy":
        path = tmp_path / "ids.npy"
        np.save(path, ids.astype(np.int32))
        src = open_source(str(path))
    else:
        path = tmp_path / "ids.bin"
        ids.astype(dtype).tofile(path)
        src = open_source(str(path), dtype=dtype)
    windows = [ids[k : k + 10].tolist() for k in range(0, ids.size, 10)]  # last one: 3 tokens
    for block in (1, 7, 1 << 20):  # many blocks, an uneven block, one block (one process)
        for dense_limit, workers in ((0, 1), (1 << 30, 1), (1 << 30, 3)):
            c = count_ids(
                src,
                max_len=10,
                vocab_size=70,
                block_tokens=block * 10,
                dense_limit=dense_limit,
                workers=workers,
            )
            assert (c.matrix.toarray() == _brute(windows, 10, 70)).all()
    assert (c.meta["sequences"], c.meta["tokens"], c.meta["view"]) == (101, 1003, "packed")


@pytest.mark.parametrize("workers", [1, 2])
def test_first_offending_offset_in_file_order(tmp_path: Path, workers: int) -> None:
    ids = np.zeros(200, dtype=np.uint16)
    ids[[57, 103, 148]] = [9, 7, 8]  # positions 7 (second half of n=10), 3, 8 of their windows
    ids.tofile(tmp_path / "ids.bin")
    src = open_source(str(tmp_path / "ids.bin"))
    with pytest.raises(PosdiagError) as err:
        count_ids(src, max_len=10, vocab_size=7, workers=workers, block_tokens=50)
    assert str(err.value) == (
        f"{tmp_path / 'ids.bin'}: token id 9 at offset 57 is outside [0, --vocab-size=7)"
    )


def test_token_file_limit_and_sample_select_windows(tmp_path: Path) -> None:
    ids = np.random.default_rng(1).integers(0, 50, size=995).astype(np.uint16)
    ids.tofile(tmp_path / "ids.bin")
    windows = [ids[k : k + 10].tolist() for k in range(0, ids.size, 10)]
    c = corpus_counts(str(tmp_path / "ids.bin"), max_len=10, vocab_size=50, limit=30)
    assert (c.matrix.toarray() == _brute(windows[:30], 10, 50)).all()
    keep = np.flatnonzero(np.random.default_rng(3).random(len(windows)) < 0.4)[:25]
    c = corpus_counts(
        str(tmp_path / "ids.bin"), max_len=10, vocab_size=50, sample=0.4, seed=3, limit=25
    )
    assert (c.matrix.toarray() == _brute([windows[k] for k in keep], 10, 50)).all()
    assert c.meta["sequences"] == len(keep) == 25
    src = open_source(str(tmp_path / "ids.bin"), sample=0.9, seed=2)
    keep = np.flatnonzero(np.random.default_rng(2).random(len(windows)) < 0.9)
    assert keep[-1] == len(windows) - 1  # the short last window is in the sample
    for workers in (1, 2):
        c = count_ids(src, max_len=10, vocab_size=50, workers=workers, block_tokens=100)
        assert (c.matrix.toarray() == _brute([windows[k] for k in keep], 10, 50)).all()
        assert (c.meta["sequences"], c.meta["tokens"]) == (keep.size, (keep.size - 1) * 10 + 5)


def _by_token(c: Counts) -> Counter[tuple[int, str]]:
    m = c.matrix.tocoo()
    assert c.vocab is not None
    return Counter(
        {(int(i), c.vocab[j]): int(x) for i, j, x in zip(m.row, m.col, m.data, strict=True)}
    )


def test_merge_is_the_counts_of_the_union(bundled_corpus: Path, tmp_path: Path) -> None:
    lines = bundled_corpus.read_text(encoding="utf-8").splitlines()[:600]
    a, b = lines[:250], lines[250:]
    for tok in ("bytes", "whitespace"):
        whole = count_texts(lines, load_tokenizer(tok), max_len=40)
        parts = [count_texts(p, load_tokenizer(tok), max_len=40) for p in (a, b)]
        merged = merge_counts(parts, ["a", "b"])
        assert merged.meta["tokens"] == whole.meta["tokens"]
        assert merged.meta["sequences"] == 600
        if tok == "bytes":
            assert (merged.matrix != whole.matrix).nnz == 0
        else:
            # Separate runs number words differently; the stored vocabularies align them.
            assert parts[1].vocab != whole.vocab[: len(parts[1].vocab or ())]
            assert _by_token(merged) == _by_token(whole)
            assert merged.vocab == whole.vocab  # first-appearance order over a then b


def test_counts_file_round_trip_keeps_the_vocabulary(tmp_path: Path) -> None:
    c = count_texts(["b a", "c a b"], load_tokenizer("whitespace"), max_len=4)
    path = save_counts(c, tmp_path / "c.npz")
    back = load_counts(path)
    assert back.vocab == ("[PAD]", "[CLS]", "[SEP]", "b", "a", "c")
    assert (back.matrix != c.matrix).nnz == 0 and dict(back.meta) == dict(c.meta)


def test_merge_cli_and_its_refusals(
    bundled_corpus: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    lines = bundled_corpus.read_text(encoding="utf-8").splitlines()[:300]
    (tmp_path / "a.txt").write_text("\n".join(lines[:100]) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(lines[100:]) + "\n")
    (tmp_path / "all.txt").write_text("\n".join(lines) + "\n")
    for name, args in {
        "a": ["-t", "bytes"],
        "b": ["-t", "bytes"],
        "all": ["-t", "bytes"],
        "n": ["-t", "bytes", "-n", "64"],
        "view": ["-t", "bytes", "--view", "packed"],
        "ws": [],
    }.items():
        src = "all" if name not in ("a", "b") else name
        r = cli(["count", str(tmp_path / f"{src}.txt"), "-o", str(tmp_path / f"{name}.npz"), *args])
        assert r.exit_code == 0, r.output
    out = tmp_path / "ab.npz"
    r = cli(["merge", str(tmp_path / "a.npz"), str(tmp_path / "b.npz"), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["sequences"] == 300
    merged, whole = load_counts(out), load_counts(tmp_path / "all.npz")
    assert (merged.matrix != whole.matrix).nnz == 0
    a = str(tmp_path / "a.npz")
    for other, rule in (
        ("n", "max_len ({a}: 512; {b}: 64)"),
        ("view", "view ({a}: text; {b}: packed)"),
        ("ws", "tokenizer ({a}: bytes (bytes); {b}: whitespace (run))"),
    ):
        b = str(tmp_path / f"{other}.npz")
        target = tmp_path / f"bad-{other}.npz"
        r = cli(["merge", a, b, "-o", str(target)])
        assert r.exit_code == 2
        assert r.stderr == (
            f"Error: {b}: cannot merge counts with a different {rule.format(a=a, b=b)}\n"
        )
        assert not target.exists()


def test_vocab_size_mismatch_is_refused() -> None:
    a = Counts(
        np.eye(2, 3, dtype=np.int64),
        {
            "tokenizer": "ids",
            "tokenizer_fingerprint": "ids",
            "view": "packed",
            "max_len": 2,
            "vocab_size": 3,
        },
    )
    b = Counts(np.eye(2, 4, dtype=np.int64), {**a.meta, "vocab_size": 4})
    with pytest.raises(PosdiagError) as err:
        merge_counts([a, b], ["x.npz", "y.npz"])
    assert str(err.value) == (
        "y.npz: cannot merge counts with a different vocab_size (x.npz: 3; y.npz: 4)"
    )


def test_limit_and_sample_are_recorded_and_checked(
    bundled_corpus: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    out = tmp_path / "c.npz"
    args = ["count", str(bundled_corpus), "-o", str(out), "--limit", "300", "--sample", "0.5"]
    r = cli([*args, "--seed", "4", "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    lines = [t for t in bundled_corpus.read_text(encoding="utf-8").splitlines() if t.strip()]
    rng = np.random.default_rng(4)
    kept = [t for t in lines if rng.random() < 0.5][:300]
    assert (info["documents"], info["limit"], info["sample"], info["seed"]) == (300, 300, 0.5, 4)
    assert info["tokens"] == sum(len(t) for t in load_tokenizer("whitespace").encode_batch(kept))
    r = cli(["stress", str(out), "--limit", "200"])
    assert r.exit_code == 2
    assert r.stderr == (
        f"Error: {out}: was counted with limit=300, not limit=200; drop --limit to use {out} as "
        "counted, or count the corpus again with --limit 200\n"
    )


def test_count_texts_matches_brute_force() -> None:
    texts = ["a b c", "b c", "c a b d e", "a"]
    seqs = [s for b, _ in view(texts, WhitespaceTokenizer(), "text", 4) for s in b]
    c = count_texts(texts, WhitespaceTokenizer(), max_len=4)
    np.testing.assert_array_equal(c.matrix.toarray(), _brute(seqs, 4, c.vocab_size))
    assert c.meta["sequences"] == 4 and c.meta["tokens"] == 3 + 2 + 4 + 1
    assert c.supports.tolist() == [4, 3, 2, 1]


def test_accumulator_compaction_is_exact() -> None:
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 9, size=rng.integers(1, 7)).tolist() for _ in range(300)]
    acc = CountAccumulator(6, compact_at=5)
    for k in range(0, 300, 7):
        acc.add_sequences(seqs[k : k + 7])
    np.testing.assert_array_equal(acc.matrix(9).toarray(), _brute(seqs, 6, 9))


def test_two_shards_sum_to_whole_corpus() -> None:
    lines = Path(__file__).resolve().parents[2].joinpath("fixtures/corpus_en.txt").read_text()
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
