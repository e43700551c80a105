"""Sources: every file format, folders and globs, datasets code paths, presets, offline hub."""

from __future__ import annotations

import csv
import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import Result

from posdiag.corpus.sources import PRESETS, HubUnavailable, open_source
from posdiag.errors import PosdiagError

TEXTS = ["the cat sat", "a dog, barking", "zebra", "naïve café", "last one here"]


def _write(path: Path, fmt: str, texts: list[str], column: str = "text") -> Path:
    """Write ``texts`` in ``fmt`` with independent writers (json, csv, pyarrow)."""
    base = fmt.removesuffix(".gz")
    if base == "txt":
        data = "\n".join(texts) + "\n"
    elif base == "jsonl":
        data = "".join(json.dumps({column: t, "id": k}) + "\n" for k, t in enumerate(texts))
    elif base == "json":
        data = json.dumps([{column: t} for t in texts])
    elif base in ("csv", "tsv"):
        out = path.with_suffix(".tmp")
        with open(out, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, delimiter="\t" if base == "tsv" else ",")
            w.writerow(["id", column])
            w.writerows([k, t] for k, t in enumerate(texts))
        data = out.read_text(encoding="utf-8")
        out.unlink()
    else:
        assert base == "parquet"
        pq.write_table(pa.table({column: texts, "n": list(range(len(texts)))}), path)
        return path
    raw = data.encode("utf-8")
    path.write_bytes(gzip.compress(raw) if fmt.endswith(".gz") else raw)
    return path


FMTS = ["txt", "txt.gz", "jsonl", "jsonl.gz", "json", "json.gz", "csv", "tsv.gz", "parquet"]


@pytest.mark.parametrize("fmt", FMTS)
def test_every_format_yields_the_same_texts(tmp_path: Path, fmt: str) -> None:
    path = _write(tmp_path / f"c.{fmt}", fmt, TEXTS)
    assert list(open_source(str(path)).texts()) == TEXTS


def test_parquet_length_comes_from_the_footer(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.parquet", "parquet", TEXTS)
    src = open_source(str(path), limit=3)
    assert (src.length, src.expected) == (5, 3)
    assert list(src.texts()) == TEXTS[:3]


def test_folder_and_glob_read_sorted_files(tmp_path: Path) -> None:
    d = tmp_path / "shards"
    d.mkdir()
    _write(d / "b.jsonl", "jsonl", TEXTS[2:])
    _write(d / "a.txt.gz", "txt.gz", TEXTS[:2])
    (d / "README.md").write_text("not a shard\n")
    (d / ".hidden.txt").write_text("skipped\n")
    assert list(open_source(str(d)).texts()) == TEXTS
    assert list(open_source(str(d / "*.jsonl")).texts()) == TEXTS[2:]
    with pytest.raises(PosdiagError, match=r"the glob matches no corpus files"):
        open_source(str(d / "*.csv"))


def test_an_existing_file_with_glob_characters_is_read_as_itself(tmp_path: Path) -> None:
    _write(tmp_path / "data[1].txt", "txt", TEXTS)
    _write(tmp_path / "d.txt", "txt", TEXTS[:1])
    assert list(open_source(str(tmp_path / "data[1].txt")).texts()) == TEXTS
    # Without such a file the name is still a glob ([d] matches 'd').
    assert list(open_source(str(tmp_path / "[d].txt")).texts()) == TEXTS[:1]


def test_limit_and_seeded_sample(tmp_path: Path) -> None:
    lines = [f"line {k}" for k in range(200)]
    path = _write(tmp_path / "c.txt", "txt", lines)
    assert list(open_source(str(path), limit=7).texts()) == lines[:7]
    rng = np.random.default_rng(5)
    expect = [t for t in lines if rng.random() < 0.3]
    got = list(open_source(str(path), sample=0.3, seed=5).texts())
    assert got == expect and 0 < len(got) < 200
    assert got != list(open_source(str(path), sample=0.3, seed=6).texts())
    with pytest.raises(PosdiagError, match=r"^'sample' must be a float in \(0, 1\]; got 1.5$"):
        open_source(str(path), sample=1.5)


def test_save_to_disk_folders_go_through_datasets(tmp_path: Path) -> None:
    import datasets

    ds = datasets.Dataset.from_dict({"sentence": TEXTS, "label": [0, 1, 0, 1, 0]})
    ds.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": ds, "validation": ds.select([0, 1])}).save_to_disk(
        str(tmp_path / "two")
    )
    assert list(open_source(str(tmp_path / "one"), "sentence").texts()) == TEXTS
    src = open_source(str(tmp_path / "two"), "sentence")
    assert (src.format, src.length, list(src.texts())) == ("disk", 5, TEXTS)
    assert list(open_source(f"{tmp_path / 'two'}@validation", "sentence").texts()) == TEXTS[:2]
    # The Arrow stream files inside a saved data set are a corpus of their own.
    (arrow,) = sorted((tmp_path / "one").glob("*.arrow"))
    assert list(open_source(str(arrow), "sentence").texts()) == TEXTS
    with pytest.raises(PosdiagError) as err:
        open_source(str(tmp_path / "one"))
    assert str(err.value) == f"{tmp_path / 'one'}: no column 'text'; columns: sentence, label"


def test_presets_resolve_to_a_local_copy_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    ds = datasets.Dataset.from_dict({"sentence": TEXTS})
    datasets.DatasetDict({"train": ds, "validation": ds.select([3])}).save_to_disk(
        str(tmp_path / "sst2")
    )
    # A clone of a hub repository: one folder per config, split-named parquet files.
    clone = tmp_path / "wikitext" / "wikitext-2-raw-v1"
    clone.mkdir(parents=True)
    _write(clone / "train-00000-of-00001.parquet", "parquet", TEXTS[:4])
    _write(clone / "test-00000-of-00001.parquet", "parquet", TEXTS[4:])
    root = str(tmp_path)
    assert list(open_source("sst2", data_dir=root).texts()) == TEXTS
    assert list(open_source("sst2@validation", data_dir=root).texts()) == [TEXTS[3]]
    monkeypatch.setenv("POSDIAG_DATA_DIR", root)
    src = open_source("wikitext-2")
    assert (src.format, src.column, list(src.texts())) == ("hf", "text", TEXTS[:4])
    assert list(open_source("wikitext-2@test").texts()) == TEXTS[4:]
    assert PRESETS["wikitext-2"].config == "wikitext-2-raw-v1"


def test_hub_unreachable_fails_fast_with_the_local_form(
    cli: Callable[..., Result], offline_datasets: None
) -> None:
    t0 = time.perf_counter()
    with pytest.raises(HubUnavailable):
        open_source("hf:nobody/nothing:cfg@test")
    assert time.perf_counter() - t0 < 20  # datasets' own retries take minutes
    r = cli(["stress", "sst2"])
    assert r.exit_code == 2
    assert r.stderr == (
        "Error: sst2: cannot reach the Hugging Face Hub (HF_DATASETS_OFFLINE=1) and it is not "
        'in the datasets cache; make a local copy on a connected machine: python -c "import '
        "datasets; datasets.load_dataset('stanfordnlp/sst2', split='train')"
        ".to_parquet('sst2.parquet')\", then run posdiag stress sst2.parquet --column sentence "
        "(or datasets.load_dataset('stanfordnlp/sst2', split='train').save_to_disk('DIR/sst2') "
        "there and pass --data-dir DIR)\n"
    )


def test_unknown_preset_lists_the_presets(cli: Callable[..., Result]) -> None:
    r = cli(["stress", "sst3"])
    assert r.exit_code == 2
    assert r.stderr == (
        "Error: sst3: no such file, and not a preset (presets: sst2, imdb, wikitext-2, "
        "wikitext-103, tinystories, c4-en; see 'posdiag corpora'; hub data sets: "
        "hf:OWNER/NAME)\n"
    )


@pytest.mark.parametrize("kind", ["gzip", "parquet"])
def test_corrupt_files_are_named_and_nothing_is_written(
    cli: Callable[..., Result], tmp_path: Path, kind: str
) -> None:
    if kind == "gzip":
        good = _write(tmp_path / "good.txt.gz", "txt.gz", TEXTS * 2000)
        bad = tmp_path / "bad.txt.gz"
        bad.write_bytes(good.read_bytes()[:-40])
        expect = f"Error: {bad}: corrupt gzip file (Compressed file ended before the end-of-stream"
    else:
        good = _write(tmp_path / "good.parquet", "parquet", TEXTS)
        bad = tmp_path / "bad.parquet"
        bad.write_bytes(good.read_bytes()[:-20])
        expect = f"Error: {bad}: not a valid parquet file ("
    out = tmp_path / "c.npz"
    r = cli(["count", str(bad), "-o", str(out)])
    assert r.exit_code == 2 and r.stderr.startswith(expect) and r.stderr.count("\n") == 1
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [good.name, bad.name]
    )


def test_bad_token_files(cli: Callable[..., Result], tmp_path: Path) -> None:
    ids = np.arange(100, dtype=np.uint16)
    ids.tofile(tmp_path / "ok.bin")
    (tmp_path / "odd.bin").write_bytes(ids.tobytes()[:-1])
    r = cli(["stress", str(tmp_path / "odd.bin"), "--vocab-size", "100"])
    assert r.exit_code == 2
    assert r.stderr == (
        f"Error: {tmp_path / 'odd.bin'}: size 199 bytes is not a multiple of 2 (--dtype uint16)\n"
    )
    r = cli(["stress", str(tmp_path / "ok.bin"), "--vocab-size", "90", "-n", "8"])
    assert r.exit_code == 2
    assert r.stderr == (
        f"Error: {tmp_path / 'ok.bin'}: token id 90 at offset 90 is outside [0, --vocab-size=90)\n"
    )
    r = cli(["stress", str(tmp_path / "ok.bin")])
    assert r.exit_code == 2 and "need --vocab-size" in r.stderr


def test_corpora_lists_the_presets(cli: Callable[..., Result]) -> None:
    r = cli(["corpora", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert [row["name"] for row in rows] == list(PRESETS)
    assert rows[0] == {
        "name": "sst2",
        "dataset": "stanfordnlp/sst2",
        "config": None,
        "split": "train",
        "column": "sentence",
        "summary": "SST-2 movie-review sentences",
        "splits": ["train", "validation", "test"],
    }
    assert rows[-1]["dataset"] == "allenai/c4" and rows[-1]["split"] == "validation"


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
