"""Hellinger, classical MDS and stress against brute-force computations and spec identities."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.spatial.distance import pdist, squareform
from scipy.stats import kendalltau, spearmanr

from posdiag.errors import PosdiagError, PosdiagWarning
from posdiag.geometry._gram import sqrt_rows
from posdiag.geometry.core import (
    MDS,
    _fix_signs,
    classical_mds,
    compare,
    effective_rank,
    gram_from_distances,
    gram_from_vectors,
    hellinger_distances,
    pairwise_distances,
    parameter_saving,
    positional_information,
    reached_rank,
    separation,
    shift_equivariance,
    significant_negative,
    smoothness,
    stress,
    stress_by_rank,
    stress_floor,
    supported_prefix,
    violation_rate,
)
from tests.geometry._oracles import double_center, positive_rank, symmetrize


def brute_hellinger(c: np.ndarray) -> np.ndarray:
    """Dense, loop-based d_H = sqrt(1 - sum_v sqrt(mu_i mu_j))."""
    mu = c / c.sum(axis=1, keepdims=True)
    n = len(mu)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            bc = sum(np.sqrt(mu[i, v] * mu[j, v]) for v in range(c.shape[1]))
            d[i, j] = np.sqrt(max(0.0, 1.0 - bc))
    return d


def brute_gram(d: np.ndarray) -> np.ndarray:
    n = len(d)
    j = np.eye(n) - np.ones((n, n)) / n
    return -0.5 * j @ (d**2) @ j


counts_st = arrays(
    np.int64,
    st.tuples(st.integers(2, 7), st.integers(1, 9)),
    elements=st.integers(0, 50),
).filter(lambda c: bool(np.all(c.sum(axis=1) > 0)))


@pytest.mark.parametrize("seed", range(5))
def test_hellinger_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 20, size=(6, 15)) * (rng.random((6, 15)) < 0.5)
    c[:, 0] += 1  # every row needs support
    got = hellinger_distances(sp.csr_matrix(c))
    np.testing.assert_allclose(got, brute_hellinger(c.astype(float)), atol=1e-7)


def test_hellinger_is_euclidean_distance_of_sqrt_points() -> None:
    rng = np.random.default_rng(3)
    c = rng.integers(1, 9, size=(5, 8)).astype(float)
    s = np.sqrt(c / c.sum(axis=1, keepdims=True)) / np.sqrt(2)
    np.testing.assert_allclose(hellinger_distances(c), squareform(pdist(s)), atol=1e-7)


def test_hellinger_disjoint_supports_is_one_and_identical_is_zero() -> None:
    c = np.array([[5, 0, 0], [0, 3, 4], [10, 0, 0]])
    d = hellinger_distances(sp.csr_matrix(c))
    assert d[0, 1] == pytest.approx(1.0)
    assert d[0, 2] == 0.0  # same distribution, different supports


@settings(max_examples=60, deadline=None)
@given(counts_st)
def test_hellinger_properties(c: np.ndarray) -> None:
    d = hellinger_distances(sp.csr_matrix(c))
    assert np.array_equal(d, d.T)
    assert np.all(np.diag(d) == 0.0)
    assert np.all((d >= 0) & (d <= 1))
    n = len(d)
    for i in range(n):
        for j in range(n):
            assert np.all(d[i, j] <= d[i, :] + d[:, j] + 1e-7)


def test_mds_matches_independent_eigendecomposition() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(9, 4))
    d = squareform(pdist(x))
    m = classical_mds(d)
    lam, u = np.linalg.eig(brute_gram(d))  # general solver, a different code path than eigh
    order = np.argsort(-lam.real)
    np.testing.assert_allclose(m.eigenvalues, lam.real[order], atol=1e-9)
    for k in range(4):  # eigenvectors up to sign
        ref = u.real[:, order[k]]
        assert abs(abs(ref @ m.vectors[:, k]) - 1.0) < 1e-8
    np.testing.assert_allclose(m.gram, brute_gram(d), atol=1e-12)


def test_mds_of_euclidean_configuration_recovers_distances_and_stress_zero() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(12, 3))
    d = squareform(pdist(x))
    m = classical_mds(d)
    xr = m.coordinates(3)
    np.testing.assert_allclose(squareform(pdist(xr)), d, atol=1e-9)
    assert stress(m.gram, gram_from_vectors(xr)) < 1e-7
    assert stress_by_rank(m.eigenvalues)[2] < 1e-7


def test_mds_signs_are_deterministic() -> None:
    rng = np.random.default_rng(2)
    d = squareform(pdist(rng.normal(size=(8, 3))))
    u = classical_mds(d).vectors[:, :3]
    for k in range(3):
        col = u[:, k]
        assert col[np.argmax(np.abs(col))] > 0
    # Reordering the points permutes the coordinates and keeps their signs.
    perm = np.arange(8)[::-1]
    x1 = classical_mds(d).coordinates(3)
    x2 = classical_mds(d[np.ix_(perm, perm)]).coordinates(3)
    np.testing.assert_allclose(x1[perm], x2, atol=1e-9)


@pytest.mark.parametrize("rank", [1, 2, 3, 5])
def test_mds_stress_equals_eigenvalue_tail(rank: int) -> None:
    rng = np.random.default_rng(4)
    c = rng.integers(0, 30, size=(10, 40)) + 1
    d = hellinger_distances(c)
    m = classical_mds(d)
    direct = stress(m.gram, gram_from_vectors(m.coordinates(rank)))
    lam = m.eigenvalues
    tail = np.sqrt(np.sum(lam[rank:] ** 2) / np.sum(lam**2))
    assert direct == pytest.approx(tail, abs=1e-9)
    assert stress_by_rank(lam)[rank - 1] == pytest.approx(tail, abs=1e-12)


def test_mds_rank_r_beats_any_rank_r_configuration() -> None:
    rng = np.random.default_rng(5)
    d = hellinger_distances(rng.integers(1, 20, size=(10, 30)))
    m = classical_mds(d)
    best = stress_by_rank(m.eigenvalues)[1]
    for _ in range(50):
        other = gram_from_vectors(rng.normal(size=(10, 2)))
        assert stress(m.gram, other) >= best - 1e-12


def test_stress_of_zero_encoding_is_exactly_one_and_scale_invariant() -> None:
    rng = np.random.default_rng(6)
    b_h = gram_from_distances(hellinger_distances(rng.integers(1, 9, size=(7, 12))))
    assert stress(b_h, np.zeros_like(b_h)) == 1.0
    b_e = gram_from_vectors(rng.normal(size=(7, 3)))
    s = stress(b_h, b_e)
    assert 0.0 <= s <= 1.0
    for c in (1e-6, 0.5, 3.0, 1e5):
        assert stress(b_h, c * b_e) == pytest.approx(s, abs=1e-12)


def test_stress_equals_fitted_minimum_by_grid_search() -> None:
    rng = np.random.default_rng(7)
    b_h = gram_from_distances(hellinger_distances(rng.integers(1, 9, size=(6, 10))))
    b_e = gram_from_vectors(rng.normal(size=(6, 2)))
    cs = np.linspace(0, 5 * np.linalg.norm(b_h) / np.linalg.norm(b_e), 200001)
    grid = min(np.linalg.norm(b_h - c * b_e) for c in cs[::100]) / np.linalg.norm(b_h)
    assert stress(b_h, b_e) == pytest.approx(grid, abs=1e-4)
    assert stress(b_h, b_e) <= grid + 1e-12


def test_compare_measures_against_direct_formulas() -> None:
    rng = np.random.default_rng(8)
    d_h = hellinger_distances(rng.integers(1, 9, size=(8, 10)))
    b_h = gram_from_distances(d_h)
    p = rng.normal(size=(8, 3))
    delta = squareform(pdist(p))
    m = compare(d_h, b_h, delta, gram_from_distances(delta))
    b_e = brute_gram(delta)
    assert m.raw == pytest.approx(np.linalg.norm(brute_gram(d_h) - b_e) / np.linalg.norm(b_h))
    iu = np.triu_indices(8, 1)
    x, y = d_h[iu], delta[iu]
    c = (x @ y) / (y @ y)
    assert m.kruskal == pytest.approx(np.sqrt(np.sum((x - c * y) ** 2) / np.sum(x**2)))
    assert m.spearman == pytest.approx(spearmanr(x, y).statistic)


def test_effective_rank_and_supported_prefix() -> None:
    lam = np.array([4.0, 2.0, 1.0, 0.01, 0.0])
    by_rank = stress_by_rank(lam)
    assert effective_rank(lam, 0.05) == 1 + int(np.argmax(by_rank <= 0.05))
    assert effective_rank(lam, 1.0) == 1
    with pytest.raises(PosdiagError, match=r"'eps' must be a float in \[0, 1\]; got 2"):
        effective_rank(lam, 2)
    assert supported_prefix(np.array([9, 7, 3, 8]), 5) == 2
    assert supported_prefix(np.array([9, 7]), 5) == 2


def test_negative_eigenvalue_warning_quotes_numbers() -> None:
    # A non-Euclidean dissimilarity: the triangle inequality is violated.
    d = np.array([[0, 1, 5], [1, 0, 1], [5, 1, 0]], dtype=float)
    with pytest.warns(PosdiagWarning, match=r"most negative eigenvalue -\d"):
        classical_mds(d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        classical_mds(squareform(pdist(np.arange(5.0)[:, None])))


def test_positional_information_matches_brute_force() -> None:
    rng = np.random.default_rng(9)
    c = rng.integers(0, 6, size=(4, 7)) + (np.arange(7) == 0)
    n_i = c.sum(axis=1)
    mu = c / n_i[:, None]
    bar = c.sum(axis=0) / c.sum()
    kl = [sum(m * np.log2(m / b) for m, b in zip(row, bar, strict=True) if m > 0) for row in mu]
    total, per = positional_information(sp.csr_matrix(c))
    np.testing.assert_allclose(per, kl, atol=1e-12)
    assert total == pytest.approx(float(np.sum(n_i / n_i.sum() * np.array(kl))))
    same, _ = positional_information(np.tile([3, 1, 2], (5, 1)))
    assert same == pytest.approx(0.0, abs=1e-12)


def test_negative_eigenvalue_reported_only_when_significant(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    assert significant_negative(np.array([2.0, 1.0, -1e-15])) is None
    assert significant_negative(np.array([2.0, 1.0, -0.5])) == -0.5
    args = ["stress", str(synth_corpus), "--min-count", "50", "--shards", "0"]
    # The plug-in is Euclidean up to rounding: no line.
    res = cli([*args, "--estimator", "plugin"])
    assert res.exit_code == 0 and "most negative eigenvalue" not in res.stdout
    # The cross-fit has negative eigenvalues by design: one line, no warning.
    res = cli(args)
    assert res.exit_code == 0 and res.stderr == ""
    assert "most negative eigenvalue" in res.stdout and "signal rank" in res.stdout


def test_docs_state_how_far_a_counts_file_sits_from_its_corpus(
    cli: Callable[..., Result], bundled_corpus: Path, repo_root: Path, tmp_path: Path
) -> None:
    """Issue 34 item 9: the docs said a counts file's thinning agrees with the split by
    sequence "within 0.0022 on every stress"; mds-3 differs by 0.0127. The docs' figures are
    now what the two commands print."""
    import json

    npz = tmp_path / "c.npz"
    assert cli(["count", str(bundled_corpus), "-o", str(npz)]).exit_code == 0
    rows = []
    for source in (str(bundled_corpus), str(npz)):
        doc = json.loads(cli(["stress", source, "--shards", "0", "--json"]).stdout)
        rows.append({e["name"]: e for e in doc["encodings"]})
        rows[-1]["l_1"] = {"stress": doc["spectrum"]["eigenvalues"][0]}
    text, counts = rows
    fixed = [k for k in text if not k.startswith("mds") and k != "l_1"]
    assert max(abs(text[k]["stress"] - counts[k]["stress"]) for k in fixed) <= 0.0018
    assert "within 0.0018 on the stress of every fixed encoding" in " ".join(
        (repo_root / "docs" / "geometry.md").read_text().split()
    )
    assert abs(text["l_1"]["stress"] / counts["l_1"]["stress"] - 1) <= 0.0002
    geometry_md = " ".join((repo_root / "docs" / "geometry.md").read_text().split())
    assert "within 0.0022 on every stress" not in geometry_md
    a, b = text["alibi"]["stress"], counts["alibi"]["stress"]
    assert f"(alibi {a:.4f} vs {b:.4f})" in geometry_md
    m3, c3 = text["mds-3"]["stress"], counts["mds-3"]["stress"]
    assert f"`mds-3` {m3:.4f} vs {c3:.4f} ({m3 - c3:.4f})" in geometry_md
    for r in (2, 1):
        x, y = text[f"mds-{r}"]["stress"], counts[f"mds-{r}"]["stress"]
        assert f"`mds-{r}` {x:.4f} vs {y:.4f}" in geometry_md
    i, j = text["mds-3"]["in_sample"], counts["mds-3"]["in_sample"]
    assert f"the in-sample tail of rank 3 {i:.4f} vs {j:.4f}" in geometry_md
    # nope: no positional signal scores exactly 1 (the README's "(no positional encoding
    # scores exactly 1)" is about nope, and reads as if no encoding could).
    assert text["nope"]["stress"] == counts["nope"]["stress"] == 1.0


# Mutation-strength tests: geometry._gram and geometry.spectral paths pinned against independent
# values.


def test_sqrt_rows_equals_the_dense_square_root_of_the_frequencies() -> None:
    counts = np.array([[3, 0, 1, 0], [0, 0, 0, 7], [2, 2, 2, 2]])
    want = np.sqrt(counts / counts.sum(axis=1, keepdims=True))
    got = sqrt_rows(counts)
    assert got.format == "csr" and got.dtype == np.float64
    np.testing.assert_allclose(got.toarray(), want, rtol=0, atol=1e-16)


def test_sqrt_rows_keeps_an_empty_row_zero() -> None:
    counts = np.array([[1, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(sqrt_rows(counts).toarray(), [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])


# Mutation-strength tests: geometry.core paths pinned, each against an independent value.


def dense_hellinger(c: np.ndarray) -> np.ndarray:
    """d_H = sqrt(1 - sum_v sqrt(mu_iv mu_jv)) with dense numpy, row pair by row pair."""
    mu = np.sqrt(c / c.sum(axis=1, keepdims=True))
    n = len(c)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                out[i, j] = math.sqrt(max(0.0, 1.0 - float(mu[i] @ mu[j])))
    return out


def centring(n: int) -> np.ndarray:
    return np.eye(n) - np.ones((n, n)) / n


# --- hellinger_distances: both halves of the hybrid product --------------------------------


def mixed_counts(seed: int, n: int = 200) -> np.ndarray:
    """Frequent columns (in every row) and rare ones (each in 1-3 rows), so both halves run."""
    rng = np.random.default_rng(seed)
    frequent = rng.integers(1, 20, size=(n, 6))
    rare = np.zeros((n, 300), dtype=np.int64)
    for v in range(300):
        rows = rng.choice(n, size=1 + v % 3, replace=False)
        rare[rows, v] = rng.integers(1, 50, size=rows.size)
    unused = np.zeros((n, 4), dtype=np.int64)  # columns nobody uses
    return np.concatenate([frequent, rare, unused], axis=1)


@pytest.mark.parametrize("seed", [0, 1])
def test_fast_hellinger_with_rare_columns_matches_dense(seed: int) -> None:
    c = mixed_counts(seed)
    col_rows = (c > 0).sum(axis=0)
    assert (col_rows > 0.05 * len(c)).sum() == 6 and ((col_rows > 0) & (col_rows <= 10)).sum() > 0
    expected = dense_hellinger(c.astype(float))
    np.testing.assert_allclose(hellinger_distances(sp.csr_matrix(c)), expected, atol=1e-12)
    # The rare columns matter: without them the distances are different.
    rare_only = dense_hellinger(c[:, :6].astype(float))
    assert np.abs(expected - rare_only).max() > 0.1


def test_fast_hellinger_only_rare_columns_and_only_frequent_columns() -> None:
    n = 200
    eye = np.eye(n, dtype=np.int64) * 3  # every column in one row: all rare, all distances 1
    eye[:, 0] += 1  # ... except column 0, which is in every row
    d = hellinger_distances(eye)
    np.testing.assert_allclose(d, dense_hellinger(eye.astype(float)), atol=1e-12)
    rng = np.random.default_rng(3)
    dense_only = rng.integers(1, 9, size=(n, 5))
    np.testing.assert_allclose(
        hellinger_distances(dense_only), dense_hellinger(dense_only.astype(float)), atol=1e-12
    )


def test_fast_hellinger_below_the_hybrid_size_and_zero_rows() -> None:
    c = np.array([[1, 0, 3], [0, 2, 2], [5, 1, 0]])
    np.testing.assert_allclose(hellinger_distances(c), dense_hellinger(c.astype(float)))
    big = mixed_counts(4)
    big[7] = 0
    for f in (hellinger_distances,):
        with pytest.raises(ValueError, match="every row of the count matrix needs a positive sum"):
            f(big)


def test_fast_hellinger_is_exactly_symmetric_with_zero_diagonal() -> None:
    d = hellinger_distances(mixed_counts(5))
    assert (d == d.T).all() and (np.diag(d) == 0).all() and d.max() <= 1.0


# --- Gram matrices, double centring, pairwise distances -----------------------------------------


def test_gram_from_vectors_centres_raw_vectors() -> None:
    p = np.array([[1.0, 2.0], [4.0, -1.0], [10.0, 5.0], [0.0, 7.0]])  # mean far from 0
    j = centring(4)
    np.testing.assert_allclose(gram_from_vectors(p), j @ p @ p.T @ j, atol=1e-12)
    d = np.array([[np.linalg.norm(a - b) for b in p] for a in p])
    np.testing.assert_allclose(gram_from_vectors(p), gram_from_distances(d), atol=1e-9)


def test_double_center_is_jmj_for_a_nonsymmetric_matrix() -> None:
    m = np.arange(12.0).reshape(3, 4)[:, :3] ** 2 + np.array([[0, 5, 1], [2, 0, 7], [3, 3, 0]])
    j = centring(3)
    np.testing.assert_allclose(double_center(m), j @ m @ j, atol=1e-12)


def test_gram_from_distances_by_hand() -> None:
    # Points 0, 1, 3 on a line: centred coordinates -4/3, -1/3, 5/3, B = x x^T.
    d = np.array([[0.0, 1.0, 3.0], [1.0, 0.0, 2.0], [3.0, 2.0, 0.0]])
    x = np.array([-4.0, -1.0, 5.0]) / 3.0
    np.testing.assert_allclose(gram_from_distances(d), np.outer(x, x), atol=1e-12)


def test_pairwise_distances_by_hand() -> None:
    p = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0], [3.0, 4.0]])
    expected = np.array([[0, 5, 10, 5], [5, 0, 5, 0], [10, 5, 0, 5], [5, 0, 5, 0]], dtype=float)
    np.testing.assert_allclose(pairwise_distances(p), expected, atol=1e-7)
    assert (np.diag(pairwise_distances(p)) == 0).all()


# --- MDS ---------------------------------------------------------------------------------------


def test_mds_properties_and_coordinates() -> None:
    # A 2-d configuration: eigenvalues of B are the squared singular values of centred P.
    p = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 2.0], [4.0, 2.0], [2.0, 1.0]])
    d = np.array([[np.linalg.norm(a - b) for b in p] for a in p])
    mds = classical_mds(d)
    jp = p - p.mean(axis=0)
    sv2 = np.sort(np.linalg.svd(jp, compute_uv=False) ** 2)[::-1]
    assert mds.n == 5
    np.testing.assert_allclose(mds.eigenvalues[:2], sv2, atol=1e-9)
    assert positive_rank(mds) == 2
    assert mds.min_eigenvalue == pytest.approx(float(mds.eigenvalues[-1]), abs=0)
    assert abs(mds.min_eigenvalue) < 1e-9
    x2 = mds.coordinates(2)
    assert x2.shape == (5, 2)
    np.testing.assert_allclose(x2 @ x2.T, jp @ jp.T, atol=1e-9)
    x4 = mds.coordinates(4)  # negative rounding eigenvalues are clipped to 0, not NaN
    assert np.isfinite(x4).all()
    np.testing.assert_allclose(x4 @ x4.T, jp @ jp.T, atol=1e-9)
    for bad in (0, 5):
        with pytest.raises(PosdiagError) as exc:
            mds.coordinates(bad)
        assert str(exc.value) == f"'rank' must be an int in [1, n-1=4]; got {bad}"


def test_mds_positive_rank_and_min_eigenvalue_by_hand() -> None:
    mds = MDS(np.array([5.0, 1e-12, -3.0]), np.eye(3), np.zeros((3, 3)))
    assert (mds.n, positive_rank(mds), mds.min_eigenvalue) == (3, 1, -3.0)
    neg = MDS(np.array([-1.0, -2.0]), np.eye(2), np.zeros((2, 2)))
    assert positive_rank(neg) == 0


def test_mds_fixes_signs_and_handles_zero_columns() -> None:
    # All-equal distances: B has one zero eigenvalue with a constant eigenvector.
    d = 1.0 - np.eye(4)
    mds = classical_mds(d)
    u = mds.vectors
    for k in range(4):
        col = u[:, k]
        assert col[np.argmax(np.abs(col))] > 0
    np.testing.assert_allclose(mds.eigenvalues[:3], 0.5, atol=1e-12)


def test_classical_mds_warning_text_is_exact() -> None:
    d = np.array([[0, 1, 5], [1, 0, 1], [5, 1, 0]], dtype=float)
    b = -0.5 * centring(3) @ (d**2) @ centring(3)
    lam = np.sort(np.linalg.eigvalsh(b))[::-1]
    with pytest.warns(PosdiagWarning) as rec:
        classical_mds(d)
    assert str(rec[0].message) == (
        f"classical MDS: most negative eigenvalue {lam[-1]:.3e} is below "
        f"-1e-10 * l_1 = {-1e-10 * lam[0]:.3e} (l_1 = {lam[0]:.3e}); "
        "the distances are not exactly Euclidean"
    )


def test_significant_negative_uses_a_relative_tolerance() -> None:
    assert significant_negative(np.array([1000.0, -5e-8])) is None  # -5e-8 > -1e-7
    assert significant_negative(np.array([1000.0, -2e-7])) == -2e-7
    assert significant_negative(np.array([1000.0, -1e-7])) is None  # the bound is strict
    assert significant_negative(np.array([-1.0, -2.0])) == -2.0  # l_1 <= 0: any negative counts
    assert significant_negative(np.array([])) is None
    assert significant_negative(np.array([3.0, 0.0])) is None


# --- stress, ranks ------------------------------------------------------------------------------


def test_stress_by_hand_and_edge_cases() -> None:
    b_h = np.array([[1.0, 0.0], [0.0, 0.0]])
    b_e = np.array([[1.0, 1.0], [1.0, 0.0]])
    # cos = 1 / sqrt(3): stress = sqrt(1 - 1/3)
    assert stress(b_h, b_e) == pytest.approx(math.sqrt(2 / 3), rel=1e-15)
    assert stress(b_h, -b_e) == 1.0  # anti-correlated: the best c >= 0 is 0
    assert stress(b_h, np.zeros((2, 2))) == 1.0
    assert stress(b_h, 7.0 * b_h) == 0.0
    with pytest.raises(ValueError, match="the corpus Gram matrix is zero"):
        stress(np.zeros((2, 2)), b_e)


def test_stress_by_rank_and_effective_rank_by_hand() -> None:
    lam = np.array([3.0, 2.0, 1.0, 0.0])
    total = 9 + 4 + 1
    expected = [math.sqrt(5 / total), math.sqrt(1 / total), 0.0]
    np.testing.assert_allclose(stress_by_rank(lam), expected, rtol=1e-15)
    assert effective_rank(lam, 0.6) == 1
    assert effective_rank(lam, 0.5) == 2
    assert effective_rank(lam, 0.0) == 3
    # No rank reaches eps = 0 when every eigenvalue is non-zero: the largest rank, n - 1.
    assert effective_rank(np.array([3.0, 2.0, 1.0, 0.5]), 0.0) == 3


def test_supported_prefix_boundaries() -> None:
    assert supported_prefix(np.array([5, 5, 4, 9]), 5) == 2  # support == min_count counts
    assert supported_prefix(np.array([4, 9]), 5) == 0
    assert supported_prefix(np.array([], dtype=int), 1) == 0


def test_compare_with_zero_encoding_and_constant_distances() -> None:
    d_h = np.array([[0.0, 1.0, 3.0], [1.0, 0.0, 2.0], [3.0, 2.0, 0.0]])
    b_h = gram_from_distances(d_h)
    zero = np.zeros((3, 3))
    m = compare(d_h, b_h, zero, zero)
    assert (m.stress, m.raw, m.kruskal) == (1.0, 1.0, 1.0)
    assert math.isnan(m.spearman)
    flat = 1.0 - np.eye(3)
    m = compare(d_h, b_h, flat, gram_from_distances(flat))
    # c = (1 + 3 + 2) / 3 = 2: residuals -1, 1, 0 over sum 14.
    assert m.kruskal == pytest.approx(math.sqrt(2 / 14), rel=1e-15)
    assert math.isnan(m.spearman)
    line = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]])
    m = compare(d_h, b_h, line, gram_from_distances(line))
    x, y = np.array([1.0, 3.0, 2.0]), np.array([1.0, 2.0, 1.0])
    assert m.spearman == pytest.approx(spearmanr(x, y).statistic, rel=1e-15)
    diff = np.linalg.norm(b_h - gram_from_distances(line)) / np.linalg.norm(b_h)
    assert m.raw == pytest.approx(diff, rel=1e-12)


# --- positional information ---------------------------------------------------------------------


def test_positional_information_by_hand_with_an_empty_row() -> None:
    # Rows (2, 0), (0, 2), (0, 0): pooled (1/2, 1/2); KL of each used row is 1 bit.
    total, per = positional_information(np.array([[2, 0], [0, 2], [0, 0]]))
    assert total == 1.0
    np.testing.assert_array_equal(per, [1.0, 1.0, 0.0])
    # Unequal supports weight the rows: (3, 1) and (0, 4), pooled (3/8, 5/8).
    total, per = positional_information(sp.csr_matrix(np.array([[3, 1], [0, 4]])))
    kl0 = 0.75 * math.log2(0.75 / 0.375) + 0.25 * math.log2(0.25 / 0.625)
    kl1 = math.log2(1 / 0.625)
    np.testing.assert_allclose(per, [kl0, kl1], rtol=1e-14)
    assert total == pytest.approx(0.5 * kl0 + 0.5 * kl1, rel=1e-14)
    with pytest.raises(ValueError, match="the count matrix is empty"):
        positional_information(np.zeros((2, 3)))


# --- shift-equivariance, smoothness, violation rate ----------------------------------------------


def test_shift_equivariance_by_hand() -> None:
    d = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]])
    fit = shift_equivariance(d)
    np.testing.assert_allclose(fit.profile, [2.0, 4.0])
    # values (1, 4, 3), fitted (2, 4, 2): ss_res = 2, ss_tot = 14/3 (mean 8/3).
    assert fit.r2 == pytest.approx(1 - 2 / (14 / 3), rel=1e-14)
    toeplitz = np.abs(np.subtract.outer(np.arange(5.0), np.arange(5.0))) ** 1.5
    assert shift_equivariance(toeplitz).r2 == 1.0
    assert math.isnan(shift_equivariance(np.zeros((4, 4))).r2)
    assert math.isnan(shift_equivariance(2.0 * (1 - np.eye(4))).r2)


def test_smoothness_by_hand_and_nan() -> None:
    d = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]])
    assert smoothness(d) == pytest.approx(2.0 / (8 / 3), rel=1e-15)
    assert math.isnan(smoothness(np.zeros((3, 3))))


def test_violation_rate_against_kendall_and_nan_branches() -> None:
    a = np.array([[0.0, 1.0, 4.0, 2.0], [1.0, 0.0, 3.0, 5.0], [4.0, 3.0, 0.0, 6.0]])
    a = np.vstack([a, [2.0, 5.0, 6.0, 0.0]])
    b = np.abs(np.subtract.outer(np.arange(4.0), np.arange(4.0)))
    iu = np.triu_indices(4, 1)
    tau = kendalltau(a[iu], b[iu]).statistic
    assert violation_rate(a, b) == pytest.approx((1 - tau) / 2, rel=1e-15)
    assert violation_rate(b, b) == 0.0
    assert violation_rate(b, -b) == 1.0
    assert math.isnan(violation_rate(1 - np.eye(4), b))
    assert math.isnan(violation_rate(b, 1 - np.eye(4)))
    assert math.isnan(violation_rate(np.zeros((2, 2)), np.array([[0.0, 1.0], [1.0, 0.0]])))


# --- separation, parameter saving ---------------------------------------------------------------


def test_separation_ratio_is_min_over_median() -> None:
    s = separation(np.array([[0.0], [1.0], [3.0]]))
    # distances 1, 3, 2: min 1, median 2
    assert (s.min_distance, s.median_distance, s.ratio) == (1.0, 2.0, 0.5)
    assert s.collapsed == () and s.tol == 0.01
    s = separation(np.array([[0.0], [1.0], [3.0]]), tol=0.5)
    assert s.collapsed == ((0, 1, 1.0),)  # 1 <= 0.5 * 2, and 2 > 1 is not
    s = separation(np.array([[0.0], [0.0], [5.0], [5.0], [10.0]]), tol=0.0)
    assert s.collapsed == ((0, 1, 0.0), (2, 3, 0.0))  # stable order among equal distances
    assert s.ratio == 0.0
    assert math.isnan(separation(np.zeros((3, 2))).ratio)
    with pytest.raises(PosdiagError) as exc:
        separation(np.zeros((3, 2)), tol=-1.0)
    assert str(exc.value) == "'tol' must be a float in [0, inf]; got -1.0"


def test_separation_collapsed_sorted_closest_first() -> None:
    p = np.array([[0.0], [0.3], [10.0], [10.1], [20.0]])
    s = separation(p, tol=0.1)
    # median of the 10 distances is 10.0 -> threshold 1.0: pairs (2,3) 0.1 and (0,1) 0.3
    assert [(i, j) for i, j, _ in s.collapsed] == [(2, 3), (0, 1)]


def test_parameter_saving_by_hand() -> None:
    assert parameter_saving(2, 10, 5) == 1 - 2 * 15 / 50
    assert parameter_saving(4, 100, 64) == pytest.approx(1 - 4 * 164 / 6400, rel=1e-15)


def test_no_warning_for_euclidean_input() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        classical_mds(np.abs(np.subtract.outer(np.arange(6.0), np.arange(6.0))))


def test_pairwise_distances_of_duplicated_rows_are_finite_and_tiny() -> None:
    # |x|^2 + |x|^2 - 2 x.x rounds below 0 for some x; the clip keeps sqrt from giving NaN.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 7)) * 10 ** rng.uniform(-3, 3, size=(300, 1))
    p = np.repeat(x, 2, axis=0)
    sq = np.einsum("ij,ij->i", p, p)
    raw = sq[:, None] + sq[None, :] - 2.0 * (p @ p.T)
    assert (raw < 0).any()  # the premise: rounding does go negative here
    d = pairwise_distances(p)
    assert np.isfinite(d).all()
    dup = d[np.arange(0, 600, 2), np.arange(1, 600, 2)]
    assert (dup <= 1e-6 * np.linalg.norm(x, axis=1)).all()


def test_pairwise_distances_of_small_integer_tables() -> None:
    # int8 tables (quantised embeddings) must not overflow: 100^2 does not fit in int8.
    p = np.array([[100, -100], [-100, 100], [0, 0]], dtype=np.int8)
    expected = [[0, 400 / math.sqrt(2), 100 * math.sqrt(2)]]
    np.testing.assert_allclose(pairwise_distances(p)[0], expected[0], rtol=1e-12)


def test_violation_rate_when_a_spread_is_exactly_one() -> None:
    lag3 = np.abs(np.subtract.outer(np.arange(3.0), np.arange(3.0)))  # pair distances 1, 2, 1
    # tau-b with the tie (1, 1) is exactly 1 up to rounding: no violations.
    assert violation_rate(lag3, lag3) == pytest.approx(0.0, abs=1e-12)
    assert violation_rate(2 * lag3, lag3) == pytest.approx(0.0, abs=1e-12)
    assert violation_rate(lag3, -lag3) == pytest.approx(1.0, abs=1e-12)


def test_separation_ratio_with_a_median_below_one() -> None:
    s = separation(np.array([[0.0], [0.1], [0.3]]))  # distances 0.1, 0.3, 0.2
    assert s.ratio == pytest.approx(0.5, rel=1e-12) and s.median_distance == pytest.approx(0.2)


def test_separation_orders_many_tied_collapses_row_major() -> None:
    # 30 copies of two points: 2 * 435 pairs at distance 0, listed in (i, j) order.
    p = np.repeat(np.array([[0.0], [100.0]]), 30, axis=0)
    p = np.vstack([p, [[50.0]]])
    s = separation(p, tol=0.0)
    pairs = [(i, j) for i, j, _ in s.collapsed]
    assert len(pairs) == 870 and pairs == sorted(pairs)


def near_constant(level: float, eps: float) -> np.ndarray:
    """4 positions, all distances ``level`` except (0,1) + eps and (0,2) - eps: ss_tot = 2 eps^2."""
    d = level * (1 - np.eye(4))
    d[0, 1] = d[1, 0] = level + eps
    d[0, 2] = d[2, 0] = level - eps
    return d


def test_shift_equivariance_tolerance_is_relative_to_the_squared_distances() -> None:
    # Six values near 1e3: the tolerance is 1e-24 * 6e6 = 6e-18.
    assert math.isnan(shift_equivariance(near_constant(1e3, 5.5e-10)).r2)  # ss_tot ~ 6e-19
    assert not math.isnan(shift_equivariance(near_constant(1e3, 1.7e-8)).r2)  # ~ 6e-16
    # Six values near 0.1: sum of squares 0.06 < 1, so the tolerance is 1e-24 itself.
    assert not math.isnan(shift_equivariance(near_constant(0.1, 8.5e-13)).r2)  # 1.4e-24
    assert math.isnan(shift_equivariance(near_constant(0.1, 5e-13)).r2)  # 5e-25


def test_fast_hellinger_accepts_rows_with_a_single_count() -> None:
    c = mixed_counts(6)
    c[9] = 0
    c[9, 3] = 1
    np.testing.assert_allclose(hellinger_distances(c), dense_hellinger(c.astype(float)), atol=1e-12)


def test_zero_row_messages_are_exact() -> None:
    big = mixed_counts(4)
    big[7] = 0
    for f in (hellinger_distances,):
        with pytest.raises(ValueError) as exc:
            f(big)
        assert str(exc.value) == "every row of the count matrix needs a positive sum"
    with pytest.raises(ValueError) as exc:
        stress(np.zeros((2, 2)), np.eye(2))
    assert str(exc.value) == "the corpus Gram matrix is zero: all positions are identical"
    with pytest.raises(ValueError) as exc:
        positional_information(np.zeros((2, 3)))
    assert str(exc.value) == "the count matrix is empty"


@pytest.mark.parametrize("f", [hellinger_distances])
def test_hellinger_of_duplicated_rows_is_finite_and_tiny(f: Callable[..., np.ndarray]) -> None:
    # BC of two identical rows can round above 1; the clip keeps sqrt(1 - BC) from being NaN.
    base = mixed_counts(7, n=100)
    c = np.vstack([base, base])
    d = f(sp.csr_matrix(c))
    assert np.isfinite(d).all()
    assert (d[np.arange(100), np.arange(100, 200)] < 1e-7).all()


def test_separation_orders_mixed_ties_by_distance_then_row_major() -> None:
    # 30 points at 0, 30 at 0.5, one at 100: median 0.5, so with tol = 1 the 870 zero pairs and
    # the 900 pairs at 0.5 collapse; an unstable sort would shuffle pairs of equal distance.
    p = np.vstack([np.zeros((30, 1)), np.full((30, 1), 0.5), [[100.0]]])
    s = separation(p, tol=1.0)
    keys = [(dist, i, j) for i, j, dist in s.collapsed]
    assert len(keys) == 1770 and keys == sorted(keys)


def test_kruskal_fits_the_scale_of_small_encodings() -> None:
    # Kruskal stress fits c, so scaling delta by 0.1 (sum of squares < 1) changes nothing.
    d_h = np.array([[0.0, 1.0, 3.0], [1.0, 0.0, 2.0], [3.0, 2.0, 0.0]])
    b_h = gram_from_distances(d_h)
    line = np.abs(np.subtract.outer(np.arange(3.0), np.arange(3.0)))
    small = compare(d_h, b_h, 0.1 * line, gram_from_distances(0.1 * line)).kruskal
    # c = (1 + 6 + 2) / (1 + 4 + 1) = 1.5 for the line: residuals -0.5, 0, 0.5 over sum 14.
    assert small == pytest.approx(math.sqrt(0.5 / 14), rel=1e-12)


def test_effective_rank_at_a_stress_equal_to_eps() -> None:
    # Eigenvalues 2, 2, 0, 0: rank 1 has stress sqrt(4 / 8) = sqrt(0.5) exactly.
    assert effective_rank(np.array([2.0, 2.0, 0.0, 0.0]), math.sqrt(0.5)) == 1


def test_positional_information_of_a_single_token() -> None:
    total, per = positional_information(np.array([[1, 0], [0, 0]]))
    assert total == 0.0
    np.testing.assert_array_equal(per, [0.0, 0.0])


def test_significant_negative_at_the_exact_bound_and_a_small_top_eigenvalue() -> None:
    # -1e-10 * 1.0 is exactly -1e-10: an eigenvalue on the bound is not below it.
    assert -1e-10 * 1.0 == -1e-10
    assert significant_negative(np.array([1.0, -1e-10])) is None
    assert significant_negative(np.array([1.0, -1.5e-10])) == -1.5e-10
    # All zero: 0 is not below -1e-10 * max(0, 0) = -0.0.
    assert significant_negative(np.zeros(3)) is None
    # l_1 = 0.5 < 1: the bound scales with l_1 itself (-5e-11), not with 1.
    assert significant_negative(np.array([0.5, -6e-11])) == -6e-11
    assert significant_negative(np.array([0.5, -4e-11])) is None


def test_positional_information_is_never_negative_for_independent_rows() -> None:
    # Proportional rows: every mu_i equals the pooled distribution, so I = 0 and each KL = 0.
    # In floating point the per-row sums come out as +-1e-16 before the clip at 0.
    c = np.array(
        [
            [2.48457170727911, 1.7744291839030122],
            [5.940913632887841, 4.2428763470014115],
            [2.284612783536747, 1.6316226998595929],
        ]
    )
    mu = c / c.sum(axis=1, keepdims=True)
    pooled = c.sum(axis=0) / c.sum()
    raw = (mu * np.log2(mu / pooled)).sum(axis=1)
    assert raw.min() < 0  # the case the clip exists for
    bits, kl = positional_information(c)
    assert kl.min() >= 0.0 and bits >= 0.0
    np.testing.assert_allclose(kl, 0.0, atol=1e-15)
    assert bits == pytest.approx(0.0, abs=1e-15)


def test_classical_mds_warning_points_at_the_caller() -> None:
    # Not Euclidean: a triangle that violates the triangle inequality.
    d = np.array([[0.0, 1.0, 3.0], [1.0, 0.0, 1.0], [3.0, 1.0, 0.0]])
    with pytest.warns(PosdiagWarning, match="not exactly Euclidean") as rec:
        classical_mds(d)
    # stacklevel=2 names the caller's frame. Under mutmut the public name is a trampoline
    # (it has __wrapped__), which is then the caller of the function body.
    caller = (
        classical_mds.__code__.co_filename if hasattr(classical_mds, "__wrapped__") else __file__
    )
    assert [r.filename for r in rec] == [caller]


def test_stress_floor_of_zero_and_of_unit_total() -> None:
    # Hand values: sqrt(sum of negative squares / sum of all squares).
    assert stress_floor(np.zeros(3)) == 0.0  # no geometry at all: no floor
    assert stress_floor(np.array([0.0, -1.0])) == 1.0  # total exactly 1, all of it negative
    assert stress_floor(np.array([1.0, -1.0])) == pytest.approx(math.sqrt(0.5), rel=1e-15)
    assert stress_floor(np.array([2.0, 1.0])) == 0.0


def test_gram_from_integer_distances() -> None:
    # Hand value: delta o delta = [[0, 1], [1, 0]], J M J = M - 1/2, times -1/2.
    b = gram_from_distances(np.array([[0, 1], [1, 0]]))
    np.testing.assert_array_equal(b, [[0.25, -0.25], [-0.25, 0.25]])


def test_stress_by_rank_of_a_partial_spectrum() -> None:
    # total = ||B||_F^2 covers eigenvalues not listed; tail = (total - kept positives) / total.
    np.testing.assert_allclose(
        stress_by_rank(np.array([3.0, 1.0]), total=11.0),
        [math.sqrt(2 / 11), math.sqrt(1 / 11)],
        rtol=1e-15,
    )
    # total below 1 (B_H is small): the negative eigenvalue is never kept.
    np.testing.assert_allclose(
        stress_by_rank(np.array([0.6, -0.2]), total=0.5), [math.sqrt(0.28)] * 2, rtol=1e-14
    )
    np.testing.assert_array_equal(stress_by_rank(np.zeros(2), total=0.0), [0.0, 0.0])
    # A total a rounding below the kept squares (the Frobenius norm and the Lanczos eigenvalues
    # round differently): the tail is 0, not the square root of a negative number.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = stress_by_rank(np.array([3.0, 1.0]), total=9.5)
    np.testing.assert_array_equal(got, [math.sqrt(0.5 / 9.5), 0.0])


@pytest.mark.parametrize("block", [1, 2, 3, 1024])
def test_symmetrize_averages_every_block_pair(block: int) -> None:
    m = np.arange(25.0).reshape(5, 5) ** 1.5
    expected = (m + m.T) / 2.0  # computed before: symmetrize works in place
    out = symmetrize(m, block=block)
    assert out is m
    np.testing.assert_array_equal(out, expected)


def _non_euclidean_gram() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 40 x 40 double-centred Gram of random dissimilarities (not Euclidean: negative
    eigenvalues too) and numpy's eigenpairs of it, largest first."""
    rng = np.random.default_rng(3)
    d = rng.uniform(0.5, 1.0, (40, 40))
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0)
    j = np.eye(40) - 1 / 40
    b = -0.5 * j @ (d * d) @ j
    lam, u = np.linalg.eigh(b)
    return b, lam[::-1], u[:, ::-1]


def test_mds_of_gram_full_and_partial_against_numpy_eigh() -> None:
    from posdiag.geometry.core import mds_of_gram

    b, lam, u = _non_euclidean_gram()
    # Up to full_max positions (default below 512, and at n = full_max): every eigenpair.
    for full in (mds_of_gram(b), mds_of_gram(b, full_max=40)):
        np.testing.assert_allclose(full.eigenvalues, lam, atol=1e-12)
        assert full.total is None and full.bottom is None and full.gram is b
    # Beyond: the top eigenpairs until stress 0.5 is resolved, with the exact total and bottom.
    part = mds_of_gram(b, tolerances=(0.5,), full_max=39, start_rank=5)
    k = part.eigenvalues.size
    tail = np.sqrt(1 - np.cumsum(np.where(lam > 0, lam**2, 0)) / np.sum(lam**2))
    needed = int(np.argmax(tail <= 0.5)) + 1
    assert tail[needed - 1] <= 0.5 and needed <= k < 40
    np.testing.assert_allclose(part.eigenvalues, lam[:k], atol=1e-8)
    assert part.total == pytest.approx(float(np.sum(b * b)), rel=1e-12)
    assert part.bottom == pytest.approx(lam[-1], abs=1e-8)
    assert part.gram is b
    # The partial MDS's stress tail uses the exact total, not the sum over its k eigenvalues.
    np.testing.assert_allclose(part.stress_by_rank(), tail[:k], atol=1e-8)
    v = part.vectors
    np.testing.assert_allclose(np.abs(v), np.abs(u[:, :k]), atol=1e-6)
    top = np.argmax(np.abs(v), axis=0)
    assert np.all(v[top, np.arange(k)] > 0)  # signs fixed: largest entry positive


def test_reached_rank_bounds_and_the_exact_tolerance() -> None:
    for eps in (-0.1, 1.5):
        with pytest.raises(PosdiagError) as err:
            reached_rank(np.array([2.0, 1.0]), eps)
        assert str(err.value) == f"'eps' must be a float in [0, 1]; got {eps!r}"
    # Hand value: rank 1 of eigenvalues (4, 3) leaves sqrt(9 / 25) = 0.6 (exact in binary here).
    lam = np.array([4.0, 3.0, 0.0])
    assert stress_by_rank(lam)[0] == 0.6
    assert reached_rank(lam, 0.6) == 1  # stress <= eps counts as reached
    assert reached_rank(lam, 0.59) == 2


def test_compare_edge_cases_give_values_without_numpy_warnings() -> None:
    b_h = np.array([[1.0, -1.0], [-1.0, 1.0]]) / 2
    line = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 0/0 or a constant-input Spearman would warn
        # All corpus distances 0 (a cross-fit clipped on a thin corpus): Kruskal undefined.
        m = compare(np.zeros((2, 2)), b_h, np.array([[0.0, 1.0], [1.0, 0.0]]), b_h)
        assert math.isnan(m.kruskal) and math.isnan(m.spearman)
        # Constant corpus distances, varying encoding: Spearman undefined, Kruskal a number.
        flat = np.where(np.eye(3) == 1, 0.0, 0.3)
        m = compare(flat, gram_from_distances(flat), line, gram_from_distances(line))
        assert math.isnan(m.spearman)
        # Hand value: dh = (.3, .3, .3), de = (1, 2, 1), c = 1.2 / 6 = 0.2,
        # residuals (.1, -.1, .1), total = 0.27 (< 1).
        assert m.kruskal == pytest.approx(math.sqrt(0.03 / 0.27), rel=1e-12)
    # Corpus distances spanning exactly 1 (0 and 1): Spearman is computed.
    d = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    m = compare(d, gram_from_distances(d), line, gram_from_distances(line))
    dh, de = np.array([0.0, 1.0, 1.0]), np.array([1.0, 2.0, 1.0])
    assert m.spearman == pytest.approx(spearmanr(dh, de).statistic, rel=1e-12)


def test_stress_by_rank_stays_at_most_one_when_the_tail_rounds_above_the_total() -> None:
    # No eigenvalue worth a square (1e-200 squares to 0): every rank's stress is 1. The tail
    # (negatives summed apart) and the total (all squares) are summed in different orders, and
    # for these values the tail comes out one ulp above the total.
    lam = np.array([1e-200, -0.005, -0.123, -2.179, -2.451, -3.889, -4.165, -4.192, -8.881])
    got = stress_by_rank(lam)
    assert got.max() <= 1.0
    np.testing.assert_allclose(got, np.ones(8), rtol=1e-15)


def test_fix_signs_makes_each_largest_entry_positive_and_keeps_a_zero_column() -> None:
    # Column 0 is zero (sign 0 -> kept as is), column 1's largest |entry| is -3 (flipped),
    # column 2's is +2 (kept); ties go to the first row (argmax).
    u = np.array([[0.0, 1.0, 2.0], [0.0, -3.0, -2.0], [0.0, 2.0, 0.5]])
    got = _fix_signs(u)
    np.testing.assert_array_equal(got, [[0.0, -1.0, 2.0], [0.0, 3.0, -2.0], [0.0, -2.0, 0.5]])


def test_mds_of_gram_eigenvalue_band_bottom_and_signal_growth() -> None:
    from posdiag.geometry.core import mds_of_gram

    b, lam, u = _non_euclidean_gram()
    # full_max < n <= eigvalsh_max (here n = eigvalsh_max): every eigenvalue, the top vectors.
    for band in (mds_of_gram(b, full_max=30, eigvalsh_max=40, start_rank=5),):
        np.testing.assert_allclose(band.eigenvalues, lam, atol=1e-12)
        assert band.total is None and band.bottom is None and band.gram is b
        assert band.vectors.shape == (40, 5)
        np.testing.assert_allclose(np.abs(band.vectors), np.abs(u[:, :5]), atol=1e-6)
        top = np.argmax(np.abs(band.vectors), axis=0)
        assert np.all(band.vectors[top, np.arange(5)] > 0)
        # Ranks beyond the kept vectors compute theirs from the Gram (Lanczos).
        for r in (3, 8):
            x = band.coordinates(r)
            keep = np.clip(lam[:r], 0.0, None)
            assert x.shape == (40, r)
            np.testing.assert_allclose(x @ x.T, (u[:, :r] * keep) @ u[:, :r].T, atol=1e-8)
            top = np.argmax(np.abs(x), axis=0)
            assert np.all(x[top, np.arange(r)] > 0)
    # Given full_max alone, there is no eigenvalues-only band: n > full_max is partial.
    assert mds_of_gram(b, full_max=39).total is not None
    # At n = full_max every eigenpair, vectors included.
    assert mds_of_gram(b, full_max=40).vectors.shape == (40, 40)
    # A band shorter than START_RANK keeps n - 1 vectors.
    small = b[:5, :5] - b[:5, :5].mean(axis=0) - b[:5, :5].mean(axis=1)[:, None]
    assert mds_of_gram(small, full_max=3, eigvalsh_max=5).vectors.shape == (5, 4)
    # Beyond the band without the bottom: NaN, and the tolerances alone size the spectrum.
    tail = np.sqrt(1 - np.cumsum(np.where(lam > 0, lam**2, 0)) / np.sum(lam**2))
    needed = int(np.argmax(tail <= 0.5)) + 1
    assert tail[needed - 1] <= 0.5 and needed > 5  # more than the 5 pairs of a first block
    part = mds_of_gram(b, tolerances=(0.5,), full_max=20, eigvalsh_max=30, bottom=False)
    assert math.isnan(part.bottom) and needed <= part.eigenvalues.size < 40
    np.testing.assert_allclose(part.eigenvalues, lam[: part.eigenvalues.size], atol=1e-8)
    # With the bottom: the top pairs grow past its magnitude (every signal eigenvalue).
    grown = mds_of_gram(b, full_max=20, eigvalsh_max=30)
    low = lam[-1]
    assert grown.bottom == pytest.approx(low, abs=1e-8)
    k = grown.eigenvalues.size
    assert grown.eigenvalues[-1] < abs(low) and np.sum(lam > abs(low)) < k < 40
    # A positive definite B (bottom 0.5 > 0): nothing to grow past, the same pairs as without.
    q, _ = np.linalg.qr(np.random.default_rng(4).standard_normal((40, 40)))
    pd = (q * np.concatenate(([10, 8, 6, 4, 2], np.linspace(1, 0.5, 35)))) @ q.T
    with_bottom = mds_of_gram(pd, full_max=20, eigvalsh_max=30)
    assert with_bottom.bottom == pytest.approx(0.5, abs=1e-8)
    without = mds_of_gram(pd, full_max=20, eigvalsh_max=30, bottom=False)
    assert with_bottom.eigenvalues.size == without.eigenvalues.size < 35


def test_float32_input_gives_the_float64_figures() -> None:
    """Every measure converts its input to float64 first: float32 values give exactly the
    figures of the same values held in float64 (a float32 computation would differ ~1e-7)."""
    rng = np.random.default_rng(3)
    p32 = (rng.standard_normal((7, 3)) * 10 + 0.1).astype(np.float32)
    d32 = pairwise_distances(p32.astype(np.float64)).astype(np.float32)
    lam32 = np.array([5.3, 2.1, 0.7, -0.3, -1.1], dtype=np.float32)
    c32 = rng.integers(1, 9, (6, 5)).astype(np.float32)
    b32 = gram_from_distances(d32.astype(np.float64)).astype(np.float32)
    from posdiag.geometry.core import mds_from_gram

    pairs = {
        "gram_from_vectors": lambda x: gram_from_vectors(x(p32)),
        "double_center": lambda x: double_center(x(d32)),
        "shift r2": lambda x: shift_equivariance(x(d32)).r2,
        "shift profile": lambda x: shift_equivariance(x(d32)).profile,
        "smoothness": lambda x: smoothness(x(d32)),
        "stress_by_rank": lambda x: stress_by_rank(x(lam32)),
        "stress_by_rank total": lambda x: stress_by_rank(x(lam32), total=40.3),
        "mds eigenvalues": lambda x: mds_from_gram(x(b32)).eigenvalues,
        "mds gram": lambda x: mds_from_gram(x(b32)).gram,
        "stress_floor": lambda x: stress_floor(x(lam32)),
        "information": lambda x: positional_information(x(c32))[0],
        "information kl": lambda x: positional_information(x(c32))[1],
    }
    for name, f in pairs.items():
        got = np.asarray(f(lambda a: a))
        want = np.asarray(f(lambda a: a.astype(np.float64)))
        assert got.dtype == np.float64, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_mds_coordinates_drop_negative_eigenvalues_among_the_top() -> None:
    """``X_r = U_r diag(sqrt(max(l_k, 0)))``: a negative eigenvalue among the top ``rank`` gives
    a zero column, not NaN."""
    from posdiag.geometry.core import mds_coordinates

    u = np.eye(3)[:, :2]
    got = mds_coordinates(np.array([4.0, -1.0, -2.0]), u, 2)
    np.testing.assert_array_equal(got, [[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]])


def test_mds_of_gram_grows_past_the_bottom_from_a_small_start() -> None:
    """With the bottom computed, the top pairs grow until the smallest computed eigenvalue is
    below ``|l_min|`` even from 3 pairs, so every signal eigenvalue (12 here) is among them."""
    from posdiag.geometry.core import mds_of_gram

    b, lam, _ = _non_euclidean_gram()
    signal = int(np.sum(lam > abs(lam[-1])))
    got = mds_of_gram(b, full_max=20, eigvalsh_max=30, start_rank=3)
    k = got.eigenvalues.size
    assert signal == 12 and signal < k < 40
    assert got.eigenvalues[-1] < abs(lam[-1])
    np.testing.assert_allclose(got.eigenvalues, lam[:k], atol=1e-8)
    # Without the bottom and without tolerances, the first set is the answer: start_rank pairs.
    first = mds_of_gram(b, full_max=20, eigvalsh_max=30, bottom=False, start_rank=5)
    assert first.eigenvalues.size == 5 and math.isnan(first.bottom)
    np.testing.assert_allclose(first.eigenvalues, lam[:5], atol=1e-8)


def test_mds_of_gram_default_band_computes_every_eigenvalue_from_partial_from() -> None:
    """Without ``full_max``, ``PARTIAL_FROM <= n <= EIGVALSH_MAX`` is the eigenvalues-only band:
    every eigenvalue (no total, no bottom), the top ``START_RANK`` vectors."""
    from posdiag.geometry.core import mds_of_gram
    from posdiag.geometry.spectral import PARTIAL_FROM, START_RANK

    n = PARTIAL_FROM
    x = np.random.default_rng(0).standard_normal((n, 3)) * [3.0, 2.0, 1.0]
    b = gram_from_vectors(x)
    got = mds_of_gram(b)
    assert got.total is None and got.bottom is None
    assert got.eigenvalues.shape == (n,) and got.vectors.shape == (n, START_RANK)
    top = np.linalg.svd(x - x.mean(axis=0), compute_uv=False) ** 2
    np.testing.assert_allclose(got.eigenvalues[:3], top, rtol=1e-10)
    assert np.abs(got.eigenvalues[3:]).max() < 1e-9 * top[0]


def test_coordinates_up_to_the_kept_rank_use_the_kept_vectors() -> None:
    """A partial MDS keeps the partial solver's top vectors (residual 1e-7); a rank up to their
    number is made of them as they are, not of a new Lanczos solve (converged further)."""
    from posdiag.geometry.core import mds_of_gram

    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.standard_normal((300, 300)))
    lam = np.concatenate([10 * 0.7 ** np.arange(20), rng.uniform(-0.05, 0.05, 280)])
    b = (q * lam) @ q.T
    part = mds_of_gram(b, full_max=20, eigvalsh_max=30, bottom=False, start_rank=5)
    assert part.vectors.shape == (300, 5)
    want = part.vectors * np.sqrt(part.eigenvalues)[None, :]
    np.testing.assert_array_equal(part.coordinates(5), want)
    np.testing.assert_allclose(part.eigenvalues, lam[:5], atol=1e-7 * np.linalg.norm(lam))
