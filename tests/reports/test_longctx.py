"""``stress`` by the implicit path (issue 35) against the dense report on the same counts.

The threshold is lowered so that a small input takes the implicit path; at that size its pair
sample enumerates every pair, so its figures must equal the dense report's to rounding.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import scipy.sparse as sp
from safetensors import safe_open
from safetensors.numpy import load_file
from scipy.spatial.distance import pdist

from posdiag.counts.core import Counts, save_counts
from posdiag.errors import PosdiagError
from posdiag.reports import diagnosis, gate, longctx, stress
from posdiag.reports.analysis import analysed_geometry
from posdiag.reports.export import low_rank_encoding, write_encoding
from posdiag.reports.options import Analysis
from tests import _data

N = 90


@pytest.fixture
def long_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI takes the implicit path from 50 positions (the fixtures have 90)."""
    monkeypatch.setattr(longctx, "IMPLICIT_FROM", 50)


@pytest.fixture
def counts() -> Counts:
    m = _data.zipf_counts(N, 500, 150, 4, step=3, dtype=np.int64)
    return Counts(sp.csr_matrix(m), {"source": "zipf.npz"})


@pytest.mark.parametrize("estimator", ["crossfit", "plugin"])
def test_implicit_report_equals_dense(counts: Counts, estimator: str) -> None:
    options = Analysis(min_count=1, estimator=estimator)
    dense = stress.stress_report(counts, analysis=options)
    # Below the threshold: the dense report itself (repr: NaN fields compare unequal).
    same = longctx.stress_report(counts, analysis=options)
    assert repr(same) == repr(dense)
    ours = longctx.implicit_stress_report(counts, analysis=options)
    want = {e.label: e for e in dense.encodings}
    assert {e.label for e in ours.encodings} == set(want)
    for e in ours.encodings:
        d = want[e.label]
        # mds-r: the in-sample tail (the long-n rule), the dense report's in_sample figure.
        ref = d.in_sample if e.name.startswith("mds-") and estimator == "crossfit" else d.stress
        assert e.stress == pytest.approx(ref, abs=1e-9), e.label
        assert math.isnan(e.kruskal) and math.isnan(e.spearman) and math.isnan(e.ci_low)
        assert (e.n_params, e.params, e.preset) == (d.n_params, d.params, d.preset)
    k = ours.spectrum.computed
    assert k == len(ours.spectrum.eigenvalues) > 0
    np.testing.assert_allclose(ours.spectrum.eigenvalues, dense.spectrum.eigenvalues[:k], atol=1e-9)
    np.testing.assert_allclose(
        ours.spectrum.stress_by_rank, dense.spectrum.stress_by_rank[:k], atol=1e-9
    )
    assert ours.warnings == (
        f"long context (n_eff = {N}): implicit geometry, no n x n matrix; sampled from "
        f"{N * (N + 1) // 2:,} position pairs: ||B_H|| (so every stress) and the table "
        "encodings' residual share, largest standard error 0.0000; mds-r in-sample; no "
        "intervals, Kruskal or Spearman (docs/geometry.md, 'Long contexts')",
    )


def test_cli_stress_json_says_what_is_sampled(
    cli, tmp_path, counts: Counts, long_path: None
) -> None:
    path = save_counts(counts, tmp_path / "c.npz")
    res = cli(["stress", str(path), "--min-count", "1", "--json"])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert any("implicit geometry" in w for w in out["warnings"])
    names = [e["name"] for e in out["encodings"]]
    assert "sinusoidal" in names and "mds-3" in names
    text = cli(["stress", str(path), "--min-count", "1"])
    assert text.exit_code == 0, text.stderr
    assert "largest standard error 0.0000" in text.stderr + text.stdout


def test_mds_rank_beyond_computed_is_refused(counts: Counts) -> None:
    with pytest.raises(Exception, match=r"^encoding 'mds-60': at n_eff = 90 the implicit path"):
        longctx.implicit_stress_report(counts, ["mds-60"], Analysis(min_count=1))
    # check accepts the encodings stress scores, no more (one story).
    cfg = gate.build_config(encodings=["mds-60"], max_stress=[0.5])
    with pytest.raises(Exception, match=r"^encoding 'mds-60': at n_eff = 90 the implicit path"):
        gate.implicit_facts(counts, cfg, Analysis(min_count=1))


@pytest.mark.parametrize("rank", [5, 20])
def test_implicit_encoding_file_matches_dense_and_lanczos(
    counts: Counts, tmp_path, rank: int
) -> None:
    """build-encoding's implicit path: the file's distances are the dense rank-r encoding's and
    those of the Lanczos pairs ``U_r sqrt(L_r)``; the stress is the in-sample tail (rank 20:
    more pairs than stress computes, the Lanczos grown)."""
    options = Analysis(min_count=1)
    geo = analysed_geometry(counts, options)
    want = low_rank_encoding(geo, rank, 32, seed=3)
    ours = longctx.implicit_encoding(counts, rank, 32, options, seed=3)
    (path,) = write_encoding(ours, tmp_path / "long.safetensors")
    t = load_file(str(path))
    x = geo.mds.coordinates(rank)
    assert t["encoding"].shape == (N, 32) and t["A"].shape == (N, rank)
    np.testing.assert_allclose(pdist(t["encoding"]), pdist(x), rtol=0, atol=2e-6)
    # The same coordinates, column by column (signs fixed as the dense MDS fixes them).
    np.testing.assert_allclose(ours.A, x, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(ours.B, want.B)
    geom = longctx.implicit_analysis(counts, options, rank=rank).geometry
    lam, u = geom.spectrum.eigenvalues[:rank], geom.spectrum.vectors[:, :rank]
    np.testing.assert_allclose(lam, geo.mds.eigenvalues[:rank], rtol=1e-10)
    np.testing.assert_allclose(
        pdist(t["encoding"]), pdist(u * np.sqrt(np.clip(lam, 0, None))), rtol=0, atol=2e-6
    )
    with safe_open(str(path), framework="np") as fh:
        meta = fh.metadata()
    # N = 90: the pair sample enumerates every pair, so the sampled norm is exact (SE 0).
    tail = float(geo.mds.stress_by_rank()[rank - 1])
    assert float(meta["stress"]) == pytest.approx(tail, abs=1e-9) == ours.stress
    assert float(meta["stress_se"]) == ours.stress_se == 0.0
    assert meta["stress_heldout"] == "nan" and math.isnan(ours.heldout)
    np.testing.assert_allclose(
        json.loads(meta["eigenvalues"]), geo.mds.eigenvalues[:10], rtol=1e-10
    )
    assert {k: meta[k] for k in ("n", "r", "d", "seed")} == {
        "n": str(N),
        "r": str(rank),
        "d": "32",
        "seed": "3",
    }
    assert ours.warnings == (
        f"long context (n_eff = {N}): implicit geometry, no n x n matrix; the top "
        f"{geom.spectrum.eigenvalues.size} eigenpairs by Lanczos; the stress is the in-sample "
        f"tail at rank {rank} (the long-n rule: no held-out split), ||B_H|| sampled from "
        f"{N * (N + 1) // 2:,} position pairs, standard error 0.0000 (docs/geometry.md, "
        "'Long contexts')",
    )


def test_build_encoding_below_threshold_is_the_dense_file(counts: Counts, tmp_path) -> None:
    options = Analysis(min_count=1)
    got = longctx.build_encoding(counts, 3, 16, options, seed=1)
    want = low_rank_encoding(analysed_geometry(counts, options), 3, 16, seed=1)
    a = write_encoding(got, tmp_path / "a.npy")
    b = write_encoding(want, tmp_path / "b.npy")
    assert a[0].read_bytes() == b[0].read_bytes() and a[1].read_text() == b[1].read_text()
    assert "stress_se" not in json.loads(a[1].read_text())


def test_implicit_encoding_refuses_bad_rank_and_dim(counts: Counts) -> None:
    with pytest.raises(PosdiagError, match=r"^'rank' must be an int in \[1, n_eff-1=89\]; got 90$"):
        longctx.implicit_encoding(counts, 90, 128, Analysis(min_count=1))
    with pytest.raises(PosdiagError, match=r"^'dim' must be an int in \[rank=4, inf\]; got 3$"):
        longctx.implicit_encoding(counts, 4, 3, Analysis(min_count=1))


def test_cli_build_encoding_says_the_stress_is_sampled(
    cli, tmp_path, counts: Counts, long_path: None
) -> None:
    path = save_counts(counts, tmp_path / "c.npz")
    out = tmp_path / "enc.npy"
    res = cli(["build-encoding", str(path), "-o", str(out), "--rank", "4", "--dim", "8",
               "--min-count", "1", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["stress_se"] == 0.0 and doc["stress"] == doc["in_sample"]
    assert doc["meta"]["stress_se"] == 0.0
    assert "implicit geometry" in res.stderr and "the long-n rule" in res.stderr
    text = cli(["build-encoding", str(path), "-o", str(tmp_path / "t.npy"), "--rank", "4",
                "--dim", "8", "--min-count", "1"])  # fmt: skip
    assert text.exit_code == 0, text.stderr
    flat = " ".join(text.stdout.split())  # the line wraps where the temporary path is long
    assert "+/- 0.0000 (the spectrum's tail at rank 4; the long-n rule" in flat


def test_check_facts_by_the_implicit_path_match_dense_and_stress(counts: Counts) -> None:
    """check's implicit facts: max-stress figures are implicit stress's (mds-r: the in-sample
    tail), rank rules equal the dense full spectrum's, including those the top pairs do not
    settle (0.25: the Lanczos grown past 32 pairs, which also finds the floor that puts 0.1
    out of reach)."""
    options = Analysis(min_count=1)
    cfg = gate.build_config(
        encodings=["sinusoidal", "rope:base=500000", "mds-3"],
        max_stress=[0.84],
        max_rank_for_stress=["0.3:40", "0.5:2", "0.1:8", "0.25:60"],
        min_positional_info=1.0,
    )
    dense = gate.evaluate(cfg, gate.measure(counts, cfg, options))
    facts = gate.implicit_facts(counts, cfg, options)
    ours = gate.evaluate(cfg, facts)
    table = {e.label: e for e in stress.stress_report(counts, analysis=options).encodings}
    assert [r.id for r in ours.results] == [r.id for r in dense.results]
    for d, r in zip(dense.results, ours.results, strict=True):
        assert r.passed == d.passed, r.id
        if r.rule == "max-stress":
            # The same story as `stress` at long n, to the bit.
            (row,) = longctx.implicit_stress_report(counts, [r.target], options).encodings
            assert r.figure == row.stress
            want = table["mds-3"].in_sample if r.target == "mds-3" else d.figure
            assert r.figure == pytest.approx(want, abs=1e-9), r.id
            assert r.note == "standard error 0.0000 (sampled ||B_H||, long context)"
        else:
            assert r.figure == pytest.approx(d.figure, abs=1e-9) and r.note == d.note, r.id
    assert [r.figure for r in ours.results if r.rule == "max-rank-for-stress"] == [
        17,
        31,
        40,
        math.inf,
    ]
    # Without the 0.25 rule the top 32 pairs settle 0.1:8 (more than 8 needed: it fails either
    # way), read as the dense path reads a partial spectrum: "more than 32", no floor.
    short = dataclasses.replace(cfg, max_rank_for_stress={0.1: 8})
    (settled,) = [
        r
        for r in gate.evaluate(short, gate.implicit_facts(counts, short, options)).results
        if r.rule == "max-rank-for-stress"
    ]
    assert (settled.figure, settled.passed) == (33, False)
    assert settled.note.endswith("more than 32 (only the top 32 eigenvalues were computed)")
    assert facts.floor == pytest.approx(0.2279908, abs=1e-7) and len(facts.eigenvalues) > 31
    long = longctx.implicit_stress_report(counts, ["sinusoidal"], options)
    assert ours.warnings == long.warnings
    strict = gate.evaluate(dataclasses.replace(cfg, strict=True), facts)
    assert strict.results[0].note == (
        "strict: no confidence interval was available; judged on the stress (standard error "
        "0.0000 (sampled ||B_H||, long context))"
    )


def test_cli_check_at_long_context(cli, tmp_path, counts: Counts, long_path: None) -> None:
    path = save_counts(counts, tmp_path / "c.npz")
    res = cli(["check", str(path), "--no-config", "-e", "sinusoidal", "--max-stress", "0.9",
               "--max-rank-for-stress", "0.3:40", "--min-count", "1", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [r["figure"] for r in doc["rules"]] == [pytest.approx(0.8284434, abs=1e-7), 31]
    assert doc["warnings"][0].startswith("long context (n_eff = 90): implicit geometry")
    assert "implicit geometry" in res.stderr


@pytest.mark.parametrize("estimator", ["crossfit", "plugin"])
def test_implicit_diagnosis_equals_dense(counts: Counts, estimator: str) -> None:
    """diagnose by the implicit path: at N = 90 every pair and every lag is in its samples, so
    each figure equals the dense diagnosis's (the cross-fit's half grams are float32 there, so
    its noise figures agree to ~1e-6); what the long-n rule leaves out is empty."""
    options = Analysis(min_count=1, estimator=estimator)
    dense = diagnosis.diagnose(counts, analysis=options)
    same = longctx.diagnose(counts, analysis=options)
    assert repr(same) == repr(dense)  # below the threshold: the dense diagnosis itself
    ours = longctx.implicit_diagnose(counts, analysis=options)
    assert ours.information == dense.information
    assert ours.noise.floor == dense.noise.floor and ours.noise.supports == dense.noise.supports
    assert ours.noise.n_pairs == dense.noise.n_pairs == N * (N - 1) // 2
    assert abs(ours.noise.n_indistinguishable - dense.noise.n_indistinguishable) <= 1
    assert ours.noise.pairs[:20] == dense.noise.pairs[:20]
    assert ours.noise.noise_share == pytest.approx(dense.noise.noise_share, rel=1e-5)
    assert ours.noise.per_position == ()
    if estimator == "plugin":
        np.testing.assert_allclose(ours.noise.position_share, dense.noise.position_share, rtol=1e-9)
    else:
        assert ours.noise.position_share == () and ours.noise.unstable == ()
    sh, dsh = ours.shift, dense.shift
    assert sh.r2 == pytest.approx(dsh.r2, abs=1e-9)
    np.testing.assert_allclose(sh.profile, dsh.profile, rtol=0, atol=1e-9)
    assert (sh.smoothness, sh.neighbour_mean, sh.all_mean) == pytest.approx(
        (dsh.smoothness, dsh.neighbour_mean, dsh.all_mean), abs=1e-9
    )
    assert sh.reading == dsh.reading
    k = ours.rank.spectrum.computed
    assert k == len(ours.rank.spectrum.eigenvalues) > 0
    if dense.rank.reached and dense.rank.rank <= k:
        assert (ours.rank.rank, ours.rank.reached) == (dense.rank.rank, True)
        assert ours.rank.rank_stress == pytest.approx(dense.rank.rank_stress, abs=1e-9)
    want = {e.label: e for e in longctx.implicit_stress_report(counts, analysis=options).encodings}
    assert [e.label for e in ours.encodings] == list(want)
    assert all(e.stress == want[e.label].stress for e in ours.encodings)
    assert ours.recommendation.encoding == dense.recommendation.encoding
    assert ours.uncertainty.shards == 0 and ours.uncertainty.note.startswith("no intervals: at")
    assert ours.warnings[0] == (
        f"long context (n_eff = {N}): implicit geometry, no n x n matrix; sampled from "
        f"{N * (N + 1) // 2:,} position pairs: ||B_H|| (so every stress, largest standard error "
        "0.0000), the table encodings' residual share, the pairs within the noise (standard "
        "error 0.00% of the pairs) and the noise share (standard error 0.00%); shift R^2 from "
        f"{N * (N - 1) // 2:,} pairs at every lag (standard error 0.0000); mds-r in-sample; no "
        "intervals, Kruskal, Spearman, per-position partners"
        + (
            " (unstable positions from the noise share alone)"
            if estimator == "plugin"
            else " or unstable positions"
        )
        + " (docs/geometry.md, 'Long contexts')"
    )
    assert ours.geometry is None


def test_implicit_rank_not_reached_says_so(counts: Counts) -> None:
    d = longctx.implicit_diagnose(counts, analysis=Analysis(min_count=1), target=0.001)
    k = d.rank.spectrum.computed
    assert (d.rank.reached, d.rank.rank) == (False, k)
    assert d.rank.rank_stress == d.rank.spectrum.stress_by_rank[k - 1]
    assert d.rank.reading.startswith(
        f"stress <= 0.001 is not reached by the top {k} eigenpairs computed at long contexts "
        f"(rank {k} has stress {d.rank.rank_stress:.3f});"
    )
    assert f"no MDS rank up to {k} reaches stress <= 0.001" in d.recommendation.text


def test_cli_diagnose_at_long_context(cli, tmp_path, counts: Counts, long_path: None) -> None:
    path = save_counts(counts, tmp_path / "c.npz")
    res = cli(["diagnose", str(path), "--min-count", "1", "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["warnings"][0].startswith("long context (n_eff = 90): implicit geometry")
    assert doc["noise"]["per_position"] == [] and doc["uncertainty"]["shards"] == 0
    text = cli(["diagnose", str(path), "--min-count", "1"])
    assert text.exit_code == 0, text.stderr
    assert "implicit geometry" in text.stdout + text.stderr
    assert "Recommendation:" in text.stdout
    plot = cli(["diagnose", str(path), "--min-count", "1", "--plot", str(tmp_path / "p")])
    assert plot.exit_code == 2
    assert plot.stderr.strip().splitlines()[-1] == (
        "Error: --plot: at n_eff = 90 the plots need the n x n geometry, which the long-context "
        "path does not build (docs/geometry.md, 'Long contexts'); the diagnosis above is complete"
    )
    assert not (tmp_path / "p").exists()


def test_cli_report_at_long_context(cli, tmp_path, counts: Counts, long_path: None) -> None:
    path = save_counts(counts, tmp_path / "c.npz")
    out = tmp_path / "r.html"
    res = cli(["report", str(path), "-o", str(out), "--min-count", "1", "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["plots"] == [] and doc["plots_omitted"] == (
        "plots omitted: at n_eff = 90 they need the n x n geometry, which the long-context path "
        "does not build (docs/geometry.md, 'Long contexts')"
    )
    assert doc["warnings"][0].startswith("long context (n_eff = 90): implicit geometry")
    page = out.read_text(encoding="utf-8")
    assert "implicit geometry" in page and "Recommendation" in page


def test_long_reports_keep_the_dense_notes_on_what_was_counted(counts: Counts) -> None:
    """Padding (and copies, two positions, a fallback to thinning) are said at long contexts
    in the dense path's words, before the line on what is sampled, by every command."""
    m = sp.lil_matrix(sp.hstack([counts.matrix, sp.csr_matrix((N, 1), dtype=np.int64)]))
    v = counts.matrix.shape[1]
    for i in range(80, N):
        m[i, v] = 60 * int(counts.matrix[i].sum())  # positions 80-89 over 95% padding
    padded = Counts(sp.csr_matrix(m), {"source": "pad.npz", "view": "model", "pad_id": v})
    options = Analysis(min_count=1)
    (note,) = analysed_geometry(padded, options).warnings
    assert note.startswith("pad.npz: positions 80-89 are analysed but over 95% padding")
    assert longctx.implicit_stress_report(padded, ["sinusoidal"], options).warnings[0] == note
    assert longctx.implicit_diagnose(padded, ["sinusoidal"], options).warnings[0] == note
    assert longctx.implicit_encoding(padded, 3, 8, options).warnings[0] == note
    cfg = gate.build_config(encodings=["sinusoidal"], max_stress=[0.9])
    assert gate.implicit_facts(padded, cfg, options).warnings[0] == note
