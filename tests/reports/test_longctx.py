"""``stress`` by the implicit path (issue 35) against the dense report on the same counts.

The threshold is lowered so that a small input takes the implicit path; at that size its pair
sample enumerates every pair, so its figures must equal the dense report's to rounding.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from posdiag.counts.core import Counts, save_counts
from posdiag.reports import longctx, stress
from posdiag.reports.options import Analysis
from tests import _data

N = 90


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
    cli, tmp_path, counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_counts(counts, tmp_path / "c.npz")
    monkeypatch.setattr(longctx, "IMPLICIT_FROM", 50)
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
