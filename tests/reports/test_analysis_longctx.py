"""The analysis path takes the long-context routes (structured scores, partial spectra, O(n)
noise terms) and agrees with the dense computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import Counts, count_texts
from posdiag.encodings import DEFAULT_SET, make_encoding, parse_encoding
from posdiag.geometry.core import compare, gram_from_distances
from posdiag.reports import analysis, intervals
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.scores import score_encodings
from posdiag.scoring import scores as fastscore
from tests._data import drift_distributions, sample_texts, whole_mask, whole_split_half
from tests.geometry._oracles import double_center


@pytest.fixture(scope="module")
def counts() -> Counts:
    """40 positions drifting smoothly (rank 3), 400 sequences."""
    mu = drift_distributions(40, 60, rank=3, seed=4)
    return count_texts(sample_texts(mu, 400, seed=5), load_tokenizer(), max_len=40)


def test_default_scores_never_build_dense_encoding_matrices(
    counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    geo = corpus_geometry(counts, min_count=1)

    def refuse(*args: object) -> None:
        raise AssertionError("the dense compare() ran")

    monkeypatch.setattr(fastscore, "compare", refuse)
    fast = {s.name: s for s in score_encodings(geo)}
    monkeypatch.undo()
    assert len(fast) == len(DEFAULT_SET)
    b_h = geo.mds.gram
    for spec in DEFAULT_SET:
        name, params = parse_encoding(spec)
        enc = make_encoding(name, geo.n_eff, params, mds=geo.mds)
        assert "delta" not in enc.__dict__  # nothing dense was built by the factory
        want = compare(geo.distances, b_h, enc.delta, enc.gram())
        got = fast[enc.name]
        # mds-r's headline is held out (docs/geometry.md); its in-sample figure is compare's.
        in_sample = got.stress if math.isnan(got.in_sample) else got.in_sample
        assert in_sample == pytest.approx(want.stress, abs=1e-10)
        assert got.raw == pytest.approx(want.raw, abs=1e-10)
        assert got.kruskal == pytest.approx(want.kruskal, abs=1e-10)
        if math.isnan(want.spearman):
            assert math.isnan(got.spearman)
        else:
            assert got.spearman == pytest.approx(want.spearman, abs=1e-7)


def test_noise_gram_diagonal_without_the_matrix() -> None:
    floor = np.array([0.3, np.nan, 0.1, 0.25, 0.05])
    e = np.nan_to_num(floor) ** 2 / 4
    want = np.diag(double_center(np.diag(e)))
    np.testing.assert_allclose(intervals._noise_gram_diagonal(floor), want, rtol=1e-14)


def test_partial_mds_of_gram_matches_full_eigh() -> None:
    from posdiag.geometry.core import mds_from_gram, mds_of_gram, stress_by_rank

    # A non-Euclidean dissimilarity: negative eigenvalues, as with the cross-fit.
    rng = np.random.default_rng(0)
    d = rng.uniform(0.5, 1.0, (60, 60))
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0)
    b = gram_from_distances(d)
    full = mds_from_gram(b)
    part = mds_of_gram(b, tolerances=(0.5,), full_max=10, start_rank=5)
    assert part.total is not None  # the partial solver ran
    k = part.eigenvalues.size
    assert 5 <= k < 59
    np.testing.assert_allclose(part.eigenvalues, full.eigenvalues[:k], atol=1e-7)
    np.testing.assert_allclose(
        part.stress_by_rank(), stress_by_rank(full.eigenvalues)[:k], atol=1e-7
    )
    assert part.bottom == pytest.approx(full.eigenvalues[-1], abs=1e-6)
    assert part.min_eigenvalue == part.bottom
    np.testing.assert_allclose(np.abs(part.coordinates(3)), np.abs(full.coordinates(3)), atol=1e-6)


def _noisy_geometry(n: int = 40):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    p = drift_distributions(n, 30, seed=2)
    counts = np.stack([rng.multinomial(60 + 3 * i, p[i]) for i in range(n)])
    return corpus_geometry(Counts(sp.csr_matrix(counts), {}), min_count=1)


def test_noise_bounds_by_row_blocks_equal_the_whole_matrix_formulas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from posdiag.geometry.estimator import noise_energy_rows
    from tests.geometry._oracles import noise_energy

    geo = _noisy_geometry()
    half = whole_split_half(geo)
    assert half is not None
    whole = noise_energy(half)
    # 1, 2 or 3 rows per block, and one block: the same numbers bit for bit.
    n = whole.shape[0]
    for block in (8 * n, 16 * n, 24 * n, 1 << 30):
        np.testing.assert_array_equal(noise_energy_rows(half, block), whole.sum(axis=1))
    want = whole_mask(half.grams, geo.mds.gram)
    rows = geo.mds.gram
    share_want = whole.sum(axis=1) / np.sum(rows * rows, axis=1)
    # The pairs come from the split-half summary (posdiag.geometry.estimator), not by blocks.
    partners, within, _ = intervals._noise_pairs(geo, np.zeros(n))
    np.testing.assert_array_equal(partners, want.sum(axis=1))
    assert within == int(np.triu(want, 1).sum())
    for block in (8 * n, 24 * n, 1 << 30):
        monkeypatch.setattr(intervals, "NOISE_BLOCK_BYTES", block)
        total, per = intervals._noise_shares(geo, np.zeros(n))
        np.testing.assert_allclose(per, share_want, rtol=1e-13)
        assert total == pytest.approx(whole.sum() / np.sum(rows * rows), rel=1e-13)
    assert 0 < want.sum() < n * (n - 1)  # the test data has pairs on both sides of the bound


@pytest.mark.parametrize("far", [None, 1, 3, 5, 9])
def test_maybe_identical_agrees_with_every_distance_to_position_zero(
    far: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ten positions with the same counts but one (far) moved; the probes (positions 9, 4 and
    # 1) decide alone when they hold it, else every position is measured.
    base = np.array([40, 30, 20, 10, 0, 5], dtype=np.int64)
    rows = np.repeat(base[None], 10, axis=0)
    if far is not None:
        rows[far] = base[::-1]
    counts = sp.csr_matrix(rows)
    want = float(
        np.sqrt(
            1.0 - np.sqrt(rows / rows.sum(axis=1, keepdims=True)) @ np.sqrt(rows[0] / rows[0].sum())
        ).max()
    )
    assert (want < analysis.IDENTICAL_TOL) == (far is None)
    calls: list[int] = []
    real = analysis.distances_to_first

    def spy(matrix: sp.csr_matrix, n: int) -> np.ndarray:
        calls.append(n)
        return real(matrix, n)  # type: ignore[no-any-return]

    monkeypatch.setattr(analysis, "distances_to_first", spy)
    assert analysis._maybe_identical(counts, 10) == (far is None)
    # The full pass over all ten positions only when no probe is far.
    assert calls == ([4] if far in (1, 4, 9) else [4, 10])
