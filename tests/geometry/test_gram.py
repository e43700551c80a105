"""Blocked hybrid Gram products (posdiag.geometry._gram) against the plain dense computation."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from posdiag.errors import PosdiagError
from posdiag.geometry import _gram as fastgram
from posdiag.geometry import _square
from posdiag.geometry._gram import cross_product, plan_product, sqrt_rows
from tests._data import zipf_counts


def dense_mask(ra: sp.csr_matrix, rb: sp.csr_matrix) -> np.ndarray:
    """Columns both factors hold in more than 10% of their rows (product of the counts)."""
    na = np.bincount(ra.indices, minlength=ra.shape[1])
    nb = np.bincount(rb.indices, minlength=rb.shape[1])
    return np.asarray(na * nb > (0.1 * ra.shape[0]) * (0.1 * rb.shape[0]))[None, :]


def dense_sqrt(c: sp.csr_matrix) -> np.ndarray:
    m = c.toarray()
    return np.sqrt(m / m.sum(axis=1, keepdims=True))


def centred_gram_of_bc(bc: np.ndarray) -> np.ndarray:
    """``B = 1/2 J BC J`` (the Gram of ``D^2 = 1 - BC``)."""
    b = bc - bc.mean(axis=0) - bc.mean(axis=1)[:, None] + bc.mean()
    return 0.5 * (b + b.T) / 2.0


def stress(b_h: np.ndarray, b_e: np.ndarray) -> float:
    cos = float(np.vdot(b_h, b_e)) / (np.linalg.norm(b_h) * np.linalg.norm(b_e))
    return float(np.sqrt(max(0.0, 1.0 - max(cos, 0.0) ** 2)))


@pytest.fixture(scope="module")
def medium() -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Two halves of one corpus (binomial thinning): 300 positions, V = 4,000, ~800 tokens each."""
    c = zipf_counts(300, 4000, 1600, seed=1)
    a = c.copy()
    a.data = np.random.default_rng(2).binomial(c.data.astype(np.int64), 0.5).astype(np.float64)
    return a, c - a


def test_sqrt_rows_matches_dense_and_keeps_empty_rows_zero() -> None:
    c = zipf_counts(20, 50, 30, seed=0)
    np.testing.assert_allclose(sqrt_rows(c).toarray(), dense_sqrt(c), rtol=1e-15, atol=0)
    bad = c.toarray()
    bad[3] = 0
    got = sqrt_rows(bad).toarray()
    assert not got[3].any()
    np.testing.assert_allclose(np.delete(got, 3, 0), np.delete(dense_sqrt(c), 3, 0), rtol=1e-15)


def test_hybrid_path_taken_and_agrees_float64(medium: tuple[sp.csr_matrix, ...]) -> None:
    ca, cb = medium
    ra, rb = sqrt_rows(ca), sqrt_rows(cb)
    plan, dense = plan_product(ra, rb, dtype=np.float64)
    assert plan.hybrid and plan.dense_columns > 50 and plan.sparse_columns > 500
    want = dense_sqrt(ca) @ dense_sqrt(cb).T
    got = cross_product(ra, rb, dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    # The dense block holds exactly the columns both halves use in > 10% of rows (product test).
    na = np.bincount(ra.indices, minlength=ra.shape[1])
    nb = np.bincount(rb.indices, minlength=rb.shape[1])
    np.testing.assert_array_equal(dense, na * nb > (0.1 * 300) ** 2)


def test_float32_block_error_per_entry_and_on_stress(medium: tuple[sp.csr_matrix, ...]) -> None:
    ca, cb = medium
    ra, rb = sqrt_rows(ca), sqrt_rows(cb)
    exact = dense_sqrt(ca) @ dense_sqrt(cb).T
    fast = cross_product(ra, rb)  # float32 dense block, the default
    assert plan_product(ra, rb)[0].dtype == "float32"
    # Each entry is a sum of non-negative terms <= 1: float32 errs by a few 1e-7 at most.
    assert np.abs(fast - exact).max() < 1e-6
    assert np.abs(fast - exact).max() > 0  # float32 really was used
    b_exact = centred_gram_of_bc((exact + exact.T) / 2)
    b_fast = centred_gram_of_bc((fast + fast.T) / 2)
    n = exact.shape[0]
    lag = np.abs(np.subtract.outer(np.arange(n), np.arange(n))).astype(float)
    rng = np.random.default_rng(3)
    p = rng.normal(size=(n, 16))
    tables = {
        # B_E = -1/2 J delta^2 J, i.e. centred_gram_of_bc(-delta^2).
        "alibi": centred_gram_of_bc(-(lag**2)),
        "kernel": centred_gram_of_bc(-lag),
        "random": (p - p.mean(0)) @ (p - p.mean(0)).T,
    }
    for name, b_e in tables.items():
        assert 0.01 < stress(b_exact, b_e) < 0.999, name  # a real comparison, not a clamp
        assert abs(stress(b_fast, b_e) - stress(b_exact, b_e)) < 1e-6, name
    lam_exact = np.linalg.eigvalsh(b_exact)
    lam_fast = np.linalg.eigvalsh(b_fast)
    assert np.abs(lam_fast - lam_exact).max() < 1e-6 * max(1.0, abs(lam_exact).max())


@pytest.mark.parametrize("block_rows", [1, 7, 64, 299, 300, 10_000])
def test_same_result_for_any_block_size(medium: tuple[sp.csr_matrix, ...], block_rows: int) -> None:
    ca, cb = medium
    ra, rb = sqrt_rows(ca), sqrt_rows(cb)
    ref = cross_product(ra, rb, dtype=np.float64, block_rows=300)
    got = cross_product(ra, rb, dtype=np.float64, block_rows=block_rows)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14)
    plan = plan_product(ra, rb, block_rows=block_rows)[0]
    assert plan.block_rows == min(block_rows, 300)
    # The stated bound covers the two dense blocks, two block temporaries and the rare parts.
    keep = ~dense_mask(ra, rb)
    rare = int(ra.multiply(keep).count_nonzero() + rb.multiply(keep).count_nonzero())
    assert plan.bytes_bound == (
        600 * plan.dense_columns * 4
        + 2 * plan.block_rows * 300 * 8
        + rare * 12
        + (300 + ra.shape[1] + 2) * 8
    )


def test_compiled_kernel_and_scipy_product_agree(medium: tuple[sp.csr_matrix, ...]) -> None:
    ca, cb = medium
    ra, rb = sqrt_rows(ca), sqrt_rows(cb)
    assert plan_product(ra, rb)[0].hybrid  # 300 rows: the compiled rare-token kernel runs
    with_kernel = cross_product(ra, rb, dtype=np.float64)
    np.testing.assert_allclose(with_kernel, (ra @ rb.T).toarray(), rtol=0, atol=1e-14)


def test_small_inputs_use_one_sparse_product() -> None:
    c = zipf_counts(40, 300, 100, seed=5)
    r = sqrt_rows(c)
    assert not plan_product(r, r)[0].hybrid
    np.testing.assert_allclose(cross_product(r, r), dense_sqrt(c) @ dense_sqrt(c).T, atol=1e-14)


def test_vocabulary_mismatch_is_refused() -> None:
    with pytest.raises(PosdiagError, match="vocabularies differ"):
        cross_product(sp.csr_matrix(np.ones((2, 3))), sp.csr_matrix(np.ones((2, 4))))


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 200),
    st.integers(1, 200),
    st.integers(1, 60),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
    st.integers(1, 50),
)
def test_property_any_shape_density_and_block(
    na: int, nb: int, v: int, fraction: float, seed: int, block: int
) -> None:
    rng = np.random.default_rng(seed)
    a = sp.random(na, v, density=0.5, random_state=rng, format="csr")
    b = sp.random(nb, v, density=0.5, random_state=rng, format="csr")
    got = cross_product(a, b, dtype=np.float64, block_rows=block, dense_fraction=fraction)
    np.testing.assert_allclose(got, a.toarray() @ b.toarray().T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_split_equals_column_slicing(
    medium: tuple[sp.csr_matrix, ...], dtype: type[np.floating]
) -> None:
    ca, _ = medium
    r = sqrt_rows(ca)
    _, dense = plan_product(r, r)
    assert 0 < dense.sum() < dense.size
    position = np.where(dense, np.cumsum(dense) - 1, -1).astype(np.int64)
    block, rare = fastgram._split(r, position, int(dense.sum()), dtype)
    # The straightforward computation: column slicing and a masked copy.
    np.testing.assert_array_equal(block, r[:, np.flatnonzero(dense)].toarray().astype(dtype))
    assert block.dtype == dtype
    want = r.multiply(~dense[None, :]).tocsr()
    want.eliminate_zeros()
    want.sort_indices()
    for got in (rare, fastgram._split(r, position, int(dense.sum()), dtype, rows=False)[1].T):
        got = sp.csr_matrix(got)
        assert got.has_sorted_indices or got.T.tocsr().has_sorted_indices
        np.testing.assert_array_equal(got.toarray(), want.toarray())
    # The transposed rare part is exactly scipy's transpose: same order of rows per token.
    bt = fastgram._split(r, position, int(dense.sum()), dtype, rows=False)[1]
    ref = sp.csr_matrix(want.T)
    np.testing.assert_array_equal(bt.indptr, ref.indptr)
    np.testing.assert_array_equal(bt.indices, ref.indices)
    np.testing.assert_array_equal(bt.data, ref.data)
    np.testing.assert_array_equal(fastgram._transpose(want, *want.shape).indices, ref.indices)


def test_unsorted_or_duplicated_rows_give_the_canonical_product(
    medium: tuple[sp.csr_matrix, ...],
) -> None:
    ca, cb = medium
    ra, rb = sqrt_rows(ca), sqrt_rows(cb)
    want = cross_product(ra, rb, dtype=np.float64)
    # The same matrix with every row's entries reversed and one entry split in two halves.
    coo = ra.tocoo()
    order = np.lexsort((-coo.col, coo.row))
    rows, cols, vals = coo.row[order], coo.col[order], coo.data[order]
    rows = np.insert(rows, 1, rows[0])
    cols = np.insert(cols, 1, cols[0])
    vals = np.insert(vals, 1, vals[0] / 2)
    vals[0] /= 2
    messy = sp.csr_matrix((vals, cols, np.searchsorted(rows, np.arange(301))), shape=ra.shape)
    assert not messy.has_sorted_indices
    np.testing.assert_allclose(cross_product(messy, rb, dtype=np.float64), want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 127, 128, 129, 200, 333])
def test_compiled_symmetrize_and_centring_equal_numpy_bit_for_bit(n: int) -> None:
    # Both paths: numpy below COMPILED_FROM (128; the bundled corpus never imports numba).
    m = np.random.default_rng(n).normal(size=(n, n))
    got = _square.symmetrize(m.copy())
    np.testing.assert_array_equal(got, (m + m.T) / 2.0)
    # gram_from_bc's operations, in numpy, in the same order.
    col, row, grand = m.mean(axis=0), m.mean(axis=1), m.mean()
    b = ((m - col[None, :]) - row[:, None] + grand) * 0.5
    half = _square.centred_half(m, col, row, float(grand))
    np.testing.assert_array_equal(half, (b + b.T) / 2.0)
    assert np.allclose(half.sum(axis=0), 0.0, atol=1e-12 * n)  # really centred


def test_square_passes_refuse_other_shapes() -> None:
    with pytest.raises(PosdiagError, match="square float64"):
        _square.symmetrize(np.zeros((3, 4)))
    with pytest.raises(PosdiagError, match="C-contiguous"):
        _square.symmetrize(np.zeros((4, 4)).T[:, :])
    with pytest.raises(PosdiagError, match="C-contiguous"):
        _square.symmetrize(np.zeros((6, 6))[::2, ::2])


def _odd_even_halves(n: int, seed: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Expected square-root halves of counts whose rows alternate odd and even ``N_i``."""
    from posdiag.geometry._thinning import expected_halves

    c = zipf_counts(n, 3000, 600, seed=seed).astype(np.int64).tolil()
    for i in range(0, n, 2):  # one more token: about half the rows get an odd total
        c[i, 0] += 1
    ma, mb, _ = expected_halves(sp.csr_matrix(c))
    return ma, mb


@pytest.mark.parametrize("ranges", [1, 2, 3, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gram_split_lists_each_tokens_rows_and_where_each_entry_sits(
    medium: tuple[sp.csr_matrix, ...], ranges: int, dtype: type[np.floating]
) -> None:
    r = sqrt_rows(medium[0])
    r.sum_duplicates()  # canonical rows, as _upper_gram passes them
    m, v = r.shape
    bounds = fastgram._row_ranges(m, ranges)
    counts = np.array([np.bincount(r[lo:hi].indices, minlength=v) for lo, hi in pairwise(bounds)])
    dense = counts.sum(axis=0) > 0.1 * m
    assert 0 < dense.sum() < np.count_nonzero(counts.sum(axis=0))
    block, (r_ptr, slot, stop, t_gap, t_val) = fastgram._split_gram(r, counts, dense, dtype)
    # The straightforward computation: column slicing, a masked copy and scipy's transpose.
    np.testing.assert_array_equal(block, r[:, np.flatnonzero(dense)].toarray().astype(dtype))
    assert block.dtype == dtype
    want = r.multiply(~dense[None, :]).tocsr()
    want.eliminate_zeros()
    want.sort_indices()
    ref = sp.csr_matrix(want.T)  # row j: the rows holding token j, ascending
    value = np.float32 if dtype == np.float32 else np.float64  # float32 lists for float32 Grams
    assert t_val.dtype == value
    # Each list's rows as gaps (its first entry: its row): their running sums are the rows.
    assert t_gap.dtype == np.uint16
    t_idx = np.concatenate([np.cumsum(t_gap[a:b], dtype=np.int64) for a, b in pairwise(ref.indptr)])
    np.testing.assert_array_equal(t_idx, ref.indices)
    np.testing.assert_array_equal(t_val, ref.data.astype(value))
    # Row i's rare entries, in column order: entry p (token j) sits in j's list at slot[p],
    # which holds row i, and the list ends at stop[p].
    np.testing.assert_array_equal(r_ptr, want.indptr)
    np.testing.assert_array_equal(t_idx[slot], np.repeat(np.arange(m), np.diff(want.indptr)))
    assert np.all((ref.indptr[want.indices] <= slot) & (slot < stop))
    np.testing.assert_array_equal(stop, ref.indptr[want.indices + 1])
    np.testing.assert_array_equal(t_val[slot], want.data.astype(value))


@pytest.mark.parametrize("ranges", [1, 2, 7])
def test_range_counts_equal_bincount_per_range(
    medium: tuple[sp.csr_matrix, ...], ranges: int
) -> None:
    r = sqrt_rows(medium[0])
    m, v = r.shape
    got = fastgram._range_counts(r, v, ranges)
    bounds = fastgram._row_ranges(m, ranges)
    assert got.shape == (ranges, v) and bounds[-1] == m
    want = [np.bincount(r[lo:hi].indices, minlength=v) for lo, hi in pairwise(bounds)]
    np.testing.assert_array_equal(got, np.array(want))


def test_gram_lists_with_int32_gaps_give_the_same_gram() -> None:
    # Beyond 2^16 rows a gap may not fit in 16 bits: int32 gaps, the same numbers.
    ma, _ = _odd_even_halves(300, seed=11)
    ma.sum_duplicates()
    counts = np.bincount(ma.indices, minlength=ma.shape[1])[None, :]
    dense = counts[0] > 30
    grams = []
    for gap in (None, np.int32):
        xd, parts = fastgram._split_gram(ma, counts, dense, np.float64, gap=gap)
        assert parts[3].dtype == (np.uint16 if gap is None else np.int32)
        out = xd @ xd.T
        fastgram._run_upper(*parts, 0, ma.shape[0], out, 0)
        grams.append(np.triu(out))
    np.testing.assert_array_equal(grams[0], grams[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gram_kernel_float32_part_errs_by_its_stated_bound(
    medium: tuple[sp.csr_matrix, ...], dtype: type[np.floating]
) -> None:
    # The kernel alone on the rare part. Float64: the exact sums to rounding. Float32 (the
    # split-half Grams): an entry whose rows share K rare tokens is K non-negative float32
    # products of values rounded to float32, summed in float32, so it errs by at most
    # (K + 2) 2^-24 of itself; the diagonal is summed in float64 (2 roundings a term).
    r = sqrt_rows(medium[0])
    r.sum_duplicates()
    m, v = r.shape
    counts = np.bincount(r.indices, minlength=v)[None, :]
    dense = counts[0] > 0.1 * m
    _, parts = fastgram._split_gram(r, counts, dense, dtype)
    kernel = fastgram._run_upper
    got = np.zeros((m, m))
    kernel(*parts, 0, 200, got[:200], 0)
    kernel(*parts, 200, m, got[200:], 0)
    rare = r.multiply(~dense[None, :]).toarray()
    exact = np.triu(rare @ rare.T)
    shared = (rare > 0).astype(np.float64) @ (rare > 0).T.astype(np.float64)
    err = np.abs(got - exact)
    assert np.count_nonzero(np.tril(got, -1)) == 0  # the upper triangle only
    if dtype == np.float64:
        np.testing.assert_allclose(got, exact, rtol=1e-14, atol=0)
        return
    diag = np.diag(err) / np.diag(exact)
    assert np.all(diag <= 2.0**-23 + 1e-14) and diag.max() > 0  # float32 values, float64 sum
    off = np.triu(np.ones((m, m), dtype=bool), 1)
    assert np.all(err[off] <= (shared[off] + 2) * 2.0**-24 * exact[off] + 1e-300)
    assert shared[off].max() > 5  # sums of several terms, not single products
    assert err[off].max() > 1e-9  # the sums really are float32 (float64 ones err ~1e-17)


@pytest.mark.parametrize("block_rows", [None, 1, 7, 64, 299])
def test_symmetric_product_is_the_symmetric_part_of_the_product(block_rows: int | None) -> None:
    ma, mb = _odd_even_halves(300, seed=11)
    odd = np.flatnonzero(np.abs(ma - mb).sum(axis=1).A1 > 0)
    assert 100 < odd.size < 200  # both P P^T and a real Q Q^T term run
    assert plan_product(ma, mb, dtype=np.float64)[0].hybrid  # the compiled path, not scipy's
    x = ma.toarray() @ mb.toarray().T
    want = (x + x.T) / 2.0
    got = fastgram.symmetric_product(ma, mb, dtype=np.float64, block_rows=block_rows)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(got, got.T)
    f32 = fastgram.symmetric_product(ma, mb, block_rows=block_rows)  # float32 dense block
    # float32 dense block: ~4e-8 typical, ~1e-6 at worst (a diagonal entry, ~0.78, dominated
    # by a few large terms), the same order as cross_product's float32 block on these inputs.
    err = np.abs(f32 - want)
    assert 0 < err.max() < 2e-6 and np.median(err) < 1e-7
    np.testing.assert_array_equal(f32, f32.T)


def test_symmetric_product_equals_cross_product_bitwise_when_halves_are_equal() -> None:
    # Even N_i everywhere: the expected halves are the same numbers, Q is empty, and the Gram's
    # upper triangle adds the same terms in the same order as the full product.
    from posdiag.geometry._thinning import expected_halves

    c = zipf_counts(260, 3000, 600, seed=4).astype(np.int64).tolil()
    for i in range(260):
        if c[i].sum() % 2:
            c[i, 0] += 1
    ma, mb, _ = expected_halves(sp.csr_matrix(c))
    np.testing.assert_array_equal(ma.data, mb.data)
    sym = fastgram.symmetric_product(ma, mb, dtype=np.float64)
    full = cross_product(ma, ma, dtype=np.float64)
    np.testing.assert_allclose(sym, full, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(np.triu(sym), np.triu(full))


def test_symmetric_product_compiled_and_small_paths_and_refusals() -> None:
    for n in (200, 100):  # compiled Grams from COMPILED_FROM (128) rows, scipy's below
        ma, mb = _odd_even_halves(n, seed=12)
        want = ma.toarray() @ mb.toarray().T
        want = (want + want.T) / 2.0
        got = fastgram.symmetric_product(ma, mb, dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    a = sp.csr_matrix(np.ones((3, 4)))
    np.testing.assert_allclose(fastgram.symmetric_product(a), np.full((3, 3), 4.0))
    with pytest.raises(PosdiagError, match="shapes differ"):
        fastgram.symmetric_product(a, sp.csr_matrix(np.ones((3, 5))))


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 60),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
    st.integers(1, 50),
    st.booleans(),
)
def test_property_symmetric_product_any_shape(
    n: int, v: int, fraction: float, seed: int, block: int, same_pattern: bool
) -> None:
    rng = np.random.default_rng(seed)
    a = sp.random(n, v, density=0.5, random_state=rng, format="csr")
    if same_pattern:
        b = a.copy()
        b.data = rng.random(b.data.size) * (rng.random(b.data.size) < 0.5) + a.data * 0
        b.data = np.where(rng.random(b.data.size) < 0.5, a.data, rng.random(b.data.size))
    else:
        b = sp.random(n, v, density=0.5, random_state=rng, format="csr")
    got = fastgram.symmetric_product(
        a, b, dtype=np.float64, block_rows=block, dense_fraction=fraction
    )
    x = a.toarray() @ b.toarray().T
    np.testing.assert_allclose(got, (x + x.T) / 2.0, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block", [1, 7, 64])
@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 129, 255, 256, 333])
def test_mirror_upper_copies_the_upper_triangle(n: int, block: int) -> None:
    m = np.random.default_rng(n).normal(size=(n, n))
    got = _square.mirror_upper(m.copy(), block=block)
    up = np.triu(m)
    np.testing.assert_array_equal(got, up + np.triu(m, 1).T)


def test_level_and_centring_leave_the_product_exact() -> None:
    # X Y^T = c + s^X_i + s^Y_j + Delta^X (Delta^Y)^T with both blocks centred on one level:
    # the algebra the float32 block relies on, checked in float64 against the plain product.
    x = sp.csr_matrix(zipf_counts(40, 300, 200, seed=5))
    y = sp.csr_matrix(zipf_counts(30, 300, 200, seed=6))
    dense = np.zeros(300, dtype=bool)
    dense[np.argsort(-np.bincount(x.indices, minlength=300))[:60]] = True
    xd, yd = x.toarray()[:, dense], y.toarray()[:, dense]
    mu = fastgram._level((xd, yd), dense)
    assert np.all(mu[~dense] == 0) and np.all(mu[dense] > 0)
    # The dense columns' mean over both blocks' rows, rounded to float32.
    want_mu = (x.toarray().sum(0) + y.toarray().sum(0))[dense] / 70
    np.testing.assert_allclose(mu[dense], want_mu.astype(np.float32), rtol=2**-23)
    assert np.all(mu[dense] == mu[dense].astype(np.float32))
    s_x = fastgram._centre(x, xd, mu, dense)
    s_y = fastgram._centre(y, yd, mu, dense)
    np.testing.assert_allclose(xd.mean(0), x.toarray()[:, dense].mean(0) - mu[dense], atol=1e-12)
    c = float(mu @ mu)
    got = c + s_x[:, None] + s_y[None, :] + xd @ yd.T
    want = x.toarray()[:, dense] @ y.toarray()[:, dense].T
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("rare", [None, np.float64])
def test_float32_blocks_centred_on_the_level_err_on_the_deviations_only(
    monkeypatch: pytest.MonkeyPatch, rare: type[np.floating] | None
) -> None:
    # 400 positions sharing one Zipf head (drift 0.1): the dense columns are mostly their common
    # level. Centred, the float32 block's error on B_H = 1/2 J BC J (what the geometry uses)
    # falls with the deviations' size; not centred, it scales with the level.
    from posdiag.geometry._thinning import expected_halves

    c = zipf_counts(400, 3000, 3000, seed=7, drift=0.1)
    ma, mb, _ = expected_halves(sp.csr_matrix(c, dtype=np.int64))
    plan = plan_product(ma, mb)[0]
    assert plan.hybrid and plan.dtype == "float32" and plan.dense_columns > 1000
    x = ma.toarray() @ mb.toarray().T
    b_exact = centred_gram_of_bc((x + x.T) / 2)
    lam = np.linalg.eigvalsh(b_exact)

    def errors() -> list[tuple[float, float]]:
        out = []
        # rare=float64: float64 token lists, whose kernel adds the level terms in its own pass.
        for got in (fastgram.symmetric_product(ma, mb, rare=rare), cross_product(ma, mb)):
            b = centred_gram_of_bc((got + got.T) / 2)
            out.append(
                (float(np.abs(b - b_exact).max()), float(np.abs(np.linalg.eigvalsh(b) - lam).max()))
            )
        return out

    centred = errors()
    monkeypatch.setattr(fastgram, "_level", lambda blocks, dense: np.zeros(dense.size))
    plain = errors()
    for (b_err, lam_err), (b_plain, lam_plain) in zip(centred, plain, strict=True):
        assert 0 < lam_err < 1e-7 * lam.max() and b_err < 1e-7
        assert lam_plain > 5 * lam_err and b_plain > 3 * b_err


def test_sqrt_rows_keeps_the_vocabulary_with_stored_zeros() -> None:
    """Stored zero counts (a row of them: support 0) in a vocabulary whose last columns are
    unused: the result keeps shape (n, V), the zeros dropped."""
    c = sp.csr_matrix(
        (np.array([1.0, 3.0, 0.0, 0.0]), np.array([0, 1, 0, 2]), np.array([0, 2, 4])), (2, 6)
    )
    got = sqrt_rows(c)
    assert got.shape == (2, 6) and got.nnz == 2
    np.testing.assert_array_equal(got.toarray(), [[0.5, np.sqrt(0.75), 0, 0, 0, 0], [0] * 6])


def test_plan_product_hybrid_from_compiled_from_rows_and_default_block_memory() -> None:
    """Hybrid (dense block + compiled kernel) from COMPILED_FROM rows on both sides; the default
    row block keeps its two (block_rows x n_B) float64 temporaries within BLOCK_BYTES."""
    n = fastgram.COMPILED_FROM
    rng = np.random.default_rng(12)
    d = np.where(rng.random((n + 1, 40)) < 0.5, 1.0, 0.0)
    d[:, 0] = 1.0  # a column every row holds: dense
    c = sp.csr_matrix(d)
    assert plan_product(c[:n], c[:n])[0].hybrid
    assert not plan_product(c[: n - 1], c[:n])[0].hybrid
    wide = sp.csr_matrix((40_000, 40))
    plan, _ = plan_product(c[:n], wide)
    assert 16 <= plan.block_rows < n
    assert 2 * plan.block_rows * 40_000 * 8 <= fastgram.BLOCK_BYTES


def test_symmetric_product_of_float32_rows_is_computed_in_float64() -> None:
    a, b = _odd_even_halves(60, seed=13)
    for x, y in ((a, None), (a, b)):
        x32 = sp.csr_matrix(x, dtype=np.float32)
        y32 = None if y is None else sp.csr_matrix(y, dtype=np.float32)
        got = fastgram.symmetric_product(x32, y32)
        want = fastgram.symmetric_product(
            sp.csr_matrix(x32, dtype=np.float64),
            None if y32 is None else sp.csr_matrix(y32, dtype=np.float64),
        )
        np.testing.assert_array_equal(got, want)


def test_gram_lists_past_two_to_the_sixteen_rows_hold_long_gaps() -> None:
    """70,000 rows (more than 2^16): a token held by rows 1 and 69,999 has a gap of 69,998,
    which needs int32 (uint16 would wrap)."""
    m = 70_000
    x = sp.csr_matrix((np.array([0.5, 0.25]), ([1, m - 1], [3, 3])), shape=(m, 5))
    counts = np.bincount(x.indices, minlength=5)[None, :]
    _, (r_ptr, slot, stop, t_gap, t_val) = fastgram._split_gram(
        x, counts, np.zeros(5, dtype=bool), np.float64
    )
    assert t_gap.dtype == np.int32
    np.testing.assert_array_equal(t_gap, [1, m - 2])
    np.testing.assert_array_equal(t_val, [0.5, 0.25])


def test_float64_gram_with_float32_rare_lists_on_row_subsets() -> None:
    """float64 dense block, float32 rare lists, row blocks of 64: the Q Q^T correction (rows
    with odd totals, written at an offset) within the float32 lists' bound of the float64 Gram."""
    a, b = _odd_even_halves(300, seed=14)
    want = fastgram.symmetric_product(a, b, dtype=np.float64)
    got = fastgram.symmetric_product(a, b, dtype=np.float64, rare=np.float32, block_rows=64)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    ref = (a @ b.T).toarray()
    np.testing.assert_allclose(want, (ref + ref.T) / 2, rtol=0, atol=1e-13)


def test_cross_product_of_float32_rows_is_computed_in_float64() -> None:
    """float32 rows (the plug-in: one matrix times itself, or two halves) give the float64
    product of the same values, bit for bit, on the small path."""
    c = zipf_counts(40, 200, 100, seed=15)
    r32 = sp.csr_matrix(sqrt_rows(c), dtype=np.float32)
    r64 = sp.csr_matrix(r32, dtype=np.float64)
    np.testing.assert_array_equal(cross_product(r32, r32), cross_product(r64, r64))
    np.testing.assert_array_equal(cross_product(r32, r64[::-1]), cross_product(r64, r64[::-1]))


def test_cross_product_out_is_added_to_or_refused() -> None:
    """``out`` (float64, C-contiguous, (n_A, n_B)) gets the product added, in blocks of any size;
    anything else is refused by name."""
    c = zipf_counts(30, 100, 60, seed=16)
    r = sqrt_rows(c)
    want = cross_product(r, r[:20])
    for block_rows in (None, 7):
        out = np.ones((30, 20))
        got = cross_product(r, r[:20], out=out, block_rows=block_rows)
        assert got is out
        np.testing.assert_array_equal(got, 1.0 + want)
    shape = r"cross product: 'out' must be float64 of shape \(30, 20\); got"
    with pytest.raises(PosdiagError, match=rf"^{shape} float64 \(20, 30\)$"):
        cross_product(r, r[:20], out=np.zeros((20, 30)))
    with pytest.raises(PosdiagError, match=rf"^{shape} float32 \(30, 20\)$"):
        cross_product(r, r[:20], out=np.zeros((30, 20), dtype=np.float32))
    with pytest.raises(PosdiagError, match=r"^cross product: 'out' must be C-contiguous$"):
        cross_product(r, r[:20], out=np.zeros((30, 20), order="F"))


def test_hybrid_products_add_into_out_and_square_one_matrix(
    medium: tuple[sp.csr_matrix, ...],
) -> None:
    """The hybrid path (float32 and float64 dense blocks) adds into ``out`` the product it
    returns (to float64 rounding); ``S S^T`` of one matrix (the plug-in) is within the float32
    block's error of the dense product; the plan counts the columns both sides use outside the
    dense block."""
    ra, rb = sqrt_rows(medium[0]), sqrt_rows(medium[1])
    for dtype in (np.float32, np.float64):
        want = cross_product(ra, rb, dtype=dtype)
        out = np.full(want.shape, 0.5)
        got = cross_product(ra, rb, dtype=dtype, out=out)  # the same terms, other order
        np.testing.assert_allclose(got, 0.5 + want, rtol=0, atol=1e-14)
    dense = dense_sqrt(medium[0])
    np.testing.assert_allclose(cross_product(ra, ra), dense @ dense.T, rtol=0, atol=1e-6)
    plan, mask = plan_product(ra, rb)
    na = np.bincount(ra.indices, minlength=ra.shape[1])
    nb = np.bincount(rb.indices, minlength=rb.shape[1])
    assert plan.sparse_columns == int(np.sum((na * nb > 0) & ~mask)) < ra.shape[1]


def test_plan_of_a_small_product_bounds_its_two_temporaries_only() -> None:
    """Below the hybrid size: no dense block, no rare parts; the bound is the two
    (block_rows x n_B) float64 temporaries, and a block never has more rows than A."""
    c = sqrt_rows(zipf_counts(30, 100, 60, seed=17))
    plan, mask = plan_product(c, c[:20], block_rows=7)
    assert not plan.hybrid and not mask.any() and plan.dense_columns == 0
    assert plan.bytes_bound == 2 * 7 * 20 * 8
    one, _ = plan_product(c[:1], c[:20])
    assert one.block_rows == 1 and one.bytes_bound == 2 * 1 * 20 * 8


def test_symmetric_product_is_compiled_from_compiled_from_rows() -> None:
    """From COMPILED_FROM (128) rows the float32 dense block (within 1e-6 of the float64
    product, not equal to it); one row fewer, scipy's float64 product exactly."""
    n = fastgram.COMPILED_FROM
    c = sqrt_rows(zipf_counts(n, 400, 200, seed=18))
    exact = (c @ c.T).toarray()
    got = fastgram.symmetric_product(c)
    assert 0.0 < np.abs(got - exact).max() <= 1e-6
    small = c[: n - 1]
    np.testing.assert_array_equal(fastgram.symmetric_product(small), (small @ small.T).toarray())
