"""The long-context diagnose estimators (issue 35) against numpy brute force on small ``n``:
exact when every pair is in the sample, and over seeds unbiased with honest standard errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from posdiag.geometry import implicit
from posdiag.geometry import implicit_noise as noise
from posdiag.geometry._gram import sqrt_rows
from posdiag.geometry.core import hellinger_distances
from posdiag.geometry.estimator import expected_thinning_bc, gram_from_bc, implied_distances
from posdiag.geometry.heldout import _outer_splits
from posdiag.reports.intervals import _noise_gram_diagonal
from posdiag.uncertainty.bootstrap import noise_floor
from tests.geometry.test_implicit import counts


@pytest.fixture(scope="module")
def thin() -> tuple[implicit.ImplicitBC, np.ndarray]:
    c = counts(160)
    return implicit.from_thinning(c, 160), expected_thinning_bc(c, 160)


def _shift_truth(d: np.ndarray) -> tuple[float, np.ndarray, float, float]:
    """Brute force: R^2 of D against its lag means, the lag means, neighbour and all means."""
    n = d.shape[0]
    i, j = np.triu_indices(n, k=1)
    lag = j - i
    vals = d[i, j]
    prof = np.bincount(lag - 1, weights=vals) / np.bincount(lag - 1)
    ss_tot = float(np.sum((vals - vals.mean()) ** 2))
    r2 = 1.0 - float(np.sum((vals - prof[lag - 1]) ** 2)) / ss_tot
    return r2, prof, float(prof[0]), float(vals.mean())


def test_shift_estimate_exact_when_every_lag_is_enumerated(thin) -> None:
    bc, ref = thin
    geom = implicit.implicit_geometry(bc, min_rank=4, max_rank=4, tolerances=())
    got = noise.shift_estimate(geom, bc, pairs=160 * 160)
    r2, prof, neigh, mean = _shift_truth(implied_distances(ref))
    assert got.r2 == pytest.approx(r2, abs=1e-12) and got.r2_se == 0.0
    np.testing.assert_allclose(got.profile, prof, rtol=0, atol=1e-12)
    assert got.neighbour_mean == pytest.approx(neigh, abs=1e-12)
    assert got.all_mean == pytest.approx(mean, abs=1e-12)
    assert got.smoothness == pytest.approx(neigh / mean, abs=1e-12)
    assert got.pairs == 160 * 159 // 2


def drifting_counts(
    n: int, v: int = 600, per_row: int = 400, seed: int = 0, block: int = 1
) -> sp.csr_matrix:
    """Two Zipf laws on disjoint halves of the vocabulary mixed with a weight that drifts with
    the position (1.5 cosine cycles; constant over runs of ``block`` positions, which then share
    one distribution): distances depend partly, not only, on the lag."""
    rng = np.random.default_rng(seed)
    half = v // 2
    z = np.arange(1, half + 1, dtype=np.float64) ** -1.1
    z /= z.sum()
    w = 0.5 + 0.4 * np.cos(3 * np.pi * (np.arange(n) // block * block) / n)
    p = np.concatenate([w[:, None] * z[None, :], (1 - w)[:, None] * z[None, :]], axis=1)
    return sp.csr_matrix(np.array([rng.multinomial(per_row, row) for row in p], dtype=np.int64))


def test_shift_estimate_sampled_unbiased_and_its_error_honest() -> None:
    """n = 400, 2 pairs a lag: over 30 seeds R^2 and the mean distance average to the brute
    force within 3 standard errors of their mean, the neighbours' mean is exact, and the stated
    standard error of R^2 is within a factor 2 of the observed spread."""
    n = 400
    c = drifting_counts(n, seed=11)
    bc = implicit.from_thinning(c, n)
    r2, _, neigh, mean = _shift_truth(implied_distances(expected_thinning_bc(c, n)))
    geom = implicit.implicit_geometry(bc, min_rank=4, max_rank=4, tolerances=())
    got = [noise.shift_estimate(geom, bc, pairs=800, seed=s) for s in range(30)]
    est = np.array([g.r2 for g in got])
    means = np.array([g.all_mean for g in got])
    assert all(g.neighbour_mean == pytest.approx(neigh, abs=1e-12) for g in got)
    assert all(g.pairs == (n - 1) + sum(min(n - lag, 2) for lag in range(2, n)) for g in got)
    assert 0.1 < r2 < 0.99  # a geometry with something to explain and something left
    assert abs(est.mean() - r2) <= 3 * est.std(ddof=1) / np.sqrt(30)
    assert abs(means.mean() - mean) <= 3 * means.std(ddof=1) / np.sqrt(30)
    assert 0.5 < est.std(ddof=1) / np.mean([g.r2_se for g in got]) < 2.0


def _noise_truth(
    b: np.ndarray, halves: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[int, float, list[tuple[int, int]]]:
    """Brute force of split_half_summary's rule on whole matrices: pairs i < j whose squared
    distance is within the rms of |D2_P - D2_Q| / 2, and the energy sum (P - Q)^2 / 4."""
    s = 4.0 * len(halves)
    err = np.zeros_like(b)
    energy = np.zeros_like(b)
    for p, q in halves:
        dd = np.diag(p) - np.diag(q)
        err += ((dd[:, None] + dd[None, :]) - 2.0 * (p - q)) ** 2
        energy += (p - q) ** 2
    d2 = np.diag(b)[:, None] + np.diag(b)[None, :] - 2.0 * b
    hit = np.triu(d2 <= np.sqrt(err / s), k=1)
    i, j = np.nonzero(hit)
    return int(hit.sum()), float(energy.sum() / s), list(zip(i.tolist(), j.tolist(), strict=True))


def dense_halves(c: sp.csr_matrix, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The outer splits' half grams in float64 from the dense path's draws (the report's own
    are float32): the oracle of :func:`noise.split_entries`."""
    out = []
    for sources in _outer_splits(c, n, (), 4, seed, None):
        (_, a), (_, b) = sources
        out.append(
            (gram_from_bc(expected_thinning_bc(a, n)), gram_from_bc(expected_thinning_bc(b, n)))
        )
    return out


def test_split_entries_are_the_half_grams() -> None:
    n = 60
    c = counts(n, v=500, seed=6)
    rows, cols = np.divmod(np.arange(n * n), n)
    got = noise.split_entries(c, n, rows, cols, seed=5)
    want = dense_halves(c, n, 5)
    assert len(got) == len(want) == 4
    for (p, q), (gp, gq) in zip(got, want, strict=True):
        np.testing.assert_allclose(p, gp.ravel(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(q, gq.ravel(), rtol=0, atol=1e-13)


def test_split_noise_exact_when_every_pair_is_sampled() -> None:
    n = 120
    c = counts(n, v=700, seed=3)
    bc = implicit.from_thinning(c, n)
    geom = implicit.implicit_geometry(bc, pairs=n * n, min_rank=4, max_rank=4, tolerances=())
    dense = dense_halves(c, n, 2)
    b = gram_from_bc(expected_thinning_bc(c, n))
    within, energy, pairs = _noise_truth(b, dense)
    entries = noise.split_entries(c, n, geom.pairs.rows, geom.pairs.cols, seed=2)
    got = noise.split_noise(geom, entries, max_pairs=7)
    assert len(entries) == 4  # n < 512: four outer splits, as the dense report
    assert 0 < within < n * (n - 1) // 2
    assert got.within == within and got.within_se == 0.0
    assert got.examples == tuple(pairs[:7])
    assert got.energy == pytest.approx(energy, rel=1e-12) and got.energy_se == 0.0
    assert got.share == pytest.approx(energy / float(np.vdot(b, b)), rel=1e-12)
    assert got.share_se == 0.0


def test_split_noise_sampled_within_its_error() -> None:
    """n = 300, 3,000 pairs: over 100 seeds the sampled count of pairs within the noise and the
    energy (sums over pairs: unbiased) average to the brute force within 3 standard errors of
    their mean; the noise share, a ratio of two sampled sums (bias O(1/m)), within half of its
    stated standard error; every stated standard error within 30% of the observed spread."""
    n = 300
    c = counts(n, v=800, seed=4)
    bc = implicit.from_thinning(c, n)
    b = gram_from_bc(expected_thinning_bc(c, n))
    halves = dense_halves(c, n, 0)
    within, energy, _ = _noise_truth(b, halves)
    share = energy / float(np.vdot(b, b))
    exact = implicit.implicit_geometry(bc, min_rank=8, max_rank=8, tolerances=())
    got = []
    for seed in range(100):
        geom = implicit.implicit_geometry(bc, pairs=3000, seed=seed, spectrum=exact.spectrum)
        r, k = geom.pairs.rows, geom.pairs.cols
        # split_entries' values (equal to 1e-13: test_split_entries_are_the_half_grams).
        got.append(noise.split_noise(geom, [(p[r, k], q[r, k]) for p, q in halves]))
    for name, truth in (("within", within), ("energy", energy), ("share", share)):
        est = np.array([getattr(g, name) for g in got])
        stated = np.array([getattr(g, f"{name}_se") for g in got])
        assert np.all(stated > 0), name
        if name == "share":
            assert abs(est.mean() - truth) <= 0.5 * stated.mean()
        else:
            assert abs(est.mean() - truth) <= 3 * est.std(ddof=1) / np.sqrt(100), name
        assert 0.7 < est.std(ddof=1) / stated.mean() < 1.3, name


def test_floor_noise_against_pair_floor() -> None:
    n = 100
    c = drifting_counts(n, seed=8, block=10)
    s = implicit.from_rows(sqrt_rows(c[:n]))
    geom = implicit.implicit_geometry(s, pairs=n * n, min_rank=4, max_rank=4, tolerances=())
    floor = 1.3 * noise_floor(c[:n], seed=1)  # wide enough that some pairs are within
    floor[5] = np.nan  # as a position with < 2 tokens: never within
    d = hellinger_distances(c[:n])
    f2 = floor**2
    hit = np.triu(d <= np.sqrt(f2[:, None] + f2[None, :]) / 2.0, k=1)
    got = noise.floor_noise(geom, floor, float(_noise_gram_diagonal(floor).sum()), max_pairs=5)
    i, j = np.nonzero(hit)
    assert got.within == hit.sum() > 0 and got.within_se == 0.0
    assert got.examples == tuple(zip(i[:5].tolist(), j[:5].tolist(), strict=True))
    b = gram_from_bc(np.asarray((sqrt_rows(c[:n]) @ sqrt_rows(c[:n]).T).todense()))
    e = np.nan_to_num(f2) / 4.0
    jm = np.eye(n) - 1.0 / n
    assert got.share == pytest.approx(np.trace(jm @ np.diag(e) @ jm) / np.trace(b), rel=1e-12)
    assert 5 not in {k for pair in got.examples for k in pair}
    np.testing.assert_allclose(noise.gram_diagonal(geom), np.diag(b), rtol=0, atol=1e-13)
