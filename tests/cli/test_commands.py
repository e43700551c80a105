"""CLI: every core command, every bad input (exact text, exit code 2), --json."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import Result
from safetensors.numpy import load_file, save_file

import posdiag
from posdiag.encodings import REGISTRY
from posdiag.reports.diagnosis import saving_phrase


def run(cli: Callable[..., Result], *args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    return cli(list(args), input=input)


def fails(cli: Callable[..., Result], args: list[str], message: str) -> None:
    r = run(cli, *args)
    assert r.exit_code == 2, r.output
    assert r.stderr == f"Error: {message}\n"
    assert r.stdout == ""


def test_stress_json_on_synthetic_corpus(cli: Callable[..., Result], synth_corpus: Path) -> None:
    r = run(cli, "stress", str(synth_corpus), "--min-count", "50", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    c = doc["corpus"]
    assert (c["sequences"], c["tokens"], c["n_eff"], c["view"]) == (600, 7200, 12, "text")
    assert c["tokenizer"] == "whitespace" and c["min_count"] == 50 and c["dropped"] == []
    names = [e["name"] for e in doc["encodings"]]
    assert set(names) == {
        "nope",
        "sinusoidal",
        "learned-random",
        "rope",
        "alibi",
        "alibi-kernel",
        "t5",
        "mds-1",
        "mds-2",
        "mds-3",
    }
    stresses = [e["stress"] for e in doc["encodings"]]
    assert stresses == sorted(stresses)
    row = {e["name"]: e for e in doc["encodings"]}
    assert row["nope"]["stress"] == 1.0 and row["nope"]["spearman"] is None
    by_rank = doc["spectrum"]["stress_by_rank"]
    # mds-r is scored held-out; its in-sample figure is the eigenvalue tail.
    assert row["mds-2"]["in_sample"] == pytest.approx(by_rank[1], abs=1e-9)
    assert len(doc["spectrum"]["eigenvalues"]) == 12 and len(by_rank) == 11
    assert set(doc["spectrum"]["effective_rank"]) == {"0.1", "0.05"}


def test_stress_table_and_selected_encodings(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    args = (
        "stress",
        str(synth_corpus),
        "--min-count",
        "50",
        "-e",
        "rope:head_dim=8",
        "-e",
        "mds-2",
    )
    r = run(cli, *args)
    assert r.exit_code == 0, r.output
    assert "sinusoidal" not in r.stdout
    doc = json.loads(run(cli, *args, "--json").stdout)
    row = {e["name"]: e for e in doc["encodings"]}
    # mds-2 stores r(n + d) = 2 (12 + d) numbers; RoPE has no parameters.
    dim = row["mds-2"]["params"]["dim"]
    assert (row["mds-2"]["n_params"], row["rope"]["n_params"]) == (2 * (12 + dim), 0)
    # The table rows, best first, carry the JSON figures at the printed precision.
    cells = [
        [c.strip() for c in line.strip("│").split("│")]
        for line in r.stdout.splitlines()
        if line.startswith("│ mds-2 ") or line.startswith("│ rope ")
    ]
    assert cells == [
        [
            name,
            params,
            f"{e['stress']:.4f}",
            f"[{e['ci_low']:.4f}, {e['ci_high']:.4f}]",
            f"{e['kruskal']:.4f}",
            f"{e['spearman']:.3f}",
            f"{e['n_params']:,}",
        ]
        for name, params, e in [
            ("mds-2", f"rank=2, dim={dim}", row["mds-2"]),
            ("rope", "head_dim=8, base=10000", row["rope"]),
        ]
    ]
    assert row["mds-2"]["stress"] < row["rope"]["stress"]
    ranks = doc["spectrum"]["effective_rank"]
    assert (
        "effective rank (crossfit geometry): "
        f"{ranks['0.1']} at stress <= 0.1, {ranks['0.05']} at stress <= 0.05;" in r.stdout
    )


def test_stdin_and_counts_file_give_same_report(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "c.npz"
    r = run(cli, "count", str(synth_corpus), "-o", str(out), "--max-len", "12")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"wrote {out}: 600 sequences, 7,200 tokens, 12 x ")
    assert sp.load_npz(out).shape[0] == 12
    # The plug-in reads the same counts either way; the cross-fit splits a counts file by
    # thinning instead of by sequence (tests/geometry/test_estimator.py checks how close that is).
    plugin = ("--estimator", "plugin")
    a = json.loads(run(cli, "stress", str(out), "--min-count", "50", "--json", *plugin).stdout)
    b = json.loads(
        run(
            cli,
            "stress",
            "-",
            "--max-len",
            "12",
            "--min-count",
            "50",
            "--json",
            *plugin,
            input=synth_corpus.read_text(),
        ).stdout
    )
    assert [e["stress"] for e in a["encodings"]] == [e["stress"] for e in b["encodings"]]
    fails(
        cli,
        ["stress", str(out), "--view", "model"],
        f"{out}: was counted with view='text', not view='model'; drop --view to use {out} as "
        "counted, or count the corpus again with --view model",
    )
    fails(
        cli,
        ["count", str(synth_corpus), "-o", str(out)],
        f"{out}: already exists; pass --force to overwrite",
    )
    assert run(cli, "count", str(synth_corpus), "-o", str(out), "--force").exit_code == 0


def test_build_encoding_safetensors_and_npy(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "enc.safetensors"
    r = run(
        cli,
        "build-encoding",
        str(synth_corpus),
        "--rank",
        "3",
        "--dim",
        "64",
        "--min-count",
        "50",
        "-o",
        str(out),
        "--json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["rank"], doc["dim"], doc["n"], doc["n_params"], doc["dense_params"]) == (
        3,
        64,
        12,
        228,
        768,
    )
    assert doc["saving"] == pytest.approx(1 - 228 / 768)
    assert load_file(str(out))["encoding"].shape == (12, 64)
    npy = tmp_path / "enc.npy"
    r = run(
        cli,
        "build-encoding",
        str(synth_corpus),
        "-r",
        "2",
        "-d",
        "8",
        "--min-count",
        "50",
        "-o",
        str(npy),
    )
    flat = " ".join(r.stdout.split())  # the line is longer than the console: rich wraps it
    assert r.exit_code == 0 and "parameters r(n+d) = 40 vs n*d = 96 (58.3% fewer)" in flat
    assert np.load(npy).shape == (12, 8) and (tmp_path / "enc.json").exists()


def test_encodings_lists_registry(cli: Callable[..., Result]) -> None:
    r = run(cli, "encodings", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    # Every registered encoding once, in registry order, with its defaults as parameters.
    assert [e["name"] for e in rows] == list(REGISTRY)
    by_name = {e["name"]: e for e in rows}
    assert by_name["sinusoidal"]["params"] == {"d": 768, "base": 10000.0}
    assert by_name["sinusoidal"]["types"] == {"d": "int", "base": "float"}
    assert (by_name["nope"]["params"], by_name["nope"]["n_params"]) == ({}, "0")
    assert run(cli, "--version").stdout == f"posdiag {posdiag.__version__}\n"


def test_bad_corpus_inputs(cli: Callable[..., Result], tmp_path: Path, synth_corpus: Path) -> None:
    fails(cli, ["stress", "missing.txt"], "missing.txt: no such file")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    fails(
        cli, ["stress", str(empty)], f"{empty}: the corpus is empty (no tokens after tokenization)"
    )
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok line\nalso ok\n\xc3\x28 broken\n")
    fails(cli, ["stress", str(bad)], f"{bad}: line 3 is not valid UTF-8 (byte 0xc3 at column 1)")
    short = tmp_path / "short.txt"
    short.write_text("one two\n" * 150 + "three\n")
    fails(
        cli,
        ["stress", str(short), "--min-count", "151"],
        f"{short}: fewer than 2 positions have support >= min_count=151 "
        "(n_eff=0; supports of positions 0..4: 151, 150, 0, 0, 0; distinct sampling units: 2, 1, "
        "0, 0, 0); lower --min-count to 1 or add data",
    )
    j = tmp_path / "c.jsonl"
    j.write_text('{"sentence": "a b"}\n')
    fails(cli, ["stress", str(j)], f"{j}: line 1 has no column 'text'; columns: sentence")
    fails(
        cli,
        ["stress", str(j), "--column", "label"],
        f"{j}: line 1 has no column 'label'; columns: sentence",
    )
    fails(
        cli,
        ["stress", str(synth_corpus), "--view", "chars"],
        "'view' must be one of text, model, packed; got 'chars'",
    )
    fails(
        cli,
        ["stress", str(synth_corpus), "--max-len", "0"],
        "'max_len' must be an int in [1, inf]; got 0",
    )
    fails(
        cli,
        ["stress", str(synth_corpus), "--min-count", "0"],
        "'min_count' must be an int in [1, inf]; got 0",
    )


def test_bad_tokenizer(cli: Callable[..., Result], tmp_path: Path, synth_corpus: Path) -> None:
    bad = tmp_path / "tok.json"
    bad.write_text('{"version": "1.0"}')
    r = run(cli, "stress", str(synth_corpus), "--tokenizer", str(bad))
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: {bad}: not a valid tokenizer.json (")
    assert r.stderr.count("\n") == 1
    fails(
        cli,
        ["stress", str(synth_corpus), "-t", "nothere/tokenizer.json"],
        "tokenizer 'nothere/tokenizer.json': no such file (built-in tokenizers: whitespace, bytes)",
    )


def test_bad_encodings(cli: Callable[..., Result], tmp_path: Path, synth_corpus: Path) -> None:
    c = str(synth_corpus)
    base = ["stress", c, "--min-count", "50", "-e"]
    fails(
        cli,
        [*base, "sinusoid"],
        "unknown encoding 'sinusoid'; did you mean 'sinusoidal'? encodings: nope, sinusoidal, "
        "scaled-sinusoidal, "
        "learned-random, learned, rope, rope-linear, rope-ntk, rope-dynamic, rope-yarn, "
        "rope-llama3, rope-longrope, xpos, alibi, alibi-kernel, t5, kerple-log, kerple-power, "
        "shaw, mds",
    )
    fails(
        cli,
        [*base, "rope:theta=3"],
        "encoding 'rope': unknown parameter 'theta'; "
        "parameters: head_dim, base, partial_rotary_factor, attention_factor",
    )
    fails(cli, [*base, "mds-12"], "'rank' must be an int in [1, n_eff-1=11]; got 12")
    fails(cli, [*base, "learned"], "encoding 'learned': parameter 'path' is required")
    fails(cli, [*base, "learned:path=nothere.npy"], "learned: path 'nothere.npy': no such file")
    three = tmp_path / "t3.npy"
    np.save(three, np.zeros((12, 2, 2)))
    fails(
        cli,
        [*base, f"learned:path={three}"],
        f"learned: {three}: table must be 2-D (positions x d); got shape (12, 2, 2)",
    )
    short = tmp_path / "short.npy"
    np.save(short, np.zeros((5, 4)))
    fails(
        cli,
        [*base, f"learned:path={short}"],
        f"learned: {short}: table has 5 rows; the corpus needs n_eff=12",
    )
    nan = tmp_path / "nan.npy"
    table = np.zeros((20, 4))
    table[3, 1] = np.nan
    np.save(nan, table)
    fails(
        cli,
        [*base, f"learned:path={nan}"],
        f"learned: {nan}: table must be finite; got nan at row 3, column 1 (1 non-finite values)",
    )
    st = tmp_path / "model.safetensors"
    save_file(
        {"wte.weight": np.zeros((9, 4), np.float32), "h.0.w": np.zeros((4, 4), np.float32)}, str(st)
    )
    fails(
        cli,
        [*base, f"learned:path={st},tensor=wpe"],
        f"learned: {st}: no tensor 'wpe'; tensors: h.0.w, wte.weight",
    )
    fails(
        cli,
        [*base, f"learned:path={st}"],
        f"learned: {st}: no position-embedding tensor under a known name; "
        "pass tensor=NAME; tensors: h.0.w, wte.weight",
    )


def test_learned_from_safetensors_checkpoint(
    cli: Callable[..., Result], tmp_path: Path, synth_corpus: Path
) -> None:
    st = tmp_path / "model.safetensors"
    rng = np.random.default_rng(0)
    save_file({"transformer.wpe.weight": rng.normal(size=(64, 8)).astype(np.float32)}, str(st))
    r = run(
        cli,
        "stress",
        str(synth_corpus),
        "--min-count",
        "50",
        "-e",
        f"learned:path={st}",
        "--estimator",
        "plugin",
        "--json",
    )
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["encodings"]
    assert row["name"] == "learned" and row["n_params"] == 12 * 8
    # Brute force (docs/geometry.md sections 2 and 4): token frequencies per position, B_H =
    # -1/2 J (D_H o D_H) J, B_E = (JP)(JP)^T of the first 12 rows, stress from their cosine.
    lines = [line.split() for line in synth_corpus.read_text().splitlines()]
    vocab = sorted({t for line in lines for t in line})
    mu = np.zeros((12, len(vocab)))
    for line in lines:
        for i, t in enumerate(line):
            mu[i, vocab.index(t)] += 1
    mu /= mu.sum(axis=1, keepdims=True)
    d2 = 1 - np.sqrt(mu) @ np.sqrt(mu).T
    j = np.eye(12) - 1 / 12
    b_h = -0.5 * j @ d2 @ j
    p = j @ load_file(str(st))["transformer.wpe.weight"][:12].astype(np.float64)
    b_e = p @ p.T
    cos = max(0.0, float(np.sum(b_h * b_e))) / (np.linalg.norm(b_h) * np.linalg.norm(b_e))
    assert row["stress"] == pytest.approx(np.sqrt(1 - cos**2), rel=1e-6)


def test_build_encoding_bad_inputs(
    cli: Callable[..., Result], tmp_path: Path, synth_corpus: Path
) -> None:
    c = str(synth_corpus)
    out = tmp_path / "e.safetensors"
    fails(
        cli,
        ["build-encoding", c, "--min-count", "50", "-r", "0", "-o", str(out)],
        "'rank' must be an int in [1, n_eff-1=11]; got 0",
    )
    fails(
        cli,
        ["build-encoding", c, "--min-count", "50", "-r", "12", "-o", str(out)],
        "'rank' must be an int in [1, n_eff-1=11]; got 12",
    )
    fails(
        cli,
        ["build-encoding", c, "--min-count", "50", "-r", "4", "-d", "3", "-o", str(out)],
        "'dim' must be an int in [rank=4, inf]; got 3",
    )
    fails(
        cli,
        ["build-encoding", c, "-o", str(tmp_path / "e.pt")],
        f"'output' must end with .safetensors or .npy; got '{tmp_path / 'e.pt'}'",
    )
    fails(
        cli,
        ["build-encoding", c, "-o", str(tmp_path / "no" / "e.npy")],
        f"{tmp_path / 'no' / 'e.npy'}: folder '{tmp_path / 'no'}' does not exist",
    )
    out.write_bytes(b"precious")
    fails(
        cli,
        ["build-encoding", c, "--min-count", "50", "-o", str(out)],
        f"{out}: already exists; pass --force to overwrite",
    )
    assert out.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.safetensors", "synth.txt"]
    fails(
        cli,
        ["count", c, "-o", str(tmp_path / "c.txt")],
        f"'output' must end with .npz; got '{tmp_path / 'c.txt'}'",
    )


def test_piped_run_prints_no_progress_and_quiet_is_accepted(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    r = run(cli, "stress", str(synth_corpus), "--min-count", "50", "--json", "--quiet")
    assert r.exit_code == 0 and r.stderr == ""
    r = run(cli, "stress", str(synth_corpus), "--min-count", "50", "-e", "nope")
    assert r.exit_code == 0 and r.stderr == ""


def test_interrupted_count_leaves_no_file(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez_compressed", interrupt)
    r = run(cli, "count", str(synth_corpus), "-o", str(tmp_path / "c.npz"))
    assert r.exit_code != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synth.txt"]


@pytest.mark.parametrize(
    "command",
    [
        ["stress", "--shards", "0"],
        ["diagnose", "--replicates", "5"],
        ["check", "--no-config", "-e", "rope", "--max-stress", "1", "--replicates", "5"],
    ],
)
def test_analysis_commands_share_the_reading_options(
    cli: Callable[..., Result], command: list[str], synth_corpus: Path
) -> None:
    """--limit/--sample reach the reader whatever the command (a corpus is read one way)."""
    name, *opts = command
    r = run(cli, name, str(synth_corpus), *opts, "--min-count", "50", "--limit", "250", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["corpus"]["sequences"] == 250
    r = run(cli, name, str(synth_corpus), *opts, "--min-count", "50", "--sample", "0.5", "--json")
    assert r.exit_code == 0, r.output
    assert 200 < json.loads(r.stdout)["corpus"]["sequences"] < 400


def _help(cli: Callable[..., Result], command: str) -> str:
    r = cli([command, "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert r.exit_code == 0, r.output
    # Help panels wrap and box their lines; join them into one string of words.
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.stdout).split())


@pytest.mark.parametrize(
    ("command", "text"),
    [
        ("stress", "hf:OWNER/NAME[:CONFIG][@SPLIT]"),
        ("stress", "hub data sets [default: $POSDIAG_DATA_DIR]."),
        ("count", "hub data sets [default: $POSDIAG_DATA_DIR]."),
        ("synth", "bump width in tokens [default: n/2]."),
        ("check", "[default: the nearest posdiag.toml, else pyproject.toml with [tool.posdiag],"),
        ("diff", "[default: each corpus's effective rank at --tolerance]"),
    ],
)
def test_help_keeps_square_brackets(cli: Callable[..., Result], command: str, text: str) -> None:
    assert text in _help(cli, command)


def test_inspect_title_names_the_tensor_found(
    cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a short relative path keeps the title on one line
    path = Path("model.safetensors")
    table = np.random.default_rng(0).normal(0, 0.02, (8, 4)).astype(np.float32)
    save_file({"bert.embeddings.position_embeddings.weight": table}, str(path))
    # Found by its known name: the title and the JSON name it, not a placeholder.
    r = cli(["inspect", str(path)])
    assert r.exit_code == 0, r.output
    assert f"{path} [bert.embeddings.position_embeddings.weight]: 8 x 4" in r.stdout
    r = cli(["inspect", str(path), "--json"])
    assert json.loads(r.stdout)["tensor"] == "bert.embeddings.position_embeddings.weight"
    r = cli(["inspect", str(path), "--tensor", "bert.embeddings.position_embeddings.weight"])
    assert f"{path} [bert.embeddings.position_embeddings.weight]: 8 x 4" in r.stdout


def test_corpus_source_with_brackets_is_shown_verbatim(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    pattern = str(synth_corpus.parent / "[s]ynth.txt")  # a glob matching the one file
    r = cli(["stress", pattern, "--min-count", "50", "--shards", "0"])
    assert r.exit_code == 0, r.output
    assert "[s]ynth.txt" in r.stdout


def test_saving_phrase_says_more_when_the_factorisation_costs_more() -> None:
    assert saving_phrase(0.88) == "88% fewer"
    assert saving_phrase(-0.5308) == "53% more"
    assert saving_phrase(0.957, 1) == "95.7% fewer"


def test_diagnose_reading_never_says_negative_fewer(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    # n_eff = 12, d = 2: the rank reaching 0.01 costs r(12+2) > 24 parameters.
    args = ["diagnose", str(synth_corpus), "--min-count", "50", "--shards", "0"]
    r = cli([*args, "--dim", "2", "--target", "0.01", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rank = doc["rank"]
    assert rank["saving"] < 0
    expected = f"{-rank['saving']:.0%} more"
    assert f"({expected}, d=2)" in rank["reading"]
    assert f"({expected} parameters than a full table)" in doc["recommendation"]["text"]
    assert "-" not in rank["reading"].split("(")[-1]
