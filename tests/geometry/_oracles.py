"""References of posdiag.geometry for tests only: code production no longer calls, and
whole-matrix versions of what posdiag.geometry.heldout computes by row blocks.

``double_center``, ``symmetrize`` (block by block) and ``positive_rank`` check the production
passes and figures. ``split_half_grams`` makes the whole split-half grams;
``heldout_mds_stress`` and ``noise_energy`` compute from them what
:func:`posdiag.geometry.heldout.split_half_summary` computes one half's gram at a time; the
tests check the summary (and the bootstrap's ``heldout_pair``) against them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from posdiag._util.validate import check_int
from posdiag.geometry import heldout
from posdiag.geometry.core import MDS, NEGATIVE_EIGENVALUE_TOL
from posdiag.geometry.crossfit import DEFAULT_SPLITS, Matrix
from posdiag.geometry.heldout import (
    SplitHalf,
    _add_split,
    _heldout_norm,
    _top_mds,
    noise_energy_rows,
)
from posdiag.geometry.spectral import PARTIAL_FROM


def double_center(m: np.ndarray) -> np.ndarray:
    """``J M J`` with ``J = I - 11^T/n``, without forming ``J``."""
    m = np.asarray(m, dtype=np.float64)
    return m - m.mean(axis=0, keepdims=True) - m.mean(axis=1, keepdims=True) + m.mean()


def symmetrize(m: np.ndarray, block: int = 1024) -> np.ndarray:
    """``m <- (m + m^T) / 2`` in place, block by block (no ``n x n`` temporary); returns ``m``."""
    n = m.shape[0]
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        for lo2 in range(lo, n, block):
            hi2 = min(n, lo2 + block)
            avg = (m[lo:hi, lo2:hi2] + m[lo2:hi2, lo:hi].T) / 2.0
            m[lo:hi, lo2:hi2] = avg
            m[lo2:hi2, lo:hi] = avg.T
    return m


def positive_rank(mds: MDS) -> int:
    """Number of eigenvalues of ``mds`` above the rounding tolerance ``1e-10 * l_1``."""
    tol = NEGATIVE_EIGENVALUE_TOL * max(float(mds.eigenvalues[0]), 0.0)
    return int(np.sum(mds.eigenvalues > tol))


def split_half_grams(
    counts: Matrix,
    n: int,
    *,
    shards: Sequence[Matrix] = (),
    splits: int = DEFAULT_SPLITS,
    seed: int = 0,
    repeats: int | None = None,
) -> SplitHalf:
    """The whole cross-fitted ``(B_P, B_Q)`` of each outer split that
    :func:`posdiag.geometry.heldout.split_half_summary` makes one at a time (the same draws)."""
    c = sp.csr_matrix(counts)
    n = check_int("n_eff", n, 2, c.shape[0], hi_label="n_positions")
    out = []
    for sources in heldout._outer_splits(c, n, shards, splits, seed, repeats):
        g_p = heldout._half_gram(sources.pop(0))
        g_q = heldout._half_gram(sources.pop(0))
        out.append((g_p, g_q))
    return SplitHalf(tuple(out))


def heldout_mds_stress(
    halves: SplitHalf, ranks: Sequence[int], *, partial_from: int = PARTIAL_FROM
) -> dict[int, float]:
    """Held-out stress of the rank-r MDS encoding: fitted on one half of the data, scored on
    the other.

    The in-sample eigenvalue tail is optimistic next to fixed encodings: ``mds-r`` is fitted to
    the noise of the very estimate it is scored against. Here the rank-r Gram ``G_P`` fitted on
    ``B_P`` is scored against the independent half ``B_Q`` (and vice versa,
    :func:`split_half_grams`), on the footing of a fixed encoding scored against the full
    estimate ``B_H``. That score is ``sqrt(1 - cos^2)`` with ``cos = <B_H, G> / (|B_H| |G|)``,
    where ``E <B_H, G> = <E B_H, G>`` and ``E |B_H|^2 = |E B_H|^2 + (noise of the full
    estimate)``. The held-out version keeps both parts: ``<B_Q, G_P>`` (unbiased: ``Q`` is
    independent of the fit) over ``|G_P|`` and ``sqrt(<B_P, B_Q> + e)``, where ``<B_P, B_Q>`` is
    unbiased for the squared norm of the noise-free half-size geometry and ``e`` the bound on
    the full estimate's squared noise (:func:`noise_energy`). Dividing by ``|B_Q|`` instead
    would charge ``mds-r`` with the larger noise of a half-size estimate, which the fixed
    encodings never face (on the bundled corpus that made ``mds-3`` 0.38 instead of ~0.22).
    The result is the mean over both directions and every outer split; the fit itself uses
    half the data, so it still errs on the pessimistic side.

    Parameters
    ----------
    halves : SplitHalf
    ranks : sequence of int, each in [1, n-1]
    partial_from : int
        From this many positions the fits compute only their top eigenpairs (the same
        stresses to ~1e-12; spectral.PARTIAL_FROM).

    Returns
    -------
    dict mapping rank to stress
    """
    n = halves.grams[0][0].shape[0]
    for r in ranks:
        check_int("rank", r, 1, n - 1, hi_label="n_eff-1")
    acc = {int(r): 0.0 for r in ranks}
    top = max(acc)
    noise = float(noise_energy_rows(halves).sum())  # row blocks: no n x n temporary
    start: np.ndarray | None = None
    for g_p, g_q in halves.grams:
        norm = _heldout_norm(float(np.vdot(g_p, g_q)), noise)
        # The four halves estimate one geometry: each fit starts from the previous one's
        # vectors (block Lanczos warm start, ~20% fewer passes at n = 4,096).
        fit_p = _top_mds(g_p, top, start, partial_from)
        fit_q = _top_mds(g_q, top, fit_p.vectors, partial_from)
        start = fit_q.vectors
        _add_split(acc, g_p, fit_p.coordinates(top), g_q, fit_q.coordinates(top), norm)
    return {r: v / (2 * len(halves.grams)) for r, v in acc.items()}


def noise_energy(halves: SplitHalf) -> np.ndarray:
    """Squared sampling error of each entry of the full-data cross-fitted ``B_H`` (an upper bound).

    ``B_P - B_Q`` has mean ~0 (equal-size halves share the same shrinkage), so
    ``E (B_P - B_Q)^2 = 2 var_half``; doubling the data at least halves the variance, so the
    full estimate's squared error is at most ``(B_P - B_Q)^2 / 4``, averaged over outer splits.

    Returns
    -------
    ndarray of shape (n, n)
    """
    # Accumulated in place: two n x n arrays whatever the number of outer splits.
    acc = np.zeros_like(halves.grams[0][0])
    for g_p, g_q in halves.grams:
        d = np.subtract(g_p, g_q)
        d *= d
        acc += d
    acc /= 4.0 * len(halves.grams)
    return acc
