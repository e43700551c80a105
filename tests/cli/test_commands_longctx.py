"""Issue 13, item 5: diagnose, check, diff, inspect and report at long contexts.

Each command computes only what it prints, and each long-context path agrees with the
straightforward computation:

- the permutation null of ``I(position; token)`` by one bucketed shuffle: the exact law of the
  permuted table (chi-square against the hypergeometric probabilities), ``KL`` read off the
  shuffled list equal to :func:`positional_information` of the built table, and the dispatch;
- no plug-in geometry where nothing plug-in is printed (spies on ``plugin_bc``): diagnose
  (unless --json), check, diff, inspect, report; no split-half grams for check's fixed encodings;
- the partial spectrum (thresholds lowered so 160 positions take it) against the full ``eigh``:
  check's max-rank-for-stress verdicts and figures, diff's optimum, ranks and cross-stress;
- diff on positions ``0..n-1`` of a longer corpus: the cross-fit restricted without the plug-in
  equals the cross-fit of the first ``n`` positions;
- inspect's table spectrum from the ``d x d`` Gram against the ``n x n`` one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from posdiag.counts.core import Counts, load_counts, save_counts
from posdiag.errors import PosdiagError
from posdiag.geometry import estimator, spectral
from posdiag.geometry.core import gram_from_vectors, positional_information, reached_rank
from posdiag.reports import analysis, gate
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.diagnosis import diagnose
from posdiag.reports.drift import corpus_drift
from posdiag.reports.gate import build_config, run_gate
from posdiag.reports.inspection import _figures, _table_eigenvalues
from posdiag.reports.options import Analysis
from posdiag.reports.scores import score_encodings
from posdiag.uncertainty import bootstrap as uncertainty
from posdiag.uncertainty._permnull import permuted_kl, shuffle_segments, shuffled_null
from posdiag.uncertainty.bootstrap import NO_SHARDS
from tests.geometry.test_longctx_paths import zipf_counts


def _table(tokens: np.ndarray, supports: np.ndarray, n_types: int) -> np.ndarray:
    """The counts table whose row i holds the next supports[i] tokens of ``tokens``."""
    rows = np.repeat(np.arange(supports.size), supports)
    t = np.zeros((supports.size, n_types), dtype=np.int64)
    np.add.at(t, (rows, tokens), 1)
    return t


@pytest.mark.parametrize("buckets", [2, 7, 1 << 16])
def test_shuffle_segments_draws_the_permutation_law(buckets: int) -> None:
    # Two rows: row 0 takes 3 of the 7 tokens (types 0,0,0,1,1,2,3). Under a uniform
    # permutation row 0 is a multivariate hypergeometric draw; few buckets make every bucket
    # straddle the boundary (the shuffled path), many make almost none do.
    pooled = np.array([3, 2, 1, 1])
    supports = np.array([3, 4])
    rng = np.random.default_rng(0)
    seen: dict[tuple[int, ...], int] = {}
    draws = 6000
    for _ in range(draws):
        out = shuffle_segments(pooled, supports, rng, buckets)
        assert np.array_equal(np.bincount(out, minlength=4), pooled)  # the margin is kept
        key = tuple(int(x) for x in np.bincount(out[:3], minlength=4))
        seen[key] = seen.get(key, 0) + 1
    outcomes = [
        x
        for x in np.ndindex(*(pooled + 1))
        if sum(x) == 3 and all(a <= b for a, b in zip(x, pooled, strict=True))
    ]
    prob = np.array(
        [math.prod(math.comb(int(c), k) for c, k in zip(pooled, x, strict=True)) for x in outcomes]
    ) / math.comb(7, 3)
    observed = np.array([seen.get(tuple(int(a) for a in x), 0) for x in outcomes])
    assert observed.sum() == draws  # nothing outside the support
    assert stats.chisquare(observed, prob * draws).pvalue > 1e-3


def test_permuted_kl_is_the_information_of_the_built_table() -> None:
    rng = np.random.default_rng(1)
    supports = np.array([40, 0, 25, 60, 1])
    pooled = np.array([50, 30, 20, 15, 10, 1])
    tokens = rng.permutation(np.repeat(np.arange(6), pooled)).astype(np.int32)
    kl = permuted_kl(tokens, supports, pooled)
    table = _table(tokens, supports, 6)
    bits, expected = positional_information(table)
    assert np.allclose(kl, expected, rtol=0, atol=1e-12)
    assert float(np.sum(supports / supports.sum() * kl)) == pytest.approx(bits, abs=1e-12)


def test_information_null_switches_to_the_shuffle_with_the_same_law(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The table of tests/uncertainty/test_bootstrap.py's permutation-null test; the shuffle's mean
    # and spread against explicit permutations of the token list.
    rng = np.random.default_rng(5)
    sizes = [60, 40, 25]
    tokens = np.concatenate([rng.integers(0, 6 + 3 * i, size=s) for i, s in enumerate(sizes)])
    table = _table(tokens, np.array(sizes), 12)
    calls: list[int] = []

    def spy(*args: object, **kw: object) -> tuple[np.ndarray, np.ndarray]:
        calls.append(1)
        return shuffled_null(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(uncertainty, "shuffled_null", spy)
    slow = uncertainty.information_null(table, repeats=400, seed=0)
    assert calls == []  # 3 x 12 cells: the row-by-row draw
    pooled = table.sum(axis=0)
    bits, per = shuffled_null(table.sum(axis=1), pooled[pooled > 0], 400, np.random.default_rng(0))
    fast = uncertainty.InformationNull(float(bits.mean()), float(bits.std(ddof=1)), per, 400)
    explicit = [
        positional_information(_table(rng.permutation(tokens), np.array(sizes), 12))[0]
        for _ in range(400)
    ]
    assert fast.mean == pytest.approx(np.mean(explicit), rel=0.05)
    assert fast.sd == pytest.approx(np.std(explicit, ddof=1), rel=0.2)
    assert fast.mean == pytest.approx(slow.mean, rel=0.05)
    assert fast.per_position.shape == (3,)
    assert np.allclose(fast.per_position, slow.per_position, rtol=0.15)


@pytest.fixture(scope="module")
def corpus_a() -> Counts:
    """160 positions without shards (thinning); the partial spectrum when thresholds drop."""
    return Counts(zipf_counts(160, 1500, 700, seed=11), {"source": "a"})


@pytest.fixture
def plugin_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every plug-in Gram product (``estimate_hellinger(estimator="plugin")``)."""
    calls: list[int] = []
    real = estimator.plugin_bc
    monkeypatch.setattr(estimator, "plugin_bc", lambda c: calls.append(1) or real(c))
    return calls


def _partial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spectral, "PARTIAL_FROM", 65)
    monkeypatch.setattr(spectral, "EIGVALSH_MAX", 64)


def test_diagnose_computes_the_plugin_for_the_json_only(
    corpus_a: Counts, plugin_calls: list[int]
) -> None:
    lean = diagnose(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS),
        analysis=Analysis(min_count=1),
        details=False,
    )
    assert plugin_calls == []
    full = diagnose(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS), analysis=Analysis(min_count=1)
    )
    assert plugin_calls == [1]
    # Everything printed is the same; only the JSON's plain column differs.
    for part in ("information", "noise", "shift", "rank", "recommendation", "uncertainty"):
        assert getattr(lean, part) == getattr(full, part), part
    assert [e.name for e in lean.encodings] == [e.name for e in full.encodings]
    np.testing.assert_array_equal(  # NaN spearman (nope) compares equal here
        [(e.stress, e.spearman, e.kruskal) for e in lean.encodings],
        [(e.stress, e.spearman, e.kruskal) for e in full.encodings],
    )
    assert all(math.isnan(e.plain) for e in lean.encodings)
    assert not any(math.isnan(e.plain) for e in full.encodings)


def test_diagnose_cli_plugin_only_with_json(
    corpus_a: Counts, plugin_calls: list[int], cli: Any, tmp_path: Path
) -> None:
    path = save_counts(corpus_a, tmp_path / "a.npz")
    args = ["diagnose", str(path), "--shards", "0", "--min-count", "1"]
    text = cli(args)
    assert text.exit_code == 0, text.output
    assert plugin_calls == []
    doc = cli([*args, "--json"])
    assert doc.exit_code == 0 and plugin_calls == [1]
    plain = [e["plain"] for e in json.loads(doc.stdout)["encodings"]]
    assert plain and all(isinstance(x, float) for x in plain)


def test_check_scores_a_fixed_encoding_without_plugin_or_split_halves(
    corpus_a: Counts, plugin_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    halves: list[int] = []
    real = analysis.split_half_summary
    monkeypatch.setattr(
        analysis, "split_half_summary", lambda *a, **k: halves.append(1) or real(*a, **k)
    )
    cfg = build_config(encodings=["rope"], max_stress=[0.9])
    report = run_gate(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS), cfg, analysis=Analysis(min_count=1)
    )
    assert plugin_calls == [] and halves == []
    want = score_encodings(corpus_geometry(corpus_a, 1), ["rope"])[0].stress
    assert report.results[0].figure == want


def test_check_rank_rules_on_a_partial_spectrum_match_full_eigh(
    corpus_a: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = ["0.7:3", "0.4:30", "0.3:10", "0.0001:50"]
    cfg = build_config(max_rank_for_stress=rules)
    full = run_gate(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS), cfg, analysis=Analysis(min_count=1)
    )
    lam = np.linalg.eigvalsh(corpus_geometry(corpus_a, 1, plain=False).mds.gram)[::-1]
    by_eps = {float(r.target): r for r in full.results}
    for eps, want in ((0.7, 5), (0.4, 21), (0.3, reached_rank(lam, 0.3))):
        assert reached_rank(lam, eps) == want and by_eps[eps].figure == want
    _partial(monkeypatch)
    # The headline stops at 16 pairs: rank 21 needs the rule's own growth (warm-started).
    monkeypatch.setattr(spectral, "DEFAULT_MAX_RANK", 16)
    geo = corpus_geometry(corpus_a, 1, plain=False)
    assert geo.mds.total is not None and geo.mds.eigenvalues.size == 16
    grown: list[int] = []
    real = gate.partial_spectrum
    monkeypatch.setattr(gate, "partial_spectrum", lambda *a, **k: grown.append(1) or real(*a, **k))
    part = run_gate(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS), cfg, analysis=Analysis(min_count=1)
    )
    assert grown == [1]
    assert [r.passed for r in part.results] == [r.passed for r in full.results]
    got = {float(r.target): r for r in part.results}
    assert got[0.7].figure == 5 and got[0.4].figure == 21 and got[0.4].passed
    assert got[0.3].figure == by_eps[0.3].figure == 34 and not got[0.3].passed
    # Grown to the largest rule's rank + 1 (51), then stopped: a lower bound, still a failure
    # (the full spectrum shows it below the floor).
    assert by_eps[0.0001].figure == math.inf and not by_eps[0.0001].passed
    assert got[0.0001].figure == 52 and "more than 51" in got[0.0001].note
    # One rule: grown to its rank + 1 (21) only.
    short = run_gate(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS),
        build_config(max_rank_for_stress=["0.3:20"]),
        analysis=Analysis(min_count=1),
    )
    (r,) = short.results
    assert r.figure == 22 and not r.passed and "more than 21" in r.note


def test_diff_skips_the_plugin_and_agrees_on_a_partial_spectrum(
    corpus_a: Counts, plugin_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = Counts(zipf_counts(160, 1500, 700, seed=12), {"source": "b"})
    full = corpus_drift(corpus_a, b, analysis=Analysis(min_count=1))
    assert plugin_calls == []
    _partial(monkeypatch)
    part = corpus_drift(corpus_a, b, analysis=Analysis(min_count=1))
    assert (part.rank_a, part.rank_b) == (full.rank_a, full.rank_b)
    for key in ("b_optimum", "a_optimum"):
        assert getattr(part, key) == pytest.approx(getattr(full, key), abs=1e-7)
    for key in ("a_on_b", "b_on_a", "geometry_stress"):
        assert getattr(part, key) == pytest.approx(getattr(full, key), abs=1e-6)
    assert [(r.name, r.rank_a, r.rank_b) for r in part.rankings] == [
        (r.name, r.rank_a, r.rank_b) for r in full.rankings
    ]
    # The eigenvalue tail alone (what diff used) misses the rest of ||B_H||^2.
    lam = corpus_geometry(b, 1, plain=False).mds.eigenvalues
    assert lam.size < 159
    naive = np.sqrt(np.cumsum((lam**2)[::-1])[::-1][1:] / np.sum(lam**2))
    assert abs(naive[part.rank_a - 1] - part.b_optimum) > 0.02


def test_diff_on_a_shorter_corpus_restricts_the_crossfit(
    corpus_a: Counts, plugin_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Float64 products: the restricted block is then the head's own estimate to rounding (the
    # float32 dense block would centre the head on its own rows' level, ~4e-9 apart).
    real = estimator.expected_thinning_bc

    def as64(*args: object, **kwargs: object) -> np.ndarray:
        return real(*args, **{**kwargs, "dtype": np.float64})  # type: ignore[no-any-return]

    monkeypatch.setattr(estimator, "expected_thinning_bc", as64)
    m = zipf_counts(120, 1500, 700, seed=12)
    b = Counts(sp.csr_matrix(sp.vstack([m, sp.csr_matrix((40, 1500), dtype=np.int64)])), {})
    drift = corpus_drift(corpus_a, b, analysis=Analysis(min_count=1))
    assert drift.n == 120 and drift.a.n_eff == 160 and plugin_calls == []
    head = Counts(sp.csr_matrix(corpus_a.matrix[:120]), {"source": "a"})
    geo = corpus_geometry(head, 1, plain=False)
    want = float(geo.mds.stress_by_rank()[drift.rank_b - 1])
    assert drift.a_optimum == pytest.approx(want, abs=1e-12)
    assert drift.rank_a == corpus_drift(head, b, analysis=Analysis(min_count=1)).rank_a


@pytest.mark.parametrize("shape", [(50, 8), (30, 30), (20, 45)])
def test_table_spectrum_from_the_small_gram(shape: tuple[int, int]) -> None:
    p = np.random.default_rng(3).standard_normal(shape) * np.linspace(3, 0.1, shape[1])
    lam = np.sort(np.linalg.eigvalsh(gram_from_vectors(p)))[::-1]
    got = _table_eigenvalues(p)
    assert got.shape == lam.shape
    np.testing.assert_allclose(got, lam, rtol=0, atol=1e-10 * lam[0])
    figs = _figures(p, 0.01)
    from posdiag.geometry.core import effective_rank

    assert figs.effective_rank == {t: effective_rank(lam, t) for t in (0.1, 0.05, 0.01)}


def test_inspect_and_report_skip_the_plugin(
    corpus_a: Counts, plugin_calls: list[int], cli: Any, tmp_path: Path
) -> None:
    path = save_counts(corpus_a, tmp_path / "a.npz")
    np.save(tmp_path / "t.npy", np.random.default_rng(0).standard_normal((160, 16)))
    out = cli(["inspect", str(tmp_path / "t.npy"), "--corpus", str(path), "--min-count", "1"])
    assert out.exit_code == 0, out.output
    html = tmp_path / "r.html"
    out = cli(["report", str(path), "-o", str(html), "--no-plots", "--min-count", "1"])
    assert out.exit_code == 0, out.output
    assert plugin_calls == []
    d = diagnose(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS), analysis=Analysis(min_count=1)
    )
    assert d.recommendation.text.split(" Caution")[0][:60] in html.read_text(encoding="utf-8")


def test_check_rank_rules_settled_by_the_headline_spectrum_grow_nothing(
    corpus_a: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    _partial(monkeypatch)
    grown: list[int] = []
    monkeypatch.setattr(gate, "partial_spectrum", lambda *a, **k: grown.append(1))
    cfg = build_config(max_rank_for_stress=["0.7:3", "0.4:30"])  # ranks 5 and 21
    report = run_gate(
        dataclasses.replace(corpus_a, no_intervals=NO_SHARDS), cfg, analysis=Analysis(min_count=1)
    )
    assert grown == []
    assert [(r.figure, r.passed) for r in report.results] == [(5.0, False), (21.0, True)]


def test_diff_rank_beyond_the_computed_pairs_grows_the_partial_spectrum(
    corpus_a: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = Counts(zipf_counts(160, 1500, 700, seed=12), {"source": "b"})
    full = corpus_drift(corpus_a, b, analysis=Analysis(min_count=1), rank=140)
    _partial(monkeypatch)
    computed = corpus_geometry(b, 1, plain=False).mds.eigenvalues.size
    assert computed < 140  # the headline's pairs stop short of the rank asked for
    part = corpus_drift(corpus_a, b, analysis=Analysis(min_count=1), rank=140)
    assert (part.rank_a, part.rank_b) == (140, 140)
    for key in ("b_optimum", "a_optimum"):
        assert getattr(part, key) == pytest.approx(getattr(full, key), abs=1e-7)
    for key in ("a_on_b", "b_on_a"):
        assert getattr(part, key) == pytest.approx(getattr(full, key), abs=1e-6)
    # Still refused beyond n - 1, with the n - 1 bound in the message.
    with pytest.raises(PosdiagError, match=r"'rank' must be an int in \[1, n-1=159\]; got 160"):
        corpus_drift(corpus_a, b, analysis=Analysis(min_count=1), rank=160)


@pytest.mark.parametrize("how", ["crossfit", "plugin"])
def test_inspect_computes_no_eigenpair_of_the_corpus(
    corpus_a: Counts, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from posdiag.geometry import core as geometry
    from posdiag.reports import analysis as analysis_mod
    from posdiag.reports.inspection import inspect_table

    path = save_counts(corpus_a, tmp_path / "a.npz")
    table = np.random.default_rng(0).standard_normal((160, 16))
    np.save(tmp_path / "t.npy", table)
    # The figures inspect prints, from a geometry with its spectrum (the straightforward way).
    full = corpus_geometry(corpus_a, 1, estimator=how, plain=False)
    lean = corpus_geometry(corpus_a, 1, estimator=how, plain=False, spectrum=False)
    assert lean.mds.eigenvalues.size == 0 and full.mds.eigenvalues.size > 0
    assert lean.mds.total == pytest.approx(float(np.vdot(full.mds.gram, full.mds.gram)))
    want, got = inspect_table(table, full).fit, inspect_table(table, lean).fit
    assert got == want
    solves: list[int] = []
    for mod, name in ((estimator, "mds_of_gram"), (analysis_mod, "classical_mds")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _r=real, **k: solves.append(1) or _r(*a, **k))
    monkeypatch.setattr(geometry, "mds_from_gram", lambda *a, **k: solves.append(1))
    args = ["inspect", str(tmp_path / "t.npy"), "--corpus", str(path), "--min-count", "1"]
    out = cli([*args, "--estimator", how, "--json"])
    assert out.exit_code == 0, out.output
    assert solves == []
    assert json.loads(out.stdout)["fit"]["stress"] == pytest.approx(want.stress, abs=1e-12)


@pytest.fixture(scope="module")
def at_implicit_from(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A counts file of exactly IMPLICIT_FROM positions, two tokens each (cheap to count)."""
    n = analysis.IMPLICIT_FROM
    rows = np.repeat(np.arange(n), 2)
    cols = np.tile([0, 1], n) + (np.arange(2 * n) // 2) % 3
    m = sp.csr_matrix((np.ones(2 * n, dtype=np.int64), (rows, cols)), shape=(n, 4))
    return save_counts(
        Counts(m, {"source": "long"}, None, ()), tmp_path_factory.mktemp("l") / "l.npz"
    )


def test_dense_geometry_is_refused_from_implicit_from_with_what_works_instead(
    cli, at_implicit_from: Path, tmp_path: Path
) -> None:
    """plot and diff need the n x n geometry: from IMPLICIT_FROM analysed positions they stop
    at once with one line naming what does work (before: plot ran ~3 min at n = 20,000 and was
    killed for memory; diff gave a memory estimate)."""
    n = analysis.IMPLICIT_FROM
    want = (
        f"Error: long: the n x n geometry (plot, diff, inspect --corpus) is built only below "
        f"{n:,} analysed positions; n_eff = {n:,} (stress, check, build-encoding, diagnose and "
        "report analyse this length without it: docs/geometry.md, 'Long contexts'; or count "
        f"at most {n - 1} positions, --max-len {n - 1})\n"
    )
    src = str(at_implicit_from)
    out = tmp_path / "plots"
    for args in (["plot", src, "-o", str(out)], ["diff", src, src]):
        res = cli([*args, "--min-count", "1"])
        assert (res.exit_code, res.stderr) == (2, want), args
    assert not out.exists()
    with pytest.raises(PosdiagError, match=r"^long: the n x n geometry .* n_eff = 16,385 "):
        corpus_geometry(load_counts(at_implicit_from), 1)


def test_identical_positions_are_refused_by_the_implicit_path_as_by_the_dense_one(
    cli, tmp_path: Path
) -> None:
    """Every position with one distribution: below IMPLICIT_FROM the dense path refused it, while
    the implicit path printed a table (mds-r 0, every other encoding 1). Now every command that
    takes the implicit path gives the dense path's error."""
    n = analysis.IMPLICIT_FROM
    m = sp.csr_matrix(np.tile(np.array([[5, 5, 5, 5]], dtype=np.int64), (n, 1)))
    src = str(save_counts(Counts(m, {"source": "same"}, None, ()), tmp_path / "s.npz"))
    want = (
        f"Error: same: all {n:,} analysed positions have the same token distribution (largest "
        "Hellinger distance 0); there is no positional geometry to fit\n"
    )
    out = tmp_path / "e.npy"
    for args in (
        ["stress", src],
        ["stress", src, "--estimator", "plugin"],
        ["diagnose", src],
        ["check", src, "--no-config", "-e", "alibi", "--max-stress", "1"],
        ["build-encoding", src, "-o", str(out)],
    ):
        res = cli([*args, "--min-count", "1"])
        assert (res.exit_code, res.stderr) == (2, want), args
    assert not out.exists()
