"""posdiag.corpus.units: content-keyed sampling units, the duplicate tally, --group-by and --dedup.

The oracle is tests/_unit_oracle.py, a scalar pure-Python reading of docs/geometry.md section 2b.
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import Result
from hypothesis import given
from hypothesis import strategies as st

from posdiag.corpus.tokenizers import load_tokenizer, packed_windows, view
from posdiag.corpus.units import (
    DEFAULT_GROUP_PREFIX,
    DUPLICATE_WARN_SHARE,
    Grouped,
    UnitKeyer,
    UnitTally,
    shard_of_keys,
)
from posdiag.counts.core import count_texts, load_counts
from posdiag.counts.corpus import corpus_counts
from posdiag.errors import PosdiagError
from tests import _unit_oracle as oracle
from tests.conftest import BUNDLED

# ---------------------------------------------------------------------------------------------
# The hash rule against the scalar oracle


@given(
    st.lists(st.lists(st.integers(0, 255), max_size=20), min_size=1, max_size=8),
    st.integers(0, 10),
)
def test_content_hash_and_prefix_key_match_the_scalar_oracle(
    seqs: list[list[int]], prefix: int
) -> None:
    keyer = UnitKeyer(load_tokenizer("bytes"), prefix=prefix)
    full, pkey, lengths = keyer.hashes(seqs)
    for s, f, p, n in zip(seqs, full.tolist(), pkey.tolist(), lengths.tolist(), strict=True):
        hashes = [oracle.id_hash(t) for t in s]
        assert f == oracle.content_hash(hashes)
        assert p == oracle.content_hash(hashes, prefix)
        assert n == len(s)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=30), st.integers(0, 2**31), st.integers(1, 50))
def test_shard_of_keys_matches_the_scalar_oracle(keys: list[int], seed: int, k: int) -> None:
    got = shard_of_keys(np.array(keys, dtype=np.uint64), seed, k)
    assert got.tolist() == [oracle.shard(key, seed, k) for key in keys]


def test_whitespace_ids_hash_by_word_not_by_first_appearance() -> None:
    # Two runs number the same words differently; the content hash must not see it.
    a, b = load_tokenizer("whitespace"), load_tokenizer("whitespace")
    a.encode_batch(["zebra apple"])
    ka, kb = UnitKeyer(a), UnitKeyer(b)
    ids_a = a.encode_batch(["apple pie zebra"])
    ids_b = b.encode_batch(["apple pie zebra"])
    assert ids_a != ids_b
    assert ka.hashes(ids_a)[0].tolist() == kb.hashes(ids_b)[0].tolist()
    words = [oracle.word_hash(w) for w in ("apple", "pie", "zebra")]
    assert ka.hashes(ids_a)[0].tolist() == [oracle.content_hash(words)]


def test_group_values_key_by_their_text() -> None:
    keyer = UnitKeyer(load_tokenizer("bytes"), group_by="doc")
    texts = [Grouped("ab", "7"), Grouped("cd", "7"), Grouped("ab", "8")]
    keys, keep = keyer.keys(load_tokenizer("bytes").encode_batch(texts), texts)
    assert keys.tolist() == [oracle.group_key("7"), oracle.group_key("7"), oracle.group_key("8")]
    assert keep.all()


# ---------------------------------------------------------------------------------------------
# Counting: shards, tally, dedup


def _brute_shards(texts: list[str], n: int, k: int, seed: int, prefix: int) -> list[Counter[Any]]:
    """(position, word) counts of each shard, by the oracle's rule, one sequence at a time."""
    out: list[Counter[Any]] = [Counter() for _ in range(k)]
    for t in texts:
        words = t.split()[:n]
        s = oracle.words_shard(words, seed, k, prefix)
        out[s].update(enumerate(words))
    return out


def _shard_counters(counts: Any) -> list[Counter[Any]]:
    vocab = counts.vocab
    out = []
    for m in counts.shards:
        coo = m.tocoo()
        out.append(
            Counter(
                {
                    (int(i), vocab[int(v)]): int(c)
                    for i, v, c in zip(coo.row, coo.col, coo.data, strict=True)
                }
            )
        )
    return out


@pytest.mark.parametrize("prefix", [0, 2, DEFAULT_GROUP_PREFIX])
def test_shards_are_the_oracles_and_copies_share_one(prefix: int) -> None:
    rng = random.Random(3)
    words = ["a", "b", "c", "d", "e"]
    base = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(60)]
    texts = base + base[:20]
    rng.shuffle(texts)
    counts = count_texts(
        texts, load_tokenizer(), max_len=8, shards=5, shard_seed=4, group_prefix=prefix
    )
    assert _shard_counters(counts) == _brute_shards(texts, 8, 5, 4, prefix)


def test_tally_counts_duplicates_prefix_groups_and_units_by_hand() -> None:
    texts = [
        "a b c",
        "a b c",
        "a b c d e f g",
        "a b c d e f h",
        "a b c d e f h",
        "x",
        "a b c d e f",
    ]
    counts = count_texts(texts, load_tokenizer(), max_len=10, shards=2)
    u = counts.units
    assert u is not None
    # 7 read, 5 distinct; "a b c d e f", "...g" and "...h" share their first 6 tokens: one group
    # of 4 sequences (copies included), one unit; units: "a b c", that group, "x".
    assert (u.items, u.distinct, u.duplicates) == (7, 5, 2)
    assert (u.prefix, u.prefix_groups, u.prefix_grouped, u.largest_group) == (6, 1, 4, 4)
    assert u.units == 3
    # The group reaches 7 positions, "a b c" 3, "x" 1.
    assert u.unit_supports == (3, 2, 2, 1, 1, 1, 1, 0, 0, 0)
    assert u.share == pytest.approx(2 / 7)


def test_dedup_counts_what_the_deduplicated_corpus_counts() -> None:
    lines = BUNDLED.read_text(encoding="utf-8").splitlines()[:300]
    twice = lines + lines[::-1]
    deduped = count_texts(twice, load_tokenizer(), max_len=20, dedup=True)
    first = list(dict.fromkeys(twice))  # first copies, in reading order
    plain = count_texts(first, load_tokenizer(), max_len=20)
    assert (deduped.matrix != plain.matrix).nnz == 0
    u = deduped.units
    assert u is not None and u.dedup
    assert u.dropped == len(twice) - len(first)
    assert deduped.meta["sequences"] == len(first)


def test_packed_windows_take_the_key_of_the_document_they_start_in() -> None:
    tok = load_tokenizer("bytes")
    docs = ["abcdefg", "hi", "jklmnopqrstu", "vw"]
    keyer = UnitKeyer(tok, prefix=0)
    got = list(packed_windows(docs, tok, 4, batch_size=2, keyer=keyer))
    plain = list(view(docs, tok, "packed", 4, batch_size=2))
    assert [w for w, _, _ in got] == [w for w, _ in plain]
    # Offsets of the documents in the packed stream (each followed by the end-of-text token).
    starts, at = [], 0
    for d in docs:
        starts.append(at)
        at += len(d) + 1
    key = [oracle.content_hash([oracle.id_hash(b) for b in d.encode()]) for d in docs]
    want = []
    for o in range(0, at, 4):
        want.append(key[max(j for j, s in enumerate(starts) if s <= o)])
    assert [k for _, _, keys in got for k in keys.tolist()] == want


def test_packed_dedup_drops_repeated_documents_before_packing() -> None:
    tok = load_tokenizer("bytes")
    docs = ["abc", "defg", "abc", "hi"]
    counts = count_texts(docs, tok, view_name="packed", max_len=4, dedup=True)
    once = count_texts(["abc", "defg", "hi"], tok, view_name="packed", max_len=4)
    assert (counts.matrix != once.matrix).nnz == 0
    u = counts.units
    assert u is not None and (u.item, u.items, u.dropped) == ("documents", 4, 1)


def test_tally_survives_a_counts_file(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    texts = ["a b c", "a b c", "d e"]
    from posdiag.counts.core import save_counts

    save_counts(count_texts(texts, load_tokenizer(), max_len=4), path)
    loaded = load_counts(path)
    assert loaded.units == count_texts(texts, load_tokenizer(), max_len=4).units
    assert UnitTally.from_meta({"item": "x"}) is None


# ---------------------------------------------------------------------------------------------
# The bundled corpus rearranged: the answer depends on the multiset of sequences only


def _rounded(x: Any) -> Any:
    """``x`` with every float to 10 decimals: the whitespace tokenizer numbers words by first
    appearance, so another line order sums the same terms in another order (the figures then
    differ in their last bits, ~1e-16)."""
    if isinstance(x, float):
        return round(x, 10) + 0.0
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def _figures(doc: dict[str, Any]) -> dict[str, Any]:
    """Every figure of a report's JSON but the source's name, floats to 11 digits."""
    corpus = {k: v for k, v in doc["corpus"].items() if k not in ("source",)}
    out: dict[str, Any] = _rounded(
        {"corpus": corpus, **{k: v for k, v in doc.items() if k != "corpus"}}
    )
    return out


def _stress(cli: Callable[..., Result], path: Path, *extra: str) -> dict[str, Any]:
    res = cli(["stress", str(path), "--json", "--quiet", *extra])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.fixture(scope="module")
def rearranged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("rearranged")
    lines = [t for t in BUNDLED.read_text(encoding="utf-8").splitlines() if t.strip()]
    rng = random.Random(7)
    out = {}
    shuffled = lines[:]
    rng.shuffle(shuffled)
    out["shuffled"] = shuffled
    twice = lines + lines
    rng.shuffle(twice)
    out["twice"] = twice
    for pct in (3, 10):
        extra = rng.sample(lines, round(len(lines) * pct / 100))
        more = lines + extra
        rng.shuffle(more)
        out[f"dup{pct}"] = more
    paths = {}
    for name, rows in out.items():
        paths[name] = d / f"{name}.txt"
        paths[name].write_text("\n".join(rows) + "\n", encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def shipped_report() -> dict[str, Any]:
    from typer.testing import CliRunner

    from posdiag.cli.app import app

    res = CliRunner().invoke(app, ["stress", str(BUNDLED), "--json", "--quiet"])
    assert res.exit_code == 0
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def test_shuffled_corpus_gives_identical_figures(
    cli: Callable[..., Result], rearranged: dict[str, Path], shipped_report: dict[str, Any]
) -> None:
    got = _figures(_stress(cli, rearranged["shuffled"]))
    assert got == _figures(shipped_report)


def test_every_line_twice_gives_the_shipped_figures(
    cli: Callable[..., Result], rearranged: dict[str, Path], shipped_report: dict[str, Any]
) -> None:
    # Every count doubles, in every shard alike: every distribution and so every figure is the
    # shipped one; only the sequence counts and the duplicate tally differ.
    got, want = _figures(_stress(cli, rearranged["twice"])), _figures(shipped_report)
    for key in ("documents", "sequences", "tokens", "supports", "units"):
        got["corpus"].pop(key), want["corpus"].pop(key)
    # One warning more than the shipped corpus's (its unstable positions): the duplicate share.
    (share, *rest), shipped = got.pop("warnings"), want.pop("warnings")
    assert "are exact duplicates" in share and rest == shipped
    assert got == want


@pytest.mark.parametrize("name", ["dup3", "dup10"])
def test_duplicated_lines_stay_within_their_intervals_of_the_shipped_figures(
    cli: Callable[..., Result],
    rearranged: dict[str, Path],
    shipped_report: dict[str, Any],
    name: str,
) -> None:
    got = _stress(cli, rearranged[name])
    shipped = {e["name"]: e for e in shipped_report["encodings"]}
    for enc in got["encodings"]:
        assert enc["ci_low"] <= shipped[enc["name"]]["stress"] <= enc["ci_high"], enc["name"]
    assert [e["name"] for e in got["encodings"]] == list(shipped)
    assert got["spectrum"]["effective_rank"] == shipped_report["spectrum"]["effective_rank"]
    assert got["corpus"]["n_eff"] == shipped_report["corpus"]["n_eff"]
    units = got["corpus"]["units"]
    pct = 3 if name == "dup3" else 10
    # The shipped corpus repeats 3 of its own lines; the copies added here come on top.
    assert units["duplicates"] == 3 + round(5780 * pct / 100)


_CHECK = ["--max-len", "64", "--json", "--quiet", "-e", "rope", "--max-stress", "0.85"]
_CHECK += ["--max-rank-for-stress", "0.1:70"]  # the README's example


@pytest.fixture(scope="module")
def shipped_check() -> Result:
    from typer.testing import CliRunner

    from posdiag.cli.app import app

    return CliRunner().invoke(app, ["check", str(BUNDLED), *_CHECK])


@pytest.mark.parametrize("name", ["shuffled", "twice", "dup3", "dup10"])
def test_check_outcome_is_the_shipped_one(
    cli: Callable[..., Result], rearranged: dict[str, Path], shipped_check: Result, name: str
) -> None:
    want = shipped_check
    got = cli(["check", str(rearranged[name]), *_CHECK])
    assert got.exit_code == want.exit_code
    verdicts = [(r["id"], r["passed"]) for r in json.loads(got.stdout)["rules"]]
    assert verdicts == [(r["id"], r["passed"]) for r in json.loads(want.stdout)["rules"]]


def test_dedup_of_every_line_twice_is_the_deduplicated_shipped_corpus(
    cli: Callable[..., Result], rearranged: dict[str, Path]
) -> None:
    args = ("--dedup", "--max-len", "40", "--shards", "0")
    got = _figures(_stress(cli, rearranged["twice"], *args))
    want = _figures(_stress(cli, BUNDLED, *args))
    assert got["corpus"]["units"]["dropped"] == 5780 + 3
    assert want["corpus"]["units"]["dropped"] == 3
    for d in (got, want):
        d["corpus"].pop("units"), d["corpus"].pop("documents")  # texts read, copies included
    # The copies were dropped: no duplicate warning, the same warnings as the shipped corpus.
    assert not any("duplicate" in w for w in got["warnings"])
    assert got == want


def test_duplicate_warning_names_the_share_and_what_it_does(
    cli: Callable[..., Result], rearranged: dict[str, Path]
) -> None:
    res = cli(["stress", str(rearranged["dup3"]), "--max-len", "40", "--shards", "0", "-q"])
    assert res.exit_code == 0
    path = rearranged["dup3"]
    assert (
        f"Warning: {path}: 176 of 5,953 sequences (3.0%) are exact duplicates: each copy weighs "
        "in every distribution, but copies share a shard, so the cross-fit and the intervals "
        "count each once as a sampling unit; --dedup counts them once"
    ) in res.stderr
    quiet = cli(["stress", str(BUNDLED), "--max-len", "40", "--shards", "0", "-q"])
    assert "exact duplicates" not in quiet.stderr  # 3 of 5,780: below DUPLICATE_WARN_SHARE
    assert 3 / 5780 < DUPLICATE_WARN_SHARE < 176 / 5953


def test_counts_file_keeps_the_tally_and_warns_that_thinning_sees_copies(
    cli: Callable[..., Result], rearranged: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "dup10.npz"
    res = cli(["count", str(rearranged["dup10"]), "-o", str(out), "--max-len", "40", "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads(cli(["stress", str(out), "--json", "-q"]).stdout)
    direct = json.loads(
        cli(["stress", str(rearranged["dup10"]), "--json", "-q", "--max-len", "40"]).stdout
    )
    assert doc["corpus"]["units"] == direct["corpus"]["units"]
    assert doc["corpus"]["n_eff"] == direct["corpus"]["n_eff"]
    warned = cli(["stress", str(out), "-q"]).stderr
    assert "counts without shards are split by thinning, which takes copies for independent" in (
        " ".join(warned.split())
    )
    bad = cli(["stress", str(out), "--dedup", "-q"])
    assert bad.exit_code == 2
    assert bad.output.strip() == (
        f"Error: {out}: was counted with dedup=False, not dedup=True; drop --dedup to use {out} "
        "as counted, or count the corpus again with --dedup True"
    )


def test_diagnose_reports_duplicates(
    cli: Callable[..., Result], rearranged: dict[str, Path]
) -> None:
    res = cli(["diagnose", str(rearranged["dup10"]), "--json", "-q", "--max-len", "30"])
    assert res.exit_code == 0, res.output
    units = json.loads(res.stdout)["corpus"]["units"]
    assert units["duplicates"] == 3 + 578 and units["items"] == 5780 + 578
    text = cli(["diagnose", str(rearranged["dup10"]), "-q", "--max-len", "30"]).stdout
    assert "581 of 6,358 sequences (9.1%)" in text


# ---------------------------------------------------------------------------------------------
# --group-by and its errors


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_group_by_puts_every_record_of_a_group_in_one_shard(tmp_path: Path) -> None:
    rng = random.Random(1)
    rows = [
        {"text": " ".join(rng.choice("abcdefgh") for _ in range(6)), "doc": d}
        for d in range(30)
        for _ in range(4)
    ]
    path = _jsonl(tmp_path / "g.jsonl", rows)
    counts = corpus_counts(str(path), max_len=6, shards=4, shard_seed=2, group_by="doc")
    want: list[Counter[Any]] = [Counter() for _ in range(4)]
    for r in rows:
        s = oracle.shard(oracle.group_key(str(r["doc"])), 2, 4)
        want[s].update(enumerate(r["text"].split()))
    assert _shard_counters(counts) == want
    u = counts.units
    assert u is not None and (u.units, u.group_by) == (30, "doc")


def test_group_by_reads_csv_parquet_and_saved_dataset_columns_alike(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"text": f"w{i % 7} w{i % 5} w{i % 3}", "book": f"b{i % 4}"} for i in range(40)]
    with open(tmp_path / "g.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, ["text", "book"])
        w.writeheader()
        w.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "g.parquet")
    jl = _jsonl(tmp_path / "g.jsonl", rows)
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    got = [
        corpus_counts(str(p), max_len=3, shards=3, group_by="book")
        for p in (tmp_path / "g.csv", tmp_path / "g.parquet", jl, tmp_path / "saved")
    ]
    for c in got[1:]:
        assert _shard_counters(c) == _shard_counters(got[0])
    assert got[0].units is not None and got[0].units.units == 4


def test_group_by_errors_name_the_input_the_rule_and_the_value(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    txt = tmp_path / "a.txt"
    txt.write_text("a b\n")
    res = cli(["stress", str(txt), "--group-by", "doc", "-q"])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"Error: {txt}: --group-by reads a field of .jsonl, .json, .csv, .tsv, .parquet records "
        "and data sets; this is plain text (one sequence per line); got field 'doc'"
    )
    jl = _jsonl(tmp_path / "b.jsonl", [{"text": "a b", "doc": 1}, {"text": "c d"}])
    res = cli(["stress", str(jl), "--group-by", "doc", "-q"])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"Error: {jl}: line 2 has no field 'doc' (--group-by); fields: text"
    )
    jl2 = _jsonl(tmp_path / "c.jsonl", [{"text": "a b", "doc": None}])
    res = cli(["stress", str(jl2), "--group-by", "doc", "-q"])
    assert res.exit_code == 2
    assert res.output.strip() == f"Error: {jl2}: line 1: field 'doc' (--group-by) is empty"
    res = cli(["stress", str(jl), "--group-prefix", "-1", "-q"])
    assert res.exit_code == 2
    assert res.output.strip() == "Error: 'group_prefix' must be an int in [0, inf]; got -1"


def test_token_id_files_refuse_unit_options(cli: Callable[..., Result], tmp_path: Path) -> None:
    ids = tmp_path / "ids.npy"
    np.save(ids, np.arange(100, dtype=np.uint16) % 7)
    res = cli(["stress", str(ids), "--vocab-size", "7", "--dedup", "-q"])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"Error: {ids}: --dedup needs documents, and token id files do not delimit them "
        "(they are counted without shards, split by thinning)"
    )
    res = cli(["stress", str(ids), "--vocab-size", "7", "--group-by", "doc", "-q"])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"Error: {ids}: --group-by needs documents, and token id files do not delimit them "
        "(they are counted without shards, split by thinning)"
    )


def test_group_prefix_must_be_a_non_negative_int() -> None:
    with pytest.raises(PosdiagError, match=r"'group_prefix' must be an int in \[0, inf\]; got -2"):
        UnitKeyer(load_tokenizer(), prefix=-2)


# ---------------------------------------------------------------------------------------------
# A corpus with a known geometry, copied, grouped and cut into prefixes


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """800 independent sentences of a rank-3 drift geometry (n = 16), and variants whose every
    position has the same distribution, so the same geometry: +40% exact copies plus one copy of
    every sentence with its first token redrawn (a dependent record of the same document), and
    the sentences plus their prefixes of 3, 6, 9, 12 and 15 tokens (SST-2's sub-phrases)."""
    from tests._data import sample_texts, zipf_drift_distributions

    d = tmp_path_factory.mktemp("synthetic")
    mu = zipf_drift_distributions(16, 500, 3, sharpness=2.0, seed=0)
    texts = list(sample_texts(mu, 800, seed=1))
    rng = random.Random(5)
    base = [(t, i) for i, t in enumerate(texts)]
    copies = base + [base[rng.randrange(len(base))] for _ in range(320)]
    copies += [(" ".join([f"t{rng.randrange(500)}", *t.split()[1:]]), i) for t, i in base]
    prefixes = base + [(" ".join(t.split()[:m]), i) for t, i in base for m in (3, 6, 9, 12, 15)]
    out = {}
    for name, rows in (("base", base), ("copies", copies), ("prefixes", prefixes)):
        rng.shuffle(rows)
        out[name] = _jsonl(d / f"{name}.jsonl", [{"text": t, "doc": i} for t, i in rows])
    return out


_SYNTH = ["--max-len", "16", "--min-count", "50", "--json", "--quiet", "--replicates", "60"]


def _by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in doc["encodings"]}


def test_copies_and_grouped_records_stay_within_their_intervals_of_the_truth(
    cli: Callable[..., Result], synthetic: dict[str, Path]
) -> None:
    truth = _by_name(_stress(cli, synthetic["base"], *_SYNTH))
    grouped = _stress(cli, synthetic["copies"], *_SYNTH, "--group-by", "doc")
    for name, enc in _by_name(grouped).items():
        assert enc["ci_low"] <= truth[name]["stress"] <= enc["ci_high"], name
    assert list(_by_name(grouped)) == list(truth)  # the same ranking
    # Without --group-by the redrawn copies are dependent records in other shards: the noise
    # comes back and the untrained table looks better than it is, outside its interval.
    loose = _by_name(_stress(cli, synthetic["copies"], *_SYNTH))
    assert loose["learned-random"]["ci_high"] < truth["learned-random"]["stress"] - 0.03


def test_sentences_plus_prefixes_are_reported_as_shared_prefix_groups(
    cli: Callable[..., Result], synthetic: dict[str, Path]
) -> None:
    rows = [json.loads(x)["text"].split() for x in synthetic["prefixes"].read_text().splitlines()]
    distinct = {tuple(r) for r in rows}
    by_prefix = Counter(r[:6] for r in distinct if len(r) >= 6)
    shared = {p for p, c in by_prefix.items() if c >= 2}
    doc = _stress(cli, synthetic["prefixes"], *_SYNTH, "--shards", "0")
    units = doc["corpus"]["units"]
    assert units["prefix_groups"] == len(shared) == 800
    assert units["prefix_grouped"] == sum(1 for r in rows if tuple(r[:6]) in shared)
    assert units["largest_group"] == 5


def test_prefix_grouping_removes_most_of_what_prefixes_add(
    cli: Callable[..., Result], synthetic: dict[str, Path]
) -> None:
    # Measured (docs/geometry.md 2b): learned-random's stress against the independent sentences'
    # figure, with prefixes unrouped, grouped by their first 6 tokens, and by sentence.
    truth = _by_name(_stress(cli, synthetic["base"], *_SYNTH))["learned-random"]["stress"]

    def lr(*opts: str) -> dict[str, Any]:
        return _by_name(_stress(cli, synthetic["prefixes"], *_SYNTH, *opts))["learned-random"]

    none, six, doc = lr("--group-prefix", "0"), lr(), lr("--group-by", "doc")
    assert truth - none["stress"] > 3 * (truth - six["stress"]) > 0
    assert doc["ci_low"] <= truth <= doc["ci_high"]


def test_merged_counts_carry_no_tally_and_count_sequences() -> None:
    from posdiag.counts.core import merge_counts
    from posdiag.reports.analysis import corpus_summary

    tok = load_tokenizer("bytes")
    a = count_texts(["abc", "abc"], tok, max_len=4)
    b = count_texts(["abc", "de"], tok, max_len=4)
    merged = merge_counts([a, b])
    # "abc" in a and in b: the inputs' tallies (1 and 0 duplicates) cannot see it.
    assert merged.units is None
    s = corpus_summary(merged, min_count=1)
    assert s.units is None and s.counted_supports == (4, 4, 3, 0)


def test_group_by_without_group_values_is_a_clear_error() -> None:
    with pytest.raises(PosdiagError) as err:
        count_texts(["a b"], load_tokenizer(), max_len=2, group_by="doc")
    assert str(err.value) == (
        "--group-by doc: the texts carry no group values (read them with "
        "posdiag.corpus.sources.open_source(..., group_by=FIELD))"
    )
