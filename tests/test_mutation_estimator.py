"""estimator.py paths pinned against independent values (issue 15, mutation testing).

Every expected number is computed here by an explicit loop, a dense numpy formula or a hand
calculation, never by calling the function under test on other data.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from posdiag.errors import PosdiagError
from posdiag.estimator import (
    SplitHalf,
    estimate_hellinger,
    gram_from_bc,
    heldout_mds_stress,
    implied_distances,
    negative_eigenvalue_note,
    noise_energy,
    restrict,
)


def _bc_with_uneven_diagonal() -> np.ndarray:
    """A symmetric BC-like matrix whose diagonal is not 1 (as the cross-fit gives)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.2, 0.9, size=(5, 5))
    bc = (x + x.T) / 2.0
    bc[np.diag_indices(5)] = [0.95, 0.8, 0.9, 0.7, 0.85]
    bc[0, 1] = bc[1, 0] = 0.99  # above (0.95 + 0.8)/2: a negative squared distance, clipped
    return bc


def test_gram_from_bc_is_half_the_centred_bc() -> None:
    bc = _bc_with_uneven_diagonal()
    n = bc.shape[0]
    j = np.eye(n) - np.ones((n, n)) / n
    np.testing.assert_allclose(gram_from_bc(bc), 0.5 * j @ bc @ j, rtol=0, atol=1e-15)


def test_implied_distances_by_loop() -> None:
    bc = _bc_with_uneven_diagonal()
    n = bc.shape[0]
    want = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            if i != k:
                want[i, k] = math.sqrt(max(0.0, (bc[i, i] + bc[k, k]) / 2.0 - bc[i, k]))
    got = implied_distances(bc)
    assert got[0, 1] == 0.0 and got[1, 0] == 0.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


# --- negative_eigenvalue_note: exact lines, boundaries ------------------------------------------


@pytest.mark.parametrize(
    ("lam", "line"),
    [
        ([], None),
        ([0.0, -1.0], None),  # no positive l_1: nothing to compare with
        ([-1.0, -2.0], None),
        ([4.0, 1.0], None),  # no negative eigenvalue
        ([1.0, -1e-10], None),  # exactly the rounding bound
        (
            [1.0, -1.5e-10],
            "most negative eigenvalue -1.5e-10 (-0.0% of l_1 = 1); "
            "1 eigenvalue exceed its magnitude (signal rank)",
        ),
        (
            [4.0, 2.0, 1.5, -1.5],  # 1.5 does not exceed |-1.5|: signal rank 2
            "most negative eigenvalue -1.5 (-37.5% of l_1 = 4); "
            "2 eigenvalues exceed its magnitude (signal rank)",
        ),
        (
            [8.0, 0.5, -2.0],
            "most negative eigenvalue -2 (-25.0% of l_1 = 8); "
            "1 eigenvalue exceed its magnitude (signal rank)",
        ),
    ],
)
def test_negative_eigenvalue_note_lines(lam: list[float], line: str | None) -> None:
    assert negative_eigenvalue_note(np.array(lam)) == line


def test_negative_eigenvalue_note_reads_integer_eigenvalues() -> None:
    assert negative_eigenvalue_note(np.array([5, 3, -2])) == (
        "most negative eigenvalue -2 (-40.0% of l_1 = 5); "
        "2 eigenvalues exceed its magnitude (signal rank)"
    )


# --- heldout_mds_stress against a direct computation -------------------------------------------


def _centred_gram(rng: np.random.Generator, n: int, rank: int) -> np.ndarray:
    x = rng.standard_normal((n, rank)) * np.linspace(3.0, 1.0, rank)
    x -= x.mean(axis=0)
    return x @ x.T


def _rank_gram_by_eigh(g: np.ndarray, r: int) -> np.ndarray:
    lam, u = np.linalg.eigh(g)
    order = np.argsort(lam)[::-1][:r]
    lam, u = np.clip(lam[order], 0.0, None), u[:, order]
    return (u * lam) @ u.T


def _heldout_by_hand(grams: list[tuple[np.ndarray, np.ndarray]], r: int) -> float:
    noise = sum(((p - q) ** 2).sum() / 4.0 for p, q in grams) / len(grams)
    out = []
    for p, q in grams:
        signal = float((p * q).sum())
        norm = math.sqrt(signal + noise) if signal > 0 else 0.0
        for target, fitted_on in ((q, p), (p, q)):
            g = _rank_gram_by_eigh(fitted_on, r)
            ng = math.sqrt(float((g * g).sum()))
            if norm == 0.0 or ng == 0.0:
                out.append(1.0)
                continue
            cos = min(1.0, max(0.0, float((target * g).sum())) / (norm * ng))
            out.append(math.sqrt(1.0 - cos * cos))
    return sum(out) / len(out)


def test_heldout_mds_stress_equals_a_direct_computation() -> None:
    rng = np.random.default_rng(11)
    truth = _centred_gram(rng, 7, 3)
    grams = []
    for _ in range(3):  # three outer splits, each half with its own noise
        p = truth + 0.3 * _centred_gram(rng, 7, 6)
        q = truth + 0.3 * _centred_gram(rng, 7, 6)
        grams.append((p, q))
    got = heldout_mds_stress(SplitHalf(tuple(grams)), [1, 2, 3, 6])
    assert list(got) == [1, 2, 3, 6]
    for r in (1, 2, 3, 6):
        assert got[r] == pytest.approx(_heldout_by_hand(grams, r), rel=1e-10, abs=1e-12)
    assert 0.0 < got[3] < got[1] < 1.0


def test_heldout_mds_stress_is_one_when_the_halves_disagree_in_sign() -> None:
    # <B_P, B_Q> < 0: noise swamps all signal, nothing is left to fit.
    g = _centred_gram(np.random.default_rng(2), 5, 2)
    assert heldout_mds_stress(SplitHalf(((g, -g),)), [1, 2]) == {1: 1.0, 2: 1.0}


def test_heldout_mds_stress_rank_bounds() -> None:
    g = _centred_gram(np.random.default_rng(4), 5, 2)
    halves = SplitHalf(((g, g),))
    assert heldout_mds_stress(halves, [4])[4] == pytest.approx(0.0, abs=1e-7)
    for bad in (0, 5):
        with pytest.raises(
            PosdiagError, match=rf"^'rank' must be an int in \[1, n_eff-1=4\]; got {bad}$"
        ):
            heldout_mds_stress(halves, [bad])


def test_noise_energy_is_the_mean_quarter_squared_difference() -> None:
    p1, q1 = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.0, 2.0], [3.0, 2.0]])
    p2, q2 = np.array([[2.0, 0.0], [0.0, 0.0]]), np.array([[0.0, 0.0], [0.0, 1.0]])
    # Entry by entry: ((1, 0), (0, 4)) / 4 and ((4, 0), (0, 1)) / 4, averaged.
    want = np.array([[5.0 / 8.0, 0.0], [0.0, 5.0 / 8.0]])
    np.testing.assert_array_equal(noise_energy(SplitHalf(((p1, q1), (p2, q2)))), want)


# --- restrict ------------------------------------------------------------------------------------


def test_restrict_recentres_the_leading_block() -> None:
    rng = np.random.default_rng(5)
    counts = rng.integers(1, 20, size=(6, 9))
    est = estimate_hellinger(counts, 6, estimator="plugin")
    assert restrict(est, 6) is est
    sub = restrict(est, 4)
    bc = est.bc[:4, :4]
    j = np.eye(4) - np.ones((4, 4)) / 4
    np.testing.assert_array_equal(sub.bc, bc)
    np.testing.assert_allclose(sub.gram, 0.5 * j @ bc @ j, atol=1e-15)
    np.testing.assert_allclose(sub.distances, np.sqrt(np.clip(1.0 - bc, 0, None)), atol=1e-15)
    np.testing.assert_allclose(
        np.sort(sub.mds.eigenvalues), np.linalg.eigvalsh(sub.gram), atol=1e-12
    )
    assert (sub.estimator, sub.method, sub.splits, sub.seed, sub.n) == ("plugin", "none", 0, 0, 4)
    for bad in (1, 7):
        with pytest.raises(PosdiagError, match=rf"^'n' must be an int in \[2, 6\]; got {bad}$"):
            restrict(est, bad)
