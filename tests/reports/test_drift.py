"""posdiag diff: drift between corpora, against brute-force numpy computations."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.cli.app import app
from posdiag.corpus.reading import Reading
from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import count_texts, save_counts
from posdiag.geometry.core import stress
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.drift import corpus_drift, count_pair, fitted_stress
from posdiag.reports.options import Analysis
from posdiag.reports.scores import score_encodings
from tests._data import drift_distributions, sample_texts
from tests.render.test_plots import PIXELS, png_size


def _corpus(path: Path, n: int, seed: int, sequences: int = 500) -> Path:
    mu = drift_distributions(n, 30, rank=2, seed=seed)
    path.write_text("\n".join(sample_texts(mu, sequences, seed=seed + 10)) + "\n")
    return path


def _dense(paths: list[Path], n: int) -> list[np.ndarray]:
    lines = [[ln.split() for ln in p.read_text().splitlines() if ln.strip()] for p in paths]
    vocab = sorted({w for ls in lines for ln in ls for w in ln})
    idx = {w: k for k, w in enumerate(vocab)}
    out = []
    for ls in lines:
        c = np.zeros((n, len(vocab)))
        for ln in ls:
            for i, w in enumerate(ln[:n]):
                c[i, idx[w]] += 1
        out.append(c)
    return out


def _brute_mds(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = np.sqrt(c / c.sum(axis=1, keepdims=True))
    d2 = np.clip(1.0 - s @ s.T, 0.0, None)
    n = len(c)
    j = np.eye(n) - 1.0 / n
    b = -0.5 * j @ d2 @ j
    lam, u = np.linalg.eigh(b)
    order = np.argsort(lam)[::-1]
    return b, lam[order], u[:, order]


def test_diff_a_a_reports_zero_drift(cli: Callable[..., Result], synth_corpus: Path) -> None:
    res = cli(["diff", str(synth_corpus), str(synth_corpus), "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["position_hellinger"] == [0.0] * doc["n"]
    assert doc["geometry_stress"] == pytest.approx(0.0, abs=1e-12)
    assert doc["a_on_b"] == pytest.approx(doc["b_optimum"], abs=1e-12)
    assert doc["b_on_a"] == pytest.approx(doc["a_optimum"], abs=1e-12)
    assert doc["changed"] == []
    assert min(doc["position_reference"]) > 0.0 and doc["above_reference"] == []
    assert [r["stress_a"] for r in doc["rankings"]] == [r["stress_b"] for r in doc["rankings"]]


def test_one_tokenizer_instance_makes_ids_agree(synth_corpus: Path, tmp_path: Path) -> None:
    # The same lines in another order: the whitespace tokenizer sees words in another order,
    # but the position counts are the same, so a correct diff shows no drift at all.
    lines = synth_corpus.read_text().splitlines()
    rev = tmp_path / "reversed.txt"
    rev.write_text("\n".join(reversed(lines)) + "\n")
    a, b = count_pair(str(synth_corpus), str(rev))
    assert a.vocab_size == b.vocab_size
    assert (a.matrix != b.matrix).nnz == 0
    d = corpus_drift(a, b)
    assert max(d.position_hellinger) == 0.0 and d.geometry_stress < 1e-12


def test_drift_matches_brute_force(tmp_path: Path) -> None:
    pa = _corpus(tmp_path / "a.txt", 12, seed=1)
    pb = _corpus(tmp_path / "b.txt", 10, seed=5)
    a, b = count_pair(str(pa), str(pb), Reading(max_len=16))
    # The brute force below is the plug-in geometry.
    d = corpus_drift(a, b, analysis=Analysis(min_count=50, estimator="plugin"), rank=2)
    assert (d.a.n_eff, d.b.n_eff, d.n) == (12, 10, 10)
    ca, cb = _dense([pa, pb], 10)
    sa = np.sqrt(ca / ca.sum(axis=1, keepdims=True))
    sb = np.sqrt(cb / cb.sum(axis=1, keepdims=True))
    expect = np.sqrt(np.clip(1.0 - np.sum(sa * sb, axis=1), 0.0, 1.0))
    np.testing.assert_allclose(d.position_hellinger, expect, atol=1e-7)
    ba, lam_a, ua = _brute_mds(ca)
    bb, lam_b, ub = _brute_mds(cb)
    xa = ua[:, :2] * np.sqrt(lam_a[:2])
    xb = ub[:, :2] * np.sqrt(lam_b[:2])
    ja = xa - xa.mean(axis=0)
    jb = xb - xb.mean(axis=0)
    assert d.a_on_b == pytest.approx(stress(bb, ja @ ja.T), abs=1e-9)
    assert d.b_on_a == pytest.approx(stress(ba, jb @ jb.T), abs=1e-9)
    assert d.b_optimum == pytest.approx(np.sqrt(np.sum(lam_b[2:] ** 2) / np.sum(lam_b**2)))
    assert d.geometry_stress == pytest.approx(stress(bb, ba), abs=1e-9)
    # Eckart-Young: A's rank-2 encoding cannot beat B's own rank-2 optimum on B.
    assert d.a_on_b >= d.b_optimum - 1e-12 and d.b_on_a >= d.a_optimum - 1e-12
    # Rankings: each side's rank order is its own stress order on the common positions.
    for rows, key in ((d.rankings, "a"), (sorted(d.rankings, key=lambda r: r.rank_b), "b")):
        values = [getattr(r, f"stress_{key}") for r in rows]
        assert values == sorted(values)
    geo_b = corpus_geometry(b, 50)
    assert geo_b.n_eff == 10
    best_b = score_encodings(geo_b)[0]
    assert [r.name for r in d.rankings if r.rank_b == 1] == [best_b.name]
    assert {r.name for r in d.changed} == {r.name for r in d.rankings if r.rank_a != r.rank_b}


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 8), st.integers(0, 10_000))
def test_fitted_stress_equals_the_spec_formula(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, 3)), rng.standard_normal((n, 2))
    bx, by = x @ x.T, y @ y.T
    assert fitted_stress(bx, by) == pytest.approx(stress(bx, by), abs=1e-7)
    assert fitted_stress(bx, 2.5 * bx) == pytest.approx(0.0, abs=1e-12)
    assert fitted_stress(bx, np.zeros_like(bx)) == 1.0


def test_diff_output_states_the_common_positions(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    pa = _corpus(tmp_path / "a.txt", 12, seed=1)
    pb = _corpus(tmp_path / "b.txt", 10, seed=5)
    res = cli(["diff", str(pa), str(pb), "--min-count", "50", "-n", "16"])
    assert res.exit_code == 0, res.stderr
    assert "compared on the common positions 0..9 (n = min(n_eff A, n_eff B) = 10)" in res.stdout
    assert "ranking changes: " in res.stdout


def test_diff_plot_writes_drift_pngs(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "d"
    res = cli(["diff", str(synth_corpus), str(synth_corpus), "--plot", str(out)])
    assert res.exit_code == 0, res.stderr
    for name in ("drift_hellinger.png", "drift_stress.png"):
        assert png_size((out / name).read_bytes()) == PIXELS


def test_whitespace_counts_of_separate_runs_are_aligned_by_word(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    """A whitespace .npz numbers words by its own corpus; diff renumbers them by word."""
    pb = _corpus(tmp_path / "b.txt", 12, seed=5)
    npz, npz_b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert cli(["count", str(synth_corpus), "-o", str(npz)]).exit_code == 0
    assert cli(["count", str(pb), "-o", str(npz_b)]).exit_code == 0
    args = ["--min-count", "50", "--json"]
    from_files = json.loads(cli(["diff", str(synth_corpus), str(pb), *args]).stdout)
    res = cli(["diff", str(npz), str(npz_b), *args])
    assert res.exit_code == 0, res.stderr
    from_npz = json.loads(res.stdout)
    np.testing.assert_allclose(
        from_npz["position_hellinger"], from_files["position_hellinger"], atol=1e-12
    )
    # Counts files keep no shards: their cross-fit thins, as the files' counts without shards.
    unsharded = corpus_drift(*count_pair(str(synth_corpus), str(pb)), Analysis(min_count=50))
    assert from_npz["geometry_stress"] == pytest.approx(unsharded.geometry_stress, abs=1e-12)
    assert max(from_npz["position_hellinger"]) > 0.05  # different corpora: real drift
    # The same counts file against itself: zero drift.
    res = cli(["diff", str(npz), str(npz), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["geometry_stress"] < 1e-12


def test_mismatched_view_or_max_len_is_a_clear_error(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    tok = load_tokenizer("whitespace")
    texts = synth_corpus.read_text().splitlines()
    a = count_texts(texts, tok, max_len=12)
    b = count_texts(texts, tok, max_len=16)
    with pytest.raises(Exception, match=r"max_len 12 vs 16; both corpora must share tokenizer"):
        corpus_drift(a, b)
    c = count_texts(texts, tok, view_name="model", max_len=12)
    with pytest.raises(Exception, match=r"view 'text' vs 'model'"):
        corpus_drift(a, c)
    # Through the CLI: options must match how a counts file was made.
    pa = tmp_path / "a.npz"
    save_counts(a, pa)
    res = cli(["diff", str(pa), str(pa), "--view", "model"])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        f"Error: {pa}: was counted with view='text', not view='model'; drop --view to use {pa} "
        "as counted, or count the corpus again with --view model"
    )


def test_no_drift_reference_separates_noise_from_drift(tmp_path: Path) -> None:
    same = _corpus(tmp_path / "same.txt", 12, seed=1, sequences=1200)
    lines = same.read_text().splitlines()
    half_a, half_b = tmp_path / "ha.txt", tmp_path / "hb.txt"
    half_a.write_text("\n".join(lines[:600]) + "\n")
    half_b.write_text("\n".join(lines[600:]) + "\n")
    other = _corpus(tmp_path / "other.txt", 12, seed=7, sequences=600)
    a, b = count_pair(str(half_a), str(half_b))
    same_drift = corpus_drift(a, b)
    # Two samples of one distribution: the distance is what the re-splits predict.
    ratio = np.mean(same_drift.position_hellinger) / np.mean(same_drift.position_reference)
    assert 0.85 < ratio < 1.15
    a, c = count_pair(str(half_a), str(other))
    real = corpus_drift(a, c)
    assert real.above_reference == tuple(range(real.n))
    assert np.mean(real.position_hellinger) > 1.5 * np.mean(real.position_reference)
    # Seeded: the same seed gives the same reference, another seed another one.
    assert corpus_drift(a, c).position_reference == real.position_reference
    assert (
        corpus_drift(a, c, analysis=Analysis(seed=1)).position_reference != real.position_reference
    )


def test_diff_reads_presets_from_the_data_dir_with_limit_and_sample(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    import datasets

    # The hub error tells the user to pass --data-dir: diff must accept it like the others.
    lines = [f"w{i % 7} w{i % 5} w{i % 3} w{i % 2}" for i in range(300)]
    datasets.Dataset.from_dict({"sentence": lines}).save_to_disk(str(tmp_path / "sst2"))
    args = ["diff", "sst2", "sst2", "--data-dir", str(tmp_path), "--min-count", "10", "--json"]
    res = cli([*args, "--limit", "120"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["a"]["sequences"], doc["b"]["sequences"]) == (120, 120)
    assert doc["geometry_stress"] == 0.0
    res = cli([*args, "--sample", "0.5", "--seed", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert 0 < doc["a"]["sequences"] < 300 and doc["a"]["sequences"] == doc["b"]["sequences"]


def test_every_corpus_command_takes_the_shared_reading_options() -> None:
    import typer

    group = typer.main.get_command(app)
    shared = {"--limit", "--sample", "--data-dir", "--column", "--tokenizer", "--max-len"}
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        opts = {o for p in cmd.params for o in p.opts}
        if "--tokenizer" in opts:
            assert shared <= opts, (name, sorted(shared - opts))


def test_diff_checks_tolerance_before_reading_the_corpora(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing.txt")
    res = cli(["diff", missing, missing, "--tolerance", "2"])
    assert res.exit_code == 2
    assert res.stderr == "Error: 'tolerance' must be a float in [0, 1]; got 2.0\n"


def test_diff_of_token_id_files(
    cli: Callable[..., Result], tmp_path: Path, synth_corpus: Path
) -> None:
    """Pre-training vs fine-tuning shards as .bin ids: counted like corpus_counts does."""
    from posdiag.counts.corpus import corpus_counts

    rng = np.random.default_rng(0)
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    (rng.zipf(1.3, 40_000) % 300).astype(np.uint16).tofile(a)
    (rng.integers(0, 300, 40_000)).astype(np.uint16).tofile(b)
    args = ["--vocab-size", "300", "--max-len", "32", "--min-count", "50", "--json"]
    same = json.loads(cli(["diff", str(a), str(a), *args]).stdout)
    assert same["geometry_stress"] == 0.0 and max(same["position_hellinger"]) == 0.0
    res = cli(["diff", str(a), str(b), *args])
    assert res.exit_code == 0, res.stderr
    drift = json.loads(res.stdout)
    ca = corpus_counts(str(a), vocab_size=300, max_len=32)
    cb = corpus_counts(str(b), vocab_size=300, max_len=32)
    mu_a = ca.matrix.toarray()[0] / ca.supports[0]
    mu_b = cb.matrix.toarray()[0] / cb.supports[0]
    expected = np.sqrt(max(0.0, 1 - np.sum(np.sqrt(mu_a * mu_b))))
    assert drift["position_hellinger"][0] == pytest.approx(expected, abs=1e-9)
    res = cli(["diff", str(a), str(synth_corpus), *args])
    assert res.exit_code == 2
    assert res.stderr == (
        f"Error: cannot compare {a} and {synth_corpus}: tokenizer 'ids' vs 'whitespace'; "
        "both corpora must share tokenizer, view and max_len\n"
    )


def test_diff_of_stdin_with_itself_is_refused(cli: Callable[..., Result]) -> None:
    res = cli(["diff", "-", "-"], input="a b\nb a\n")
    assert res.exit_code == 2
    assert res.stderr == (
        "Error: '-' (stdin) can be read only once; save it to a file to compare it with itself\n"
    )


def _flat(text: str) -> str:
    """The output with rich's line wrapping undone (every run of white space one space)."""
    return " ".join(text.split())


def _halves(corpus: Path, tmp_path: Path) -> tuple[Path, Path]:
    lines = corpus.read_text(encoding="utf-8").splitlines()
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
    b.write_text("\n".join(lines[len(lines) // 2 :]) + "\n", encoding="utf-8")
    return a, b


def test_diff_says_when_its_ranks_do_not_reach_the_tolerance(
    cli: Callable[..., Result], bundled_corpus: Path, tmp_path: Path
) -> None:
    """Issue 34 item 1: the halves of the bundled corpus have a stress floor above 0.1, as stress
    says; diff must say so too (text and JSON), not 'ranks chosen at stress <= 0.1'."""
    a, b = _halves(bundled_corpus, tmp_path)
    res = cli(["diff", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["rank_reached_a"], doc["rank_reached_b"]) == (False, False)
    fa, fb = doc["floor_a"], doc["floor_b"]
    assert min(fa, fb) > 0.1
    assert doc["warnings"] == [
        f"no MDS rank of A reaches stress <= 0.1 on the common positions (floor {fa:.3f}); "
        f"the cross-stress uses A's signal rank {doc['rank_a']} instead",
        f"no MDS rank of B reaches stress <= 0.1 on the common positions (floor {fb:.3f}); "
        f"the cross-stress uses B's signal rank {doc['rank_b']} instead",
    ]
    assert res.stderr == "".join(f"Warning: {w}\n" for w in doc["warnings"])
    text = _flat(cli(["diff", str(a), str(b)]).stdout)
    assert "ranks chosen at stress" not in text
    assert (
        f"ranks A {doc['rank_a']} (signal rank: stress <= 0.1 not reached, floor {fa:.3f}), "
        f"B {doc['rank_b']} (signal rank: stress <= 0.1 not reached, floor {fb:.3f})"
    ) in text
    # The same corpus on both sides: its floor and signal rank are the ones stress reports.
    same = json.loads(cli(["diff", str(a), str(a), "--json"]).stdout)
    st = json.loads(cli(["stress", str(a), "--json", "--shards", "0"]).stdout)["spectrum"]
    assert same["floor_a"] == pytest.approx(st["floor"], abs=1e-12)
    assert same["rank_a"] == st["signal_rank"]


def test_diff_of_a_corpus_with_itself_prints_zero_excess(
    cli: Callable[..., Result], bundled_corpus: Path, tmp_path: Path
) -> None:
    a, _ = _halves(bundled_corpus, tmp_path)
    res = cli(["diff", str(a), str(a)])
    assert res.exit_code == 0, res.stderr
    assert "-0.0000" not in res.stdout
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("│ MDS of")]
    assert len(rows) == 2 and all(ln.split("│")[-2].strip() == "0.0000" for ln in rows)
    assert "geometry stress (B_H of A vs B_H of B, symmetric): 0.0000;" in _flat(res.stdout)


def test_diff_errors_name_the_files_given(cli: Callable[..., Result], tmp_path: Path) -> None:
    """A counts file stores the corpus it was counted from; the error names the .npz given."""
    pa, pb = _corpus(tmp_path / "a.txt", 12, seed=1), _corpus(tmp_path / "b.txt", 12, seed=5)
    na, nb = tmp_path / "a.npz", tmp_path / "b.npz"
    assert cli(["count", str(pa), "-o", str(na), "-n", "16"]).exit_code == 0
    assert cli(["count", str(pb), "-o", str(nb), "-n", "14"]).exit_code == 0
    res = cli(["diff", str(na), str(nb)])
    assert res.exit_code == 2
    assert res.stderr == (
        f"Error: cannot compare {na} and {nb}: max_len 16 vs 14; both corpora must share "
        "tokenizer, view and max_len\n"
    )


def test_diff_verdict_against_the_no_drift_reference(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    """Two halves of one sample: no drift beyond sampling; two different drifts: drift. The
    verdict line gives the geometry stress, the re-splits' mean, sd, max and the threshold."""
    same = _corpus(tmp_path / "same.txt", 12, seed=1, sequences=1200)
    half_a, half_b = _halves(same, tmp_path)
    other = _corpus(tmp_path / "other.txt", 12, seed=7, sequences=600)
    for b, verdict in ((half_b, "no drift beyond sampling"), (other, "drift")):
        args = ["diff", str(half_a), str(b), "--min-count", "50"]
        doc = json.loads(cli([*args, "--json"]).stdout)
        assert doc["verdict"] == verdict and doc["drifted"] is (verdict == "drift")
        ref = np.array(doc["geometry_reference"])
        assert len(ref) == 10
        assert doc["geometry_reference_mean"] == pytest.approx(ref.mean(), abs=1e-15)
        assert doc["geometry_reference_sd"] == pytest.approx(ref.std(ddof=1), abs=1e-15)
        threshold = max(ref.max(), ref.mean() + 3 * ref.std(ddof=1))
        assert doc["drift_threshold"] == pytest.approx(threshold, abs=1e-15)
        assert bool(doc["geometry_stress"] > threshold) is (verdict == "drift")
        text = _flat(cli(args).stdout)
        assert (
            f"verdict: {verdict}: geometry stress {doc['geometry_stress']:.4f} vs "
            f"{ref.mean():.4f} ± {ref.std(ddof=1):.4f} (mean ± sd of 10 random re-splits of A+B "
            f"into A's and B's sizes, seed 0; max {ref.max():.4f}); drift needs more than "
            f"{threshold:.4f} (every re-split and mean + 3 sd)"
        ) in text


def test_geometry_reference_resplits_keep_the_sizes_and_the_pool(tmp_path: Path) -> None:
    """Each re-split deals the pooled counts into groups of A's and B's sizes: by shard when
    both sides have shards, by token at each position otherwise."""
    from posdiag.reports.drift import _resplit, geometry_reference

    pa, pb = _corpus(tmp_path / "a.txt", 12, seed=1), _corpus(tmp_path / "b.txt", 12, seed=5)
    for shards in (0, 4):
        a, b = count_pair(str(pa), str(pb), shards=shards)
        xa, xb = _resplit(a, b, 10, np.random.default_rng(3))
        pooled = (a.matrix[:10] + b.matrix[:10]).toarray()
        np.testing.assert_array_equal(xa.matrix.toarray() + xb.matrix.toarray(), pooled)
        if shards:
            assert len(xa.shards) == len(xb.shards) == 4
            pool = {x.toarray()[:10].tobytes() for x in (*a.shards, *b.shards)}
            assert {x.toarray().tobytes() for x in (*xa.shards, *xb.shards)} == pool
            np.testing.assert_array_equal(sum(x.toarray() for x in xa.shards), xa.matrix.toarray())
        else:
            np.testing.assert_array_equal(xa.supports, a.supports[:10])
            np.testing.assert_array_equal(xb.supports, b.supports[:10])
        ref = geometry_reference(a, b, 10, draws=3, seed=2)
        assert ref == geometry_reference(a, b, 10, draws=3, seed=2)
        assert ref != geometry_reference(a, b, 10, draws=3, seed=3)
        assert all(0.0 < r < 1.0 for r in ref)


def test_diff_draws_sets_the_reference_and_zero_gives_no_verdict(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    args = ["diff", str(synth_corpus), str(synth_corpus), "--min-count", "50"]
    doc = json.loads(cli([*args, "--draws", "3", "--json"]).stdout)
    assert len(doc["geometry_reference"]) == 3
    doc = json.loads(cli([*args, "--draws", "0", "--json"]).stdout)
    assert doc["geometry_reference"] == [] and doc["drifted"] is None
    assert doc["verdict"] == "not judged (no reference)"
    assert "verdict:" not in cli([*args, "--draws", "0"]).stdout
    missing = str(tmp_path / "missing.txt")  # refused before the corpora are read
    res = cli(["diff", missing, missing, "--draws", "1"])
    assert res.exit_code == 2
    assert res.stderr == "Error: 'draws' must be 0 (no verdict) or an int >= 2; got 1\n"
