"""Issue 13's long-context paths against the straightforward dense computation.

- the expected thinning (``S -> infinity``): exact enumeration of every multivariate
  hypergeometric split on a tiny corpus, and the mean of many seeded splits on a medium one;
- the compiled thinning draw: the law of the halves;
- the cross-fit's accumulated product (``out=``): the dense sum of ``S`` products, any block size;
- the partial headline spectrum: its tail, effective ranks, floor bound and signal rank against
  a full ``eigh`` of the same ``B_H``;
- the report without details: no plug-in, no noise floor, same headline numbers.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import hypergeom

from posdiag._util.threads import small_blas
from posdiag.counts.core import Counts
from posdiag.geometry import _gram as fastgram
from posdiag.geometry import estimator, spectral
from posdiag.geometry._thinning import draw_half, expected_halves
from posdiag.geometry.core import mds_of_gram, stress_by_rank
from posdiag.geometry.estimator import crossfit_bc, expected_thinning_bc, gram_from_bc, sqrt_rows
from posdiag.reports import analysis, intervals
from posdiag.reports.analysis import CorpusGeometry, corpus_geometry, spectrum
from posdiag.reports.options import Analysis
from posdiag.reports.stress import stress_report
from posdiag.uncertainty.bootstrap import NO_SHARDS
from tests import _data


def zipf_counts(n: int, v: int, per_row: int, seed: int) -> sp.csr_matrix:
    """Integer counts whose drifting component moves 3 token ranks per position."""
    return _data.zipf_counts(n, v, per_row, seed, step=3, dtype=np.int64)


def _row_splits(row: np.ndarray) -> list[tuple[np.ndarray, float]]:
    """Every split of a count row into A (floor(N/2) tokens) and B, with its probability."""
    n_tot = int(row.sum())
    h = n_tot // 2
    out = []
    for a in itertools.product(*(range(int(c) + 1) for c in row)):
        if sum(a) != h:
            continue
        prob = math.prod(math.comb(int(c), k) for c, k in zip(row, a, strict=True))
        out.append((np.array(a, dtype=np.float64), prob / math.comb(n_tot, h)))
    return out


def test_expected_thinning_equals_the_exact_average_over_every_split() -> None:
    counts = np.array([[3, 1, 0, 2], [1, 2, 2, 0], [0, 1, 4, 1]])
    n = counts.shape[0]
    splits = [_row_splits(r) for r in counts]
    assert all(abs(sum(p for _, p in s) - 1.0) < 1e-12 for s in splits)
    want = np.zeros((n, n))
    for i, j in itertools.product(range(n), repeat=2):
        ni, nj = counts[i].sum(), counts[j].sum()
        hi, gj = ni // 2, nj - nj // 2
        if i == j:
            # The same split of row i gives both halves.
            want[i, i] = sum(
                p * float(np.sum(np.sqrt(a / hi * (counts[i] - a) / (ni - hi))))
                for a, p in splits[i]
            )
        else:
            # Rows are thinned independently: all pairs of splits.
            want[i, j] = sum(
                pa * pb * float(np.sum(np.sqrt(a / hi) * np.sqrt((counts[j] - b) / gj)))
                for a, pa in splits[i]
                for b, pb in splits[j]
            )
    want = (want + want.T) / 2.0
    got = expected_thinning_bc(sp.csr_matrix(counts))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


def test_expected_halves_match_scipy_hypergeometric_moments() -> None:
    # Counts up to 5,000 in a row of ~20,000 tokens: the mode-outward summation (lgamma at the
    # mode) as well as the small-count recurrence from 0.
    rng = np.random.default_rng(0)
    c = sp.csr_matrix(rng.integers(0, 3, size=(4, 30)) * rng.integers(1, 60, size=(4, 30)))
    c = sp.lil_matrix(c)
    c[0, 0], c[1, 1], c[2, 2] = 5000, 701, 65
    c = sp.csr_matrix(c, dtype=np.int64)
    c.sort_indices()
    ma, mb, diag = expected_halves(c)
    for i in range(c.shape[0]):
        total = int(c[i].sum())
        h, g = total // 2, total - total // 2
        acc = 0.0
        for p in range(c.indptr[i], c.indptr[i + 1]):
            k = int(c.data[p])
            ks = np.arange(k + 1)
            pmf = hypergeom(total, k, h).pmf(ks)
            assert ma.data[p] == pytest.approx(pmf @ np.sqrt(ks / h), rel=1e-12)
            assert mb.data[p] == pytest.approx(pmf @ np.sqrt((k - ks) / g), rel=1e-12)
            acc += pmf @ np.sqrt(ks * (k - ks))
        assert diag[i] == pytest.approx(acc / math.sqrt(h * g), rel=1e-12)


def test_expected_thinning_is_the_limit_of_seeded_thinnings() -> None:
    """The mean of S seeded cross-fit splits converges to the expectation (error ~ 1/sqrt(S))."""
    c = zipf_counts(40, 300, 400, seed=3)
    exact = expected_thinning_bc(c)
    errs = []
    for s in (4, 64):
        rng = np.random.default_rng(s)
        halves = [draw_half(c, rng) for _ in range(s)]
        errs.append(float(np.abs(crossfit_bc(halves) - exact).max()))
    assert errs[1] < errs[0] / 2.5  # sqrt(16) = 4 in expectation
    assert errs[1] < 0.01


def test_compiled_draw_has_the_hypergeometric_law() -> None:
    c = sp.csr_matrix(np.array([[5, 1, 3, 0, 7], [2, 2, 2, 2, 1]], dtype=np.int64))
    rng = np.random.default_rng(0)
    # 4,000 stacked copies in one call: the very draws of 4,000 calls (one stream per row,
    # seeded in turn from rng), without 4,000 kernel launches.
    draws = draw_half(sp.vstack([c] * 4000, format="csr"), rng)[0].toarray().reshape(4000, 2, 5)
    # Exact sizes and complements.
    assert np.all(draws.sum(axis=2) == c.sum(axis=1).A1 // 2)
    assert np.all(draws <= c.toarray()[None])
    # Marginal means c * h / N and variances of the hypergeometric law, within 5 sd.
    for i in range(2):
        total = int(c[i].sum())
        h = total // 2
        for j in range(5):
            k = int(c[i, j])
            if k == 0:
                assert not draws[:, i, j].any()
                continue
            law = hypergeom(total, k, h)
            sd = math.sqrt(law.var() / draws.shape[0]) or 1e-12
            assert abs(draws[:, i, j].mean() - law.mean()) <= 5 * sd + 1e-12
    # The same seed draws the same halves (thread schedule does not matter).
    a1 = draw_half(c, np.random.default_rng(7))[0].toarray()
    a2 = draw_half(c, np.random.default_rng(7))[0].toarray()
    np.testing.assert_array_equal(a1, a2)


@pytest.mark.parametrize("block_rows", [1, 7, 64, 1000])
def test_accumulated_products_equal_the_dense_sum(block_rows: int) -> None:
    c = zipf_counts(200, 2000, 800, seed=5).astype(np.float64)
    rng = np.random.default_rng(1)
    acc = np.full((200, 200), 0.25)
    want = acc.copy()
    for _ in range(3):
        a = c.copy()
        a.data = rng.binomial(c.data.astype(np.int64), 0.5).astype(np.float64)
        ra, rb = sqrt_rows(a + 1e-300 * c), sqrt_rows(c - a + 1e-300 * c)
        plan, _ = fastgram.plan_product(ra, rb, dtype=np.float64, block_rows=block_rows)
        assert plan.hybrid and plan.dense_columns > 0  # the hybrid path is the one tested
        got = fastgram.cross_product(ra, rb, dtype=np.float64, block_rows=block_rows, out=acc)
        assert got is acc
        want += ra.toarray() @ rb.toarray().T
    np.testing.assert_allclose(acc, want, rtol=0, atol=1e-12)


def test_out_of_the_wrong_shape_is_refused() -> None:
    c = zipf_counts(10, 50, 40, seed=0).astype(np.float64)
    r = sqrt_rows(c)
    with pytest.raises(Exception, match="'out' must be float64 of shape"):
        fastgram.cross_product(r, r, out=np.zeros((10, 9)))


@pytest.fixture(scope="module")
def long_counts() -> Counts:
    """160 positions without shards: thinning, and the partial spectrum when its threshold is
    lowered."""
    return Counts(zipf_counts(160, 1500, 700, seed=11), {"source": "synthetic"})


def _headline(geo: CorpusGeometry, full_max: int, eigvalsh_max: int) -> CorpusGeometry:
    """``geo`` with the headline spectrum of longer contexts (estimator._from_gram's call with
    lowered size limits)."""
    mds = mds_of_gram(
        geo.mds.gram,
        tolerances=estimator.HEADLINE_TOLERANCES,
        full_max=full_max,
        eigvalsh_max=eigvalsh_max,
        bottom=False,
    )
    return dataclasses.replace(geo, mds=mds)


def test_eigenvalues_without_vectors_path_agrees_with_full_eigh(long_counts: Counts) -> None:
    full = corpus_geometry(long_counts, min_count=1, plain=False)
    assert full.mds.total is None and full.mds.vectors.shape == (160, 160)
    mid = _headline(full, 64, 2048)
    # Taken: every eigenvalue, only the top START_RANK vectors.
    assert mid.mds.total is None and mid.mds.vectors.shape == (160, spectral.START_RANK)
    np.testing.assert_allclose(mid.mds.eigenvalues, full.mds.eigenvalues, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mid.mds.vectors, full.mds.vectors[:, :16], rtol=0, atol=1e-6)
    # A rank past the kept vectors is computed on demand.
    np.testing.assert_allclose(mid.mds.coordinates(20), full.mds.coordinates(20), rtol=0, atol=1e-6)
    a, b = spectrum(mid, (0.3, 0.05, 1e-4)), spectrum(full, (0.3, 0.05, 1e-4))
    assert a.effective_rank == b.effective_rank and a.signal_rank == b.signal_rank
    assert a.negative == b.negative and a.computed == b.computed == 0
    assert a.floor == pytest.approx(b.floor, abs=1e-12)
    np.testing.assert_allclose(a.stress_by_rank, b.stress_by_rank, rtol=0, atol=1e-12)


def test_partial_headline_spectrum_agrees_with_full_eigh(long_counts: Counts) -> None:
    full = corpus_geometry(long_counts, min_count=1, plain=False)
    part = _headline(full, 64, 64)
    assert part.mds.total is not None  # the partial path was taken
    k = part.mds.eigenvalues.size
    assert 3 <= k < 159
    lam = np.linalg.eigvalsh(part.mds.gram)[::-1]
    # Stated accuracy (posdiag.geometry.spectral): every computed eigenvalue and stress within 1e-7
    # ||B||_F; in practice far better.
    fro = float(np.linalg.norm(part.mds.gram))
    np.testing.assert_allclose(part.mds.eigenvalues, lam[:k], rtol=0, atol=1e-7 * fro)
    np.testing.assert_allclose(part.mds.eigenvalues, full.mds.eigenvalues[:k], atol=1e-9)
    np.testing.assert_allclose(
        part.mds.stress_by_rank(), stress_by_rank(lam)[:k], rtol=0, atol=1e-7
    )
    assert math.isnan(part.mds.min_eigenvalue)  # not computed on this path
    sp_full, sp_part = spectrum(full, (0.3, 0.05, 1e-4)), spectrum(part, (0.3, 0.05, 1e-4))
    assert sp_part.computed == k and sp_full.computed == 0
    for eps, r in sp_full.effective_rank.items():
        got = sp_part.effective_rank[eps]
        if r is not None and r <= k:
            assert got == r
        else:
            assert got == k + 1  # "more than k": the floor is unknown here
    assert sp_part.floor == 0.0 and f"only the top {k} eigenvalues" in sp_part.negative
    assert analysis.rank_text(k + 1, sp_part.floor, k) == f"> {k}"
    assert analysis.rank_text(None, 0.25, k) == "not reached (floor >= 0.250)"
    assert analysis.rank_text(None, 0.25) == "not reached (floor 0.250)"


def test_report_without_details_skips_the_plugin_and_the_noise_floor(
    long_counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_plugin, real_floor = estimator.plugin_bc, intervals.noise_floor
    monkeypatch.setattr(estimator, "plugin_bc", lambda c: calls.append("plugin") or real_plugin(c))
    monkeypatch.setattr(
        intervals, "noise_floor", lambda *a, **k: calls.append("floor") or real_floor(*a, **k)
    )
    lean = stress_report(
        dataclasses.replace(long_counts, no_intervals=NO_SHARDS),
        analysis=Analysis(min_count=1),
        details=False,
    )
    assert calls == []
    full = stress_report(
        dataclasses.replace(long_counts, no_intervals=NO_SHARDS),
        analysis=Analysis(min_count=1),
        details=True,
    )
    assert calls == ["plugin", "floor"]
    # The headline is the same geometry either way; only the detail columns differ.
    assert [(e.name, e.stress) for e in lean.encodings] == [
        (e.name, e.stress) for e in full.encodings
    ]
    assert all(math.isnan(e.plain) for e in lean.encodings)
    assert not any(math.isnan(e.plain) for e in full.encodings)
    assert lean.uncertainty is not None and lean.uncertainty.noise_floor == ()
    assert full.uncertainty is not None and len(full.uncertainty.noise_floor) == 160
    assert lean.uncertainty.unstable == full.uncertainty.unstable


def test_report_with_intervals_and_without_details_skips_the_noise_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With shards (intervals) too: a cross-fit's unstable positions come from its split-half
    grams, so the per-position floor, shown only by --verbose and the JSON, is not drawn."""
    from tests._data import sample_sharded_counts, zipf_drift_distributions

    mu = zipf_drift_distributions(24, 400, 3, sharpness=2.0, seed=3)
    total, parts = sample_sharded_counts(mu, 300, shards=8, seed=4)
    counts = Counts(sp.csr_matrix(total), {"source": "synthetic"}, None, tuple(parts))
    calls: list[str] = []
    # With shards the floor splits halves of the shards (docs/geometry.md 2b); either function.
    for name in ("noise_floor", "noise_floor_by_shards"):
        real = getattr(intervals, name)
        monkeypatch.setattr(
            intervals,
            name,
            functools.partial(lambda real, *a, **k: calls.append("floor") or real(*a, **k), real),
        )
    kw = Analysis(min_count=1, replicates=20)
    lean = stress_report(counts, analysis=kw, details=False)
    assert calls == []
    full = stress_report(counts, analysis=kw, details=True)
    assert calls == ["floor"]
    assert lean.uncertainty is not None and full.uncertainty is not None
    assert lean.uncertainty.shards == full.uncertainty.shards == 8
    assert lean.uncertainty.noise_floor == () and len(full.uncertainty.noise_floor) == 24
    assert lean.uncertainty.unstable == full.uncertainty.unstable
    assert lean.uncertainty.stress_by_rank == full.uncertainty.stress_by_rank
    assert [(e.stress, e.ci_low, e.ci_high) for e in lean.encodings] == [
        (e.stress, e.ci_low, e.ci_high) for e in full.encodings
    ]


def test_identical_positions_are_still_refused_without_the_plugin() -> None:
    row = np.array([[5, 3, 2, 0, 1]], dtype=np.int64)
    same = Counts(sp.csr_matrix(np.repeat(row, 6, axis=0)), {"source": "same"})
    with pytest.raises(Exception, match="same token distribution"):
        corpus_geometry(same, min_count=1, plain=False)


def test_thinning_headline_uses_the_expectation(long_counts: Counts) -> None:
    geo = corpus_geometry(long_counts, min_count=1, plain=False)
    assert geo.estimate is not None and geo.estimate.method == "thinning"
    # On the BLAS threads the headline uses (one below 512 positions): OpenBLAS 0.3.31 splits
    # this float32 product across threads, which reorders its additions.
    with small_blas(160):
        bc = expected_thinning_bc(long_counts.matrix, 160, dtype=np.float32, rare=np.float64)
    want = gram_from_bc(bc)
    np.testing.assert_allclose(geo.mds.gram, want, rtol=0, atol=1e-14)
    # No seed dependence: the expectation is over every split.
    other = corpus_geometry(long_counts, min_count=1, plain=False, seed=5)
    np.testing.assert_array_equal(other.mds.gram, geo.mds.gram)


@pytest.mark.parametrize(
    ("split", "product"), [("thinning", "expected_thinning_bc"), ("shards", "crossfit_bc")]
)
def test_float32_headline_moves_every_printed_number_below_1e6(
    long_counts: Counts, monkeypatch: pytest.MonkeyPatch, split: str, product: str
) -> None:
    # The headline's product runs its dense block in float32, centred on the column level
    # (posdiag.geometry._gram._level): every stress, Kruskal stress, Spearman and eigenvalue of the
    # report stays within 1e-6 of the float64 product's, for either cross-fit.
    plan, _ = fastgram.plan_product(sqrt_rows(long_counts.matrix), sqrt_rows(long_counts.matrix))
    assert plan.hybrid and plan.dense_columns > 0  # a dense block exists to be float32
    m = sp.csr_matrix(long_counts.matrix, dtype=np.int64)
    shards = tuple(_shards_of(m, 8, seed=4)) if split == "shards" else ()
    # The shards ride on the counts as well (corpus_geometry reads them there).
    sharded = dataclasses.replace(long_counts, shards=shards)
    real = getattr(estimator, product)
    seen: list[str] = []

    def spy(*args: object, **kwargs: object) -> np.ndarray:
        seen.append(np.dtype(kwargs.get("dtype", np.float64)).name)
        return real(*args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(estimator, product, spy)
    f32 = stress_report(sharded, analysis=Analysis(min_count=1, replicates=20), details=False)
    assert seen[0] == "float32"  # the headline's own product

    def as64(*args: object, **kwargs: object) -> np.ndarray:
        return real(*args, **{**kwargs, "dtype": np.float64})  # type: ignore[no-any-return]

    monkeypatch.setattr(estimator, product, as64)
    f64 = stress_report(sharded, analysis=Analysis(min_count=1, replicates=20), details=False)
    lam32, lam64 = np.array(f32.spectrum.eigenvalues), np.array(f64.spectrum.eigenvalues)
    assert 0 < float(np.abs(lam32 - lam64).max()) < 1e-6  # float32 was used, and only that
    assert f32.spectrum.effective_rank == f64.spectrum.effective_rank
    for a, b in zip(f32.encodings, f64.encodings, strict=True):
        assert a.name == b.name
        for field in ("stress", "kruskal", "spearman"):
            x, y = getattr(a, field), getattr(b, field)
            assert (math.isnan(x) and math.isnan(y)) or abs(x - y) < 1e-6, (a.name, field)


def _shards_of(m: sp.csr_matrix, k: int, seed: int) -> list[sp.csr_matrix]:
    """``k`` shards: each count goes to a shard multinomially (a chain of binomial draws)."""
    m = sp.csr_matrix(m, dtype=np.int64)
    rng = np.random.default_rng(seed)
    left, shards = m.data.copy(), []
    for rest in range(k, 0, -1):
        take = rng.binomial(left, 1.0 / rest) if rest > 1 else left
        shards.append(sp.csr_matrix((take, m.indices, m.indptr), shape=m.shape))
        left = left - take
    return shards


@pytest.mark.parametrize(
    ("split", "product"), [("thinning", "expected_thinning_bc"), ("shards", "crossfit_bc")]
)
def test_float32_split_half_grams_move_heldout_scores_below_1e6(
    long_counts: Counts, monkeypatch: pytest.MonkeyPatch, split: str, product: str
) -> None:
    from posdiag.geometry import heldout
    from tests.geometry._oracles import heldout_mds_stress, noise_energy, split_half_grams

    m = sp.csr_matrix(long_counts.matrix, dtype=np.int64)
    shards = _shards_of(m, 8, seed=4) if split == "shards" else []
    dtypes: list[object] = []
    real = getattr(estimator, product)

    def spy(*args: object, **kwargs: object) -> np.ndarray:
        dtypes.append(kwargs.get("dtype"))
        return real(*args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(heldout, product, spy)
    plan, _ = fastgram.plan_product(sqrt_rows(m), sqrt_rows(m))
    assert plan.hybrid and plan.dense_columns > 0  # a dense block exists to be float32
    f32 = split_half_grams(m, 160, shards=shards)
    # 4 outer splits x (P, Q) below 512 positions, all by this split.
    assert dtypes == [np.float32] * 2 * estimator.outer_splits(160) == [np.float32] * 8

    def as64(*args: object, **kwargs: object) -> np.ndarray:
        return real(*args, **{**kwargs, "dtype": np.float64})  # type: ignore[no-any-return]

    monkeypatch.setattr(heldout, product, as64)
    f64 = split_half_grams(m, 160, shards=shards)
    for (p32, q32), (p64, q64) in zip(f32.grams, f64.grams, strict=True):
        assert 0 < float(np.abs(p32 - p64).max()) < 1e-6  # float32 rounding, nothing more
        assert float(np.abs(q32 - q64).max()) < 1e-6
    h32, h64 = heldout_mds_stress(f32, [1, 2, 3]), heldout_mds_stress(f64, [1, 2, 3])
    for r in (1, 2, 3):
        assert abs(h32[r] - h64[r]) < 1e-6
    np.testing.assert_allclose(noise_energy(f32), noise_energy(f64), rtol=0, atol=1e-9)


def test_expected_halves_per_row_table_equals_the_direct_moments() -> None:
    # Counts below posdiag.geometry._thinning._MEMO come from a per-row table, larger ones are
    # computed each time: both agree with scipy's hypergeometric law, and repeats are bit-identical.
    from posdiag.geometry import _thinning

    row = [7, 7, 3, 7, _thinning._MEMO - 1, _thinning._MEMO + 5, _thinning._MEMO + 5, 1]
    c = sp.csr_matrix(np.array([row, row[::-1]], dtype=np.int64))
    ma, mb, diag = expected_halves(c)
    total = sum(row)
    h, g = total // 2, total - total // 2
    for i in range(2):
        got = ma.data[c.indptr[i] : c.indptr[i + 1]]
        counts = c.data[c.indptr[i] : c.indptr[i + 1]]
        for k in set(counts.tolist()):
            same = got[counts == k]
            assert np.all(same == same[0])
            ks = np.arange(k + 1)
            pmf = hypergeom(total, k, h).pmf(ks)
            assert same[0] == pytest.approx(pmf @ np.sqrt(ks / h), rel=1e-12)
        assert mb.data[c.indptr[i]] == pytest.approx(
            hypergeom(total, counts[0], h).pmf(np.arange(counts[0] + 1))
            @ np.sqrt((counts[0] - np.arange(counts[0] + 1)) / g),
            rel=1e-12,
        )
    assert diag[0] == pytest.approx(diag[1], rel=1e-15)  # the same counts in another order


@pytest.mark.parametrize("many", [False, True])
def test_expected_halves_table_shared_across_rows_of_equal_totals(many: bool) -> None:
    # Rows of three totals (one odd: halves of different sizes), each a permutation of its
    # template, and a row of one token (its count is its total). With many rows every small
    # count's entries come from one table per total (filled for every count up to the total);
    # a row alone fills only the counts it holds. Both give the same bits, and the scipy
    # hypergeometric moments.
    from posdiag.geometry import _thinning

    rng = np.random.default_rng(11)
    v = 900 if many else 12
    templates = []
    for big in (_thinning._MEMO + 3, _thinning._MEMO * 2, 3):
        t = rng.integers(1, 6, size=v)
        t[:2] = (big, _thinning._MEMO - 1)
        templates.append(t)
    templates[1][5] += 1 - int(templates[1].sum()) % 2  # an odd total
    rows = [rng.permutation(templates[i % 3]) for i in range(300 if many else 6)]
    rows.append(np.eye(1, v, 4, dtype=np.int64)[0] * 5)
    c = sp.csr_matrix(np.array(rows, dtype=np.int64))
    totals = [int(t.sum()) for t in templates] + [5]
    assert len(set(totals)) == 4 and any(t % 2 for t in totals)
    # Whole tables filled (many rows), else only the counts seen.
    assert (c.nnz >= 4 * _thinning._MEMO**2) == many
    before = [x.copy() for x in (c.data, c.indices, c.indptr)]
    ma, mb, diag = expected_halves(c)
    for x, y in zip(before, (c.data, c.indices, c.indptr), strict=True):
        assert np.array_equal(x, y)  # the counts are left as they were
    for half in (ma, mb):  # the pattern of the counts, every entry positive
        assert np.array_equal(half.indices, c.indices) and np.array_equal(half.indptr, c.indptr)
        assert half.data.min() > 0
    for i in range(c.shape[0]):
        alone_a, alone_b, alone_d = expected_halves(c[i])
        lo, hi = c.indptr[i], c.indptr[i + 1]
        assert np.array_equal(ma.data[lo:hi], alone_a.data)
        assert np.array_equal(mb.data[lo:hi], alone_b.data)
        assert diag[i] == alone_d[0]
    for i, total in zip([0, 1, 2, c.shape[0] - 1], totals, strict=True):  # each total: scipy
        h, g = total // 2, total - total // 2
        lo, hi = c.indptr[i], c.indptr[i + 1]
        acc = 0.0
        for k in sorted(set(c.data[lo:hi].tolist())):
            ks = np.arange(k + 1)
            pmf = hypergeom(total, k, h).pmf(ks)
            at = lo + np.flatnonzero(c.data[lo:hi] == k)
            assert np.all(ma.data[at] == pytest.approx(pmf @ np.sqrt(ks / h), rel=1e-12))
            assert np.all(mb.data[at] == pytest.approx(pmf @ np.sqrt((k - ks) / g), rel=1e-12))
            acc += at.size * float(pmf @ np.sqrt(ks * (k - ks)))
        assert diag[i] == pytest.approx(acc / math.sqrt(h * g), rel=1e-12)


@pytest.mark.parametrize("n", [40, 150])
def test_distances_to_first_equal_the_plugin_row_zero(n: int) -> None:
    from posdiag.geometry import _square
    from posdiag.geometry.estimator import distances_to_first, plugin_bc

    # The numpy path serves small inputs (no numba import), the compiled merge from 128 rows.
    c = zipf_counts(160, 300, 120, seed=4).tolil()
    c[7, :] = 0  # a row without tokens is at distance 1
    c = sp.csr_matrix(c)
    full = np.sqrt(np.clip(1.0 - plugin_bc(np.delete(c.toarray(), 7, axis=0))[0], 0.0, 1.0))
    got = distances_to_first(c, n)
    assert got.shape == (n,) and got[0] == 0.0 and got[7] == 1.0
    np.testing.assert_allclose(np.delete(got, 7), full[: n - 1], rtol=0, atol=1e-12)
    # Duplicated entries count as their sum; dense input too.
    coo = c.tocoo()
    dup = sp.csr_matrix(
        (np.r_[coo.data / 2, coo.data / 2], (np.r_[coo.row, coo.row], np.r_[coo.col, coo.col])),
        shape=c.shape,
    )
    dup = sp.csr_matrix((dup.data, dup.indices, dup.indptr), shape=c.shape)
    np.testing.assert_allclose(distances_to_first(c.toarray(), n), got, rtol=0, atol=1e-15)
    np.testing.assert_allclose(distances_to_first(dup, n), got, rtol=0, atol=1e-15)
    same = sp.csr_matrix(np.repeat(np.array([[5, 3, 2, 0, 1]]), 6, axis=0))
    assert distances_to_first(same, 6).max() == 0.0  # a sum of squares: no rounding left
    # Both paths agree to rounding (their sums run in another order).
    numpy = _square._distances_to_first_numpy(c.indptr[: n + 1].astype(np.int64), c.indices, c.data)
    np.testing.assert_allclose(numpy, got, rtol=0, atol=1e-15)


_KERNEL_RUN = """
import numpy as np, scipy.sparse as sp
from posdiag.uncertainty import _shardsum
from posdiag.geometry import _thinning
from posdiag.geometry import _compiled, _square
from posdiag.geometry.estimator import distances_to_first, expected_thinning_bc, gram_from_bc
from posdiag.geometry.estimator import stack_shards
rng = np.random.default_rng(0)
c = sp.csr_matrix(rng.poisson(0.3, size=(160, 400)) + (rng.random((160, 400)) < 0.5) * 4)
gram_from_bc(expected_thinning_bc(c))
_thinning.draw_half(c, rng)
distances_to_first(c, 160)
_shardsum.ShardStack(stack_shards([c, c], 160), 160).sum(np.array([1]))
misses = 0
tables = (_thinning._kernels(), _compiled.split_kernels(), _square._square_kernels())
for table in (*tables, _shardsum._kernels()):
    for k in table.values():
        misses += sum(k.stats.cache_misses.values())
misses += sum(sum(k.stats.cache_misses.values()) for k in _compiled.rare_kernels())
print(misses)
"""


def test_compiled_kernels_load_from_the_cache_in_a_fresh_process() -> None:
    """Every kernel of the long-context paths is cached (numba ``cache=True``): a fresh process
    compiles nothing (`expected` once recompiled in every process: ~1 s)."""
    import subprocess
    import sys

    # The first run fills the cache where it is missing or stale; the second must only load.
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-c", _KERNEL_RUN], capture_output=True, text=True, check=True
        )
    assert run.stdout.strip() == "0", run.stdout + run.stderr
