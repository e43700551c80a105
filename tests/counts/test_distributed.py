"""Counting on a real Dask cluster (LocalCluster, worker processes) against one process.

One small cluster serves the module (2 single-threaded workers): starting one costs seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.corpus.sources import open_source
from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts._pieces import PIECE_BYTES
from posdiag.counts.core import Counts, align_vocabularies, count_texts, load_counts
from posdiag.counts.corpus import corpus_counts
from posdiag.counts.distributed import (
    Engine,
    Job,
    Partial,
    Piece,
    count_on_dask,
    count_piece,
    dedup_skips,
    engine_from_options,
    job_for,
    plan_pieces,
)
from posdiag.errors import PosdiagError
from posdiag.uncertainty.bootstrap import DEFAULT_SHARDS
from tests._unit_oracle import words_shard

distributed = pytest.importorskip("distributed")

WORDS = [f"w{i}" for i in range(40)] + ["alpha", "beta", "gamma"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    import logging

    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",  # any free port: 8787 may be taken
        silence_logs=logging.ERROR,
    ) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: Any) -> Iterator[Any]:
    with distributed.Client(cluster) as c:
        yield c


def _engine(cluster: Any) -> dict[str, Any]:
    """The keywords of corpus_counts that send the counting to ``cluster``."""
    return {"engine": "dask", "scheduler": cluster.scheduler_address}


def _sized(cluster: Any, piece_bytes: int) -> Engine:
    """The engine of ``cluster`` with pieces of ``piece_bytes``."""
    return Engine("dask", cluster.scheduler_address, piece_bytes=piece_bytes)


def _same(a: Counts, b: Counts) -> None:
    """Bit for bit: the csr arrays, the shards, the vocabulary and the metadata."""
    for x, y in [(a.matrix, b.matrix), *zip(a.shards, b.shards, strict=True)]:
        assert x.shape == y.shape and x.dtype == y.dtype == np.int64
        x, y = sp.csr_matrix(x), sp.csr_matrix(y)
        x.sort_indices()
        y.sort_indices()
        assert np.array_equal(x.indptr, y.indptr)
        assert np.array_equal(x.indices, y.indices)
        assert np.array_equal(x.data, y.data)
    assert len(a.shards) == len(b.shards)
    assert a.vocab == b.vocab
    assert dict(a.meta) == dict(b.meta)


def _lines(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 14)))) for _ in range(n)]


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five files of mixed formats (txt, gz, jsonl, csv) with blank lines: five pieces."""
    d = tmp_path_factory.mktemp("texts")
    rng = np.random.default_rng(7)
    (d / "a.txt").write_text("\n".join(_lines(rng, 60)) + "\n\n\n")
    with gzip.open(d / "b.txt.gz", "wt") as fh:
        fh.write("\n".join(_lines(rng, 45)) + "\n")
    rows = [{"text": t} for t in _lines(rng, 50)] + [{"text": None}, {"text": "  "}]
    (d / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (d / "d.csv").write_text(
        "id,text\n" + "".join(f"{i},{t}\n" for i, t in enumerate(_lines(rng, 30)))
    )
    (d / "e.txt").write_text("\n".join(_lines(rng, 25)) + "\n")
    return d


def _brute_force(
    units: list[list[str]], n: int, k: int, seed: int
) -> tuple[np.ndarray, list[np.ndarray], list[str]]:
    """Whitespace counts by hand: ids by first appearance after 3 specials, shard by content
    (the scalar oracle of docs/geometry.md section 2b)."""
    vocab: dict[str, int] = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2}
    seqs = []
    for u, texts in enumerate(units):
        for i, text in enumerate(texts):
            ids = [vocab.setdefault(w, len(vocab)) for w in text.split()][:n]
            seqs.append((u, i, ids))
    vocab_words = list(vocab)
    total = np.zeros((n, len(vocab)), dtype=np.int64)
    shards = [np.zeros_like(total) for _ in range(k)]
    for _u, _i, ids in seqs:
        s = words_shard([vocab_words[t] for t in ids], seed, k)
        for pos, t in enumerate(ids):
            total[pos, t] += 1
            shards[s][pos, t] += 1
    return total, shards, list(vocab)


def test_text_folder_counts_and_shards_match_one_process_and_brute_force(
    text_dir: Path, cluster: Any
) -> None:
    source = open_source(str(text_dir))
    assert [p.kind for p in plan_pieces(source)] == ["file"] * 5
    one = corpus_counts(str(text_dir), max_len=10, shards=4, shard_seed=11)
    dask = corpus_counts(str(text_dir), max_len=10, shards=4, shard_seed=11, **_engine(cluster))
    _same(one, dask)
    with gzip.open(text_dir / "b.txt.gz", "rt") as fh:
        gz_lines = fh.read().splitlines()
    units = [
        [t for t in (text_dir / "a.txt").read_text().splitlines() if t.strip()],
        [t for t in gz_lines if t.strip()],
        [
            json.loads(x)["text"]
            for x in (text_dir / "c.jsonl").read_text().splitlines()
            if (json.loads(x)["text"] or "").strip()
        ],
        [r.split(",", 1)[1] for r in (text_dir / "d.csv").read_text().splitlines()[1:]],
        [t for t in (text_dir / "e.txt").read_text().splitlines() if t.strip()],
    ]
    total, shards, vocab = _brute_force(units, 10, 4, 11)
    assert np.array_equal(dask.matrix.toarray(), total)
    for got, want in zip(dask.shards, shards, strict=True):
        assert np.array_equal(got.toarray(), want)
    assert list(dask.vocab or ()) == vocab
    # Without shards the single-process pass streams the files in one piece; same counts.
    plain = corpus_counts(str(text_dir), max_len=10, **_engine(cluster))
    _same(corpus_counts(str(text_dir), max_len=10), plain)
    assert np.array_equal(plain.matrix.toarray(), total)


def test_shards_do_not_depend_on_the_batch_size() -> None:
    texts = _lines(np.random.default_rng(3), 300)
    tok = load_tokenizer

    a = count_texts(texts, tok(), max_len=8, shards=5, shard_seed=2, batch_size=1)
    b = count_texts(texts, tok(), max_len=8, shards=5, shard_seed=2, batch_size=1000)
    _same(a, b)
    # Every shard holds about a fifth of the 300 sequences (binomial sd ~ 7).
    sizes = [int(s[0].sum()) for s in a.shards]
    assert sum(sizes) == 300 and all(35 <= s <= 85 for s in sizes)


@pytest.fixture(scope="module")
def parquet_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two parquet files of 4 and 3 row groups (with a null and a blank text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("parquet")
    rng = np.random.default_rng(5)
    for name, rows in (("p1.parquet", 70), ("p2.parquet", 55)):
        texts: list[str | None] = list(_lines(rng, rows))
        texts[3], texts[20] = None, "   "
        pq.write_table(
            pa.table({"text": texts, "n": list(range(rows))}), d / name, row_group_size=20
        )
    return d


def test_parquet_row_groups_match_one_process(parquet_files: Path, cluster: Any) -> None:
    pattern = str(parquet_files / "*.parquet")
    pieces = plan_pieces(open_source(pattern))
    assert [(Path(p.path).name, p.start) for p in pieces] == [
        *(("p1.parquet", g) for g in range(4)),
        *(("p2.parquet", g) for g in range(3)),
    ]
    for shards in (0, 3):
        kw: dict[str, Any] = {"tokenizer": "bytes", "max_len": 16, "shards": shards}
        one = corpus_counts(pattern, **kw)
        _same(one, corpus_counts(pattern, **_engine(cluster), **kw))
    assert one.meta["sequences"] == 121  # 125 rows, a null and a blank in each file


def test_streamed_data_set_shards_match_one_process(parquet_files: Path, cluster: Any) -> None:
    """A local data set folder streamed by ``datasets``: one piece per stream shard (file)."""
    name = f"hf:{parquet_files}"
    pieces = plan_pieces(open_source(name))
    assert [p.kind for p in pieces] == ["stream", "stream"]
    kw: dict[str, Any] = {"max_len": 12, "shards": 3, "shard_seed": 4}
    _same(corpus_counts(name, **kw), corpus_counts(name, **_engine(cluster), **kw))


def test_saved_data_set_row_ranges_match_one_process(tmp_path: Path, cluster: Any) -> None:
    """A save_to_disk folder: one piece per piece_bytes / 128 rows (here 40 of 130)."""
    import datasets

    texts: list[str | None] = list(_lines(np.random.default_rng(2), 130))
    texts[41] = None
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(tmp_path / "saved"))
    name = str(tmp_path / "saved")
    pieces = plan_pieces(open_source(name), piece_bytes=40 * 128)
    assert [(p.kind, p.start, p.stop) for p in pieces] == [
        ("rows", 0, 40),
        ("rows", 40, 80),
        ("rows", 80, 120),
        ("rows", 120, 130),
    ]
    kw: dict[str, Any] = {"max_len": 12, "shards": 3, "shard_seed": 1}
    one = corpus_counts(name, **kw)
    _same(one, corpus_counts(name, engine=_sized(cluster, 40 * 128), **kw))
    assert one.meta["sequences"] == 129


@pytest.fixture(scope="module")
def bin_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ids") / "ids.bin"
    ids = np.random.default_rng(9).zipf(1.3, size=40_007) % 500
    ids.astype(np.uint16).tofile(path)
    return path


@pytest.mark.parametrize("select", [{}, {"limit": 200}, {"sample": 0.3, "seed": 5}])
def test_bin_window_ranges_match_one_process(
    tmp_path: Path, cluster: Any, select: dict[str, Any]
) -> None:
    # V = 8, pieces of 4,096 bytes: ranges of 8,192 tokens (128 windows of 64; 8 x 64 x 8 is
    # less), 5 of them, each cut into 2 position ranges (at least 8 pieces).
    path = tmp_path / "ids.bin"
    (np.random.default_rng(9).zipf(1.3, size=40_007) % 8).astype(np.uint16).tofile(path)
    pieces = plan_pieces(open_source(str(path)), 64, 8, piece_bytes=4096)
    assert len(pieces) == 10 and all(p.start % 64 == 0 for p in pieces)
    assert [(p.start, p.stop) for p in pieces[::2]][:2] == [(0, 8192), (8192, 16384)]
    assert [p.positions for p in pieces[:2]] == [(0, 32), (32, 64)]
    kw: dict[str, Any] = {"max_len": 64, "vocab_size": 8, **select}
    one = corpus_counts(str(path), **kw)
    dask = corpus_counts(str(path), engine=_sized(cluster, 4096), **kw)
    _same(one, dask)
    if not select:
        ids = np.fromfile(path, dtype=np.uint16).astype(np.int64)
        want = np.zeros((64, 8), dtype=np.int64)
        np.add.at(want, (np.arange(ids.size) % 64, ids), 1)
        assert np.array_equal(dask.matrix.toarray(), want)


def test_bin_default_layout_is_eight_position_ranges_stacked_as_one_process(
    bin_file: Path, cluster: Any
) -> None:
    """One window range cut into >= 8 position ranges; their sums arrive in their wire types
    (uint8/uint16 here) and are stacked into the int64 matrix of one process."""
    pieces = plan_pieces(open_source(str(bin_file)), 64, 500)
    assert [p.positions for p in pieces] == [(8 * k, 8 * k + 8) for k in range(8)]
    assert {(p.start, p.stop) for p in pieces} == {(0, 40_007)}
    one = corpus_counts(str(bin_file), max_len=64, vocab_size=500)
    _same(one, corpus_counts(str(bin_file), max_len=64, vocab_size=500, **_engine(cluster)))


def kill_once(piece: Piece, job: Job, marker: Path) -> Partial:
    """Kill this worker the first time piece 2 runs (the marker file records that it did)."""
    if piece.index == 2 and not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return count_piece(piece, job)


def test_a_worker_killed_mid_run_loses_and_doubles_nothing(
    text_dir: Path, client: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "killed"
    source = open_source(str(text_dir))
    tok = load_tokenizer()
    job = job_for(source, tok, view_name="text", max_len=10, shards=4, seed=11)
    counts = count_on_dask(
        source, job, Engine("dask"), tokenizer_name=tok.name, client=client,
        task_fn=functools.partial(kill_once, marker=marker),
    )  # fmt: skip
    assert marker.exists()  # a worker did die
    _same(corpus_counts(str(text_dir), max_len=10, shards=4, shard_seed=11), counts)
    client.wait_for_workers(2, timeout=60)


def test_a_worker_killed_while_id_sums_stream_in_loses_and_doubles_nothing(
    bin_file: Path, client: Any, tmp_path: Path
) -> None:
    """Id pieces: the client appends position-range sums as they arrive; a worker dying mid-run
    (piece 2 of 8) has its pieces rerun and the stacked matrix is still one process's."""
    marker = tmp_path / "killed"
    source = open_source(str(bin_file))
    job = job_for(source, None, view_name="packed", max_len=64, vocab_size=500)
    counts = count_on_dask(
        source, job, Engine("dask"), client=client,
        task_fn=functools.partial(kill_once, marker=marker),
    )  # fmt: skip
    assert marker.exists()
    _same(corpus_counts(str(bin_file), max_len=64, vocab_size=500), counts)
    client.wait_for_workers(2, timeout=60)


def test_a_corrupt_piece_fails_the_run_naming_file_and_offset(
    text_dir: Path, bin_file: Path, cluster: Any, tmp_path: Path
) -> None:
    bad = tmp_path / "texts"
    bad.mkdir()
    for f in ("a.txt", "e.txt"):
        (bad / f).write_bytes((text_dir / f).read_bytes())
    (bad / "c.txt").write_bytes(b"fine line\nbroken \xff line\n")
    with pytest.raises(PosdiagError, match=r"c\.txt: line 2 is not valid UTF-8"):
        corpus_counts(str(bad), **_engine(cluster))
    # A parquet file whose row group 1 is overwritten: its footer (read up front) is intact.
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = tmp_path / "rg.parquet"
    pq.write_table(pa.table({"text": _lines(np.random.default_rng(1), 60)}), pf, row_group_size=20)
    col = pq.ParquetFile(pf).metadata.row_group(1).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    raw = bytearray(pf.read_bytes())
    raw[start + 8 : start + col.total_compressed_size - 4] = b"\xab" * (
        col.total_compressed_size - 12
    )
    pf.write_bytes(bytes(raw))
    with pytest.raises(PosdiagError, match=rf"rg\.parquet: row group 1 \(byte offset {start:,}\)"):
        corpus_counts(str(pf), **_engine(cluster))
    ids = np.fromfile(bin_file, dtype=np.uint16)
    ids[30_001] = 600
    ids.tofile(tmp_path / "bad.bin")
    with pytest.raises(PosdiagError, match=r"bad\.bin: token id 600 at offset 30,001 is outside"):
        corpus_counts(str(tmp_path / "bad.bin"), vocab_size=500, **_engine(cluster))


def test_progress_comes_from_finished_pieces(text_dir: Path, client: Any) -> None:
    seen: list[tuple[int, int, int]] = []
    source = open_source(str(text_dir))
    tok = load_tokenizer()
    job = job_for(source, tok, view_name="text", max_len=10)
    counts = count_on_dask(
        source, job, Engine("dask"), progress=lambda *a: seen.append(a), client=client
    )
    assert len(seen) == 5  # one report per finished piece
    assert seen[-1] == tuple(counts.meta[k] for k in ("documents", "sequences", "tokens"))


def test_cli_count_on_a_running_scheduler(text_dir: Path, cluster: Any, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "d.npz"
    args = ["count", str(text_dir), "-n", "10", "-o", str(out), "--quiet"]
    r = runner.invoke(app, [*args, "--engine", "dask", "--scheduler", cluster.scheduler_address])
    assert r.exit_code == 0, r.output
    # count keeps the default shards' seed in the metadata (the cross-fit splits by them);
    # the file itself stores the total only.
    one = corpus_counts(str(text_dir), max_len=10, shards=DEFAULT_SHARDS)
    _same(dataclasses.replace(one, shards=()), load_counts(out))


def test_cli_stress_intervals_are_the_same_on_dask(text_dir: Path, cluster: Any) -> None:
    """Same shard sums, so the same bootstrap intervals, stress for stress."""
    runner = CliRunner()
    args = ["stress", str(text_dir), "-n", "8", "--min-count", "5", "--shards", "6"]
    args += ["--replicates", "20", "--json", "--quiet", "-e", "sinusoidal", "-e", "mds-2"]
    local = runner.invoke(app, args)
    dask = runner.invoke(app, [*args, "--engine", "dask", "--scheduler", cluster.scheduler_address])
    assert local.exit_code == dask.exit_code == 0, dask.output
    a, b = json.loads(local.stdout), json.loads(dask.stdout)
    assert a["uncertainty"]["shards"] == 6
    assert a["encodings"] == b["encodings"] and a["uncertainty"] == b["uncertainty"]
    assert all(e["ci_low"] <= e["stress"] <= e["ci_high"] for e in a["encodings"])


def test_model_view_on_dask_counts_real_tokens_as_one_process(text_dir: Path, cluster: Any) -> None:
    """The pad id reaches the metadata on Dask too, so min_count counts real tokens there."""
    runner = CliRunner()
    args = ["stress", str(text_dir), "--view", "model", "-n", "24", "--min-count", "5"]
    args += ["--shards", "0", "--json", "--quiet", "-e", "sinusoidal"]
    local = runner.invoke(app, args)
    dask = runner.invoke(app, [*args, "--engine", "dask", "--scheduler", cluster.scheduler_address])
    assert local.exit_code == dask.exit_code == 0, dask.output
    a, b = json.loads(local.stdout)["corpus"], json.loads(dask.stdout)["corpus"]
    assert a["support_unit"] == b["support_unit"] == "real tokens"
    assert a["real_supports"] == b["real_supports"] and a["n_eff"] == b["n_eff"]


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (["--workers", "2"], "--workers applies to --engine dask; got --engine local"),
        (["--engine", "spark"], "'engine' must be one of local, dask; got 'spark'"),
        (["--engine", "dask", "--workers", "0"], "'workers' must be an int"),
        (["--engine", "dask", "--workers", "2", "--scheduler", "tcp://h:1"], "own workers"),
        (["--engine", "dask", "--view", "packed"], "--view packed carries windows"),
        (["--engine", "dask", "--limit", "3"], "--limit selects documents in reading order"),
    ],
)
def test_engine_options_are_checked(
    text_dir: Path, tmp_path: Path, opts: list[str], message: str
) -> None:
    r = CliRunner().invoke(app, ["count", str(text_dir), "-o", str(tmp_path / "x.npz"), *opts])
    assert r.exit_code == 2
    assert message in r.output


def test_stdin_cannot_be_cut_into_pieces() -> None:
    with pytest.raises(PosdiagError, match="stdin cannot be cut into pieces"):
        plan_pieces(open_source("-"))
    assert engine_from_options() == Engine("local")


@pytest.mark.parametrize(
    ("top", "width", "data_type", "index_type"),
    [
        (200, 300, np.uint8, np.uint16),
        (70_000, 65_536, np.uint32, np.uint16),
        (2**33, 65_537, np.int64, np.uint32),
    ],
)
def test_partials_travel_narrow_and_add_without_overflow(
    top: int, width: int, data_type: Any, index_type: Any
) -> None:
    """A partial crosses the wire in the smallest types that hold it; sums are exact int64."""
    import pickle

    from posdiag.counts.distributed import _csr_parts, add_partials

    rng = np.random.default_rng(4)
    dense = rng.integers(0, 3, size=(6, width)).astype(np.int64)
    dense[0, width - 1] = top
    dense[5, 0] = top - 1
    m = sp.csr_matrix(dense)
    data, indices, _, _ = _csr_parts(m)
    assert data.dtype == data_type and indices.dtype == index_type
    p = Partial(m, (m,), 1, 2, 3)
    back = pickle.loads(pickle.dumps(p, protocol=5))
    assert np.array_equal(back.matrix.toarray(), dense)
    # Two arrivals whose entries overflow their wire type when added: the sum widens first.
    total = add_partials(back, back)
    assert total.matrix.dtype == np.int64 and total.shards[0].dtype == np.int64
    assert np.array_equal(total.matrix.toarray(), 2 * dense)
    assert np.array_equal(total.shards[0].toarray(), 2 * dense)
    assert (total.documents, total.sequences, total.tokens) == (2, 4, 6)


def test_cli_run_on_its_own_local_cluster_leaves_stderr_clean(
    bin_file: Path, tmp_path: Path
) -> None:
    """A normal ``--engine dask --workers 2`` run, as a user starts it: a LocalCluster of its
    own, started and closed in the process, and no traceback (nor Dask's shutdown race) after."""
    import subprocess
    import sys

    out = tmp_path / "c.npz"
    args = [sys.executable, "-m", "posdiag", "count", str(bin_file), "--vocab-size", "500"]
    args += ["-n", "64", "-o", str(out), "--engine", "dask", "--workers", "2"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "CommClosedError" not in r.stderr, r.stderr
    assert "Error" not in r.stderr, r.stderr
    _same(corpus_counts(str(bin_file), max_len=64, vocab_size=500), load_counts(out))


def test_only_the_heartbeat_race_is_kept_off_the_worker_log() -> None:
    from posdiag.counts._cluster import ShutdownNoise

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg, (), None)

    keep = ShutdownNoise().filter
    assert not keep(record("Failed to communicate with scheduler during heartbeat."))
    assert keep(record("Compute Failed"))
    assert keep(record("Unexpected exception during heartbeat. Closing worker."))


@pytest.fixture(scope="module")
def long_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .txt (BOM, CRLF, blank lines, multi-byte characters, one line longer than a range)
    and a .jsonl (nulls, blanks, escapes) to be cut into byte ranges."""
    d = tmp_path_factory.mktemp("long")
    rng = np.random.default_rng(12)
    lines = _lines(rng, 150)
    lines[10] = "ünïcödé " * 3 + lines[10]
    lines[40] = " ".join(["long"] * 200)  # ~1,000 bytes: longer than the ranges below
    lines[41] = ""
    lines[70] = "   "
    body = "\n".join(lines[:100]) + "\r\n".join(["", *lines[100:]]) + "\n"
    (d / "big.txt").write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    rows: list[dict[str, Any]] = [{"text": t} for t in _lines(rng, 120)]
    rows[5] = {"text": None}
    rows[6] = {"text": "  "}
    rows[7] = {"text": 'quote " and \\ and \u00e9'}
    (d / "big.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return d


@pytest.mark.parametrize("size", [1, 7, 64, 333, 1_000_000])
def test_byte_ranges_read_every_line_exactly_once(long_files: Path, size: int) -> None:
    """Whatever the cut (one byte per range included), the ranges' texts in order are the
    file's texts as one reader yields them."""
    import posdiag.counts.distributed as D

    for name in ("big.txt", "big.jsonl"):
        source = open_source(str(long_files / name))
        pieces = plan_pieces(source, piece_bytes=size)
        file_size = (long_files / name).stat().st_size
        if size < file_size:
            assert [p.kind for p in pieces] == ["lines"] * -(-file_size // size)
            assert pieces[-1].stop == file_size
        got = [t for p in pieces for t in D.piece_texts(p, source)]
        assert got == list(source.texts())


def test_a_long_text_file_in_byte_ranges_matches_one_process(
    long_files: Path, cluster: Any
) -> None:
    """Several tasks per file; shards by (range, index in range) in both passes."""
    for name in ("big.txt", "big.jsonl"):
        path = str(long_files / name)
        assert len(plan_pieces(open_source(path), piece_bytes=1_500)) >= 3
        kw: dict[str, Any] = {"max_len": 12, "shards": 4, "shard_seed": 3}
        one = corpus_counts(path, **kw)
        dask = corpus_counts(path, engine=_sized(cluster, 1_500), **kw)
        _same(one, dask)
        # The totals equal a plain single pass over the file (no pieces at all).
        plain = corpus_counts(path, max_len=12)
        _same(plain, corpus_counts(path, max_len=12, **_engine(cluster)))
        assert (one.matrix != plain.matrix).nnz == 0 and one.vocab == plain.vocab


def test_a_bad_id_on_dask_names_the_first_offset_in_the_file(tmp_path: Path, cluster: Any) -> None:
    """Two bad ids in one piece (positions 0-31 of the first window range): window 10 at
    position 30 comes before window 11 at position 2 in the file, as one process says."""
    ids = np.zeros(40_000, dtype=np.uint16)
    ids[[64 * 10 + 30, 64 * 11 + 2]] = [8, 9]
    ids.tofile(tmp_path / "ids.bin")
    want = r"ids\.bin: token id 8 at offset 670 is outside \[0, --vocab-size=8\)$"
    with pytest.raises(PosdiagError, match=want):
        corpus_counts(str(tmp_path / "ids.bin"), max_len=64, vocab_size=8)
    with pytest.raises(PosdiagError, match=want):
        corpus_counts(
            str(tmp_path / "ids.bin"), max_len=64, vocab_size=8, engine=_sized(cluster, 4096)
        )


def test_a_bad_line_in_a_byte_range_names_its_offset(tmp_path: Path, cluster: Any) -> None:
    good = "".join(f"line {i} of text\n" for i in range(30)).encode()
    (tmp_path / "bad.txt").write_bytes(good + b"broken \xff line\n" + good)
    with pytest.raises(PosdiagError, match=rf"bad\.txt: line at byte offset {len(good):,} is not"):
        corpus_counts(str(tmp_path / "bad.txt"), engine=_sized(cluster, 100))
    (tmp_path / "bad.jsonl").write_text('{"text": "a b"}\n' * 20 + "{oops\n")
    with pytest.raises(PosdiagError, match=r"bad\.jsonl: line at byte offset 320 is not valid"):
        corpus_counts(str(tmp_path / "bad.jsonl"), engine=_sized(cluster, 100))


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]])
def test_position_range_sums_are_appended_in_row_order_whatever_the_arrival(
    order: list[int],
) -> None:
    """Sums of disjoint row ranges (wire types, one range empty) arriving in any order give
    the int64 matrix of their sum, and the statistics of all of them."""
    import pickle

    from posdiag.counts.distributed import _RowStack

    rng = np.random.default_rng(8)
    dense = rng.integers(0, 300, size=(10, 70)) * (rng.random((10, 70)) < 0.3)
    bounds = [(0, 3), (3, 3), (3, 7), (7, 10)]
    parts = []
    for k, (lo, hi) in enumerate(bounds):
        rows = np.zeros_like(dense)
        rows[lo:hi] = dense[lo:hi]
        p = Partial(sp.csr_matrix(rows.astype(np.int64)), (), k, k + 1, 10 * k)
        parts.append(pickle.loads(pickle.dumps(p, protocol=5)))  # as a worker sends it
    stack = _RowStack(len(parts))
    for k in order:
        stack.add(k, parts[k])
    total = stack.total()
    assert total.matrix.dtype == np.int64
    assert np.array_equal(total.matrix.toarray(), dense)
    assert (total.documents, total.sequences, total.tokens) == (6, 10, 60)


# ---------------------------------------------------------------------------------------------
# The same records in every layout: shards follow content (posdiag.corpus.units), not where a
# line sits


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """1,500 sentences of the bundled corpus as .txt, .jsonl, one .json array, .csv, a parquet
    file of 4 row groups, a folder of three pieces (reversed order inside each), and a .jsonl
    over PIECE_BYTES (each record padded by an unused field) that Dask cuts into ranges."""
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import BUNDLED

    d = tmp_path_factory.mktemp("layouts")
    lines = [t for t in BUNDLED.read_text(encoding="utf-8").splitlines() if t.strip()][:1500]
    rows = [{"text": t} for t in lines]
    out = {"txt": d / "c.txt", "jsonl": d / "c.jsonl", "json": d / "c.json", "csv": d / "c.csv"}
    out["txt"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    out["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out["json"].write_text(json.dumps(rows), encoding="utf-8")
    with open(out["csv"], "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["id", "text"])
        w.writeheader()
        w.writerows({"id": i, "text": t} for i, t in enumerate(lines))
    out["parquet"] = d / "c.parquet"
    pq.write_table(pa.Table.from_pylist(rows), out["parquet"], row_group_size=400)
    folder = d / "pieces"
    folder.mkdir()
    (folder / "1.txt").write_text("\n".join(lines[:500][::-1]) + "\n", encoding="utf-8")
    (folder / "2.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows[500:1000][::-1]), encoding="utf-8"
    )
    pq.write_table(pa.Table.from_pylist(rows[1000:][::-1]), folder / "3.parquet")
    out["folder"] = folder
    pad = "x" * (PIECE_BYTES // len(rows) + 64)
    out["big"] = d / "big.jsonl"
    out["big"].write_text(
        "".join(json.dumps({"text": t, "pad": pad}) + "\n" for t in lines), encoding="utf-8"
    )
    assert out["big"].stat().st_size > PIECE_BYTES
    return out


def _layout_figures(args: list[str]) -> dict[str, Any]:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    doc["corpus"].pop("source")
    # Per-run word ids follow the reading order, so sums run in another order: the last bits.
    return json.loads(json.dumps(doc), parse_float=lambda x: round(float(x), 10) + 0.0)


def test_same_records_in_every_layout_and_on_dask_give_identical_figures(
    layouts: dict[str, Path], cluster: Any
) -> None:
    opts = ["--json", "--quiet", "--max-len", "24", "--min-count", "50", "--replicates", "20"]
    want = _layout_figures(["stress", str(layouts["txt"]), *opts])
    assert want["corpus"]["units"]["items"] == 1500
    for name in ("jsonl", "json", "csv", "parquet", "folder", "big"):
        assert _layout_figures(["stress", str(layouts[name]), *opts]) == want, name
    source = open_source(str(layouts["big"]))
    assert [p.kind for p in plan_pieces(source)] == ["lines", "lines"]
    dask = ["--engine", "dask", "--scheduler", cluster.scheduler_address]
    for name in ("big", "folder", "parquet"):
        got = _layout_figures(["stress", str(layouts[name]), *opts, *dask])
        assert got == want, name


def test_dedup_on_dask_keeps_the_first_copy_in_reading_order_like_one_process(
    tmp_path: Path, cluster: Any
) -> None:
    # Copies within a piece and across pieces (a line of 1.txt again in 3.txt, twice).
    rng = np.random.default_rng(3)
    lines = _lines(rng, 40)
    (tmp_path / "1.txt").write_text("\n".join(lines[:20] + lines[:5]) + "\n")
    (tmp_path / "2.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in lines[20:] + lines[25:27])
    )
    (tmp_path / "3.txt").write_text("\n".join(lines[3:8] + lines[3:5] + ["fresh words"]) + "\n")
    opts = {"max_len": 10, "shards": 4, "shard_seed": 2, "dedup": True}
    one = corpus_counts(str(tmp_path), **opts)
    dask = corpus_counts(str(tmp_path), **opts, **_engine(cluster))
    _same(one, dask)
    read = lines[:20] + lines[:5] + lines[20:] + lines[25:27] + lines[3:8] + lines[3:5]
    read.append("fresh words")
    # Distinct after the view: the first 10 words (max_len) of each line.
    firsts = list(dict.fromkeys(" ".join(t.split()[:10]) for t in read))
    plain = count_texts(firsts, load_tokenizer(), max_len=10)
    mine, theirs = align_vocabularies([one, plain])
    assert (mine.matrix != theirs.matrix).nnz == 0
    u = dask.units
    assert u is not None and (u.items, u.dropped) == (55, 55 - len(firsts))


def test_dedup_skips_are_what_earlier_pieces_hold() -> None:
    u = np.uint64
    got = dedup_skips([np.array([1, 5], u), np.array([2, 5, 9], u), np.array([1, 2, 3], u)])
    assert [g.tolist() for g in got] == [[], [5], [1, 2]]
