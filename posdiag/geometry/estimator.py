"""Estimators of the Hellinger geometry ``B_H`` from counts: cross-fitted (default) and plug-in.

Why not the plug-in alone (docs/theory.md, "The estimator"): its off-diagonal ``D_H^2`` are
inflated by the positions' sampling errors, which double centring turns into an isotropic,
full-rank component that any untrained random table matches.

The cross-fit estimates every Bhattacharyya coefficient from two *independent* halves of the
data. For each split ``s = 1..S`` a random half ``A`` of the shards and the rest ``B`` give
``R^A = sqrt(C^A / N^A)`` and ``R^B`` (row-wise, sparse), and ``X_s = R^A (R^B)^T``. Then

    BC  = mean_s (X_s + X_s^T) / 2        (diagonal as computed: below 1)
    B_H = 1/2 J BC J                       (= -1/2 J D^2 J with D^2 = 1 - BC, diagonal included)

Because the halves are independent, ``E[X_ij] = <m_i, m_j>`` with ``m_i = E sqrt(mu_hat_i)`` for
every ``i, j`` *including* ``i = j``, so the noise term cancels under double centring. What is
left is a shrinkage of words too rare to be seen at all (``N_i p < 1``), so the estimate still
depends on ``N`` (compare corpora at similar ``N``). The estimate is not an exact Euclidean
distance matrix: small negative eigenvalues are expected.

Counts without shards are split by *thinning* (each position's tokens halved by a multivariate
hypergeometric draw, as a random half of its sequences would); the cross-fit then takes the
exact average over every thinning, one product (:mod:`posdiag.geometry._thinning`).

The pieces live in :mod:`~posdiag.geometry.crossfit` (halves, ``BC``) and
:mod:`~posdiag.geometry.heldout` (held-out ``mds-r``, noise bounds); this module re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._util.defaults import DEFAULT_ESTIMATOR  # the CLI reads it without numpy
from .._util.threads import small_blas
from .._util.validate import check_choice, check_int
from ..errors import PosdiagError
from ._square import pack_upper, unpack_upper  # re-exported: the report parks D_H
from .core import MDS, mds_of_gram

# The cross-fit's pieces and the held-out checks, re-exported: callers import the estimator.
from .crossfit import (
    DEFAULT_SPLITS,
    Matrix,
    crossfit_bc,
    distances_to_first,
    distinct_splits,
    expected_thinning_bc,
    gram_from_bc,
    implied_distances,
    plugin_bc,
    shard_halves,
    split_picks,
    sqrt_rows,
    stack_shards,
    stacked_halves,
)
from .heldout import (
    SplitHalf,
    SplitHalfSummary,
    heldout_pair,
    noise_energy_rows,
    outer_splits,
    split_half_grams,
    split_half_summary,
)

__all__ = [
    "DEFAULT_ESTIMATOR",
    "DEFAULT_SPLITS",
    "ESTIMATORS",
    "HellingerEstimate",
    "SplitHalf",
    "SplitHalfSummary",
    "crossfit_bc",
    "distances_to_first",
    "distinct_splits",
    "estimate_hellinger",
    "expected_thinning_bc",
    "gram_from_bc",
    "heldout_pair",
    "implied_distances",
    "negative_eigenvalue_note",
    "no_spectrum",
    "noise_energy_rows",
    "outer_splits",
    "pack_upper",
    "plugin_bc",
    "restrict",
    "shard_halves",
    "split_half_grams",
    "split_half_summary",
    "split_picks",
    "sqrt_rows",
    "stack_shards",
    "stacked_halves",
    "unpack_upper",
]

ESTIMATORS = ("crossfit", "plugin")
# Stress levels whose effective ranks a partial headline spectrum grows for (up to
# posdiag.geometry.spectral.DEFAULT_MAX_RANK pairs): those `posdiag stress` prints.
HEADLINE_TOLERANCES = (0.1, 0.05)


@dataclass(frozen=True)
class HellingerEstimate:
    """The estimated Hellinger geometry of positions ``0..n-1``.

    Attributes
    ----------
    estimator : str
        ``"crossfit"`` or ``"plugin"``.
    method : str
        How the halves were made: ``"shards"`` (random halves of the shards, i.e. of the
        sequences), ``"thinning"`` (multivariate hypergeometric split of each position's counts)
        or ``"none"`` (plug-in).
    splits : int
        Number of random splits averaged (0 for the plug-in).
    seed : int
        Seed of the splits.
    gram : ndarray of shape (n, n)
        ``B_H = 1/2 J BC J``, symmetric, from the estimated Bhattacharyya coefficients ``BC``
        (whose cross-fitted diagonal is below 1). ``BC`` itself is not kept: the gram and the
        distances hold everything a report needs, and at n = 16,384 each n x n array is
        2.1 GB (:func:`crossfit_bc`, :func:`expected_thinning_bc` and :func:`plugin_bc` give it).
    distances : ndarray of shape (n, n)
        The distances ``B_H`` implies, ``sqrt(max(0, (BC_ii + BC_jj)/2 - BC_ij))``, zero
        diagonal; for the plug-in exactly ``sqrt(1 - BC)``. ``-1/2 J D^2 J = B_H`` wherever no
        squared distance was clipped at 0.
    mds : MDS
        Eigen-decomposition of ``gram`` (eigenvalues descending, may be negative).
    """

    estimator: str
    method: str
    splits: int
    seed: int
    gram: np.ndarray
    distances: np.ndarray
    mds: MDS

    @property
    def n(self) -> int:
        return int(self.gram.shape[0])


def _estimate(
    estimator: str, method: str, splits: int, seed: int, bc: np.ndarray, spectrum: bool = True
) -> HellingerEstimate:
    """The estimate from ``BC``, whose memory becomes the gram (``bc`` is overwritten when it is
    a C-contiguous float64 array): two n x n arrays at the end, not three."""
    bc = np.ascontiguousarray(bc, dtype=np.float64)
    distances = implied_distances(bc)
    return _from_gram(
        estimator, method, splits, seed, gram_from_bc(bc, overwrite=True), distances, spectrum
    )


def _from_gram(
    estimator: str,
    method: str,
    splits: int,
    seed: int,
    gram: np.ndarray,
    distances: np.ndarray,
    spectrum: bool = True,
) -> HellingerEstimate:
    # Every eigenpair up to posdiag.geometry.spectral.FULL_EIGH_MAX positions, the top ones beyond
    # (the stress tail stays exact from ||B_H||_F^2; docs/geometry.md, "Long contexts").
    # No Lanczos for the smallest eigenvalue beyond EIGVALSH_MAX: it converges slowly on the
    # noise cluster at the bottom of B_H; the report says so.
    mds = (
        mds_of_gram(gram, tolerances=HEADLINE_TOLERANCES, bottom=False)
        if spectrum
        else no_spectrum(gram)
    )
    return HellingerEstimate(estimator, method, splits, seed, gram, distances, mds)


def no_spectrum(gram: np.ndarray) -> MDS:
    """``gram`` as an MDS with no eigenpair computed (``total = ||B||_F^2`` only): for callers
    that use the Gram and the distances alone (``inspect --corpus``), no eigensolve."""
    n = gram.shape[0]
    return MDS(
        eigenvalues=np.empty(0),
        vectors=np.empty((n, 0)),
        gram=gram,
        total=float(np.vdot(gram, gram)),
        bottom=math.nan,
    )


def estimate_hellinger(
    counts: Matrix,
    n: int,
    *,
    shards: Sequence[Matrix] = (),
    estimator: str = DEFAULT_ESTIMATOR,
    splits: int = DEFAULT_SPLITS,
    seed: int = 0,
    spectrum: bool = True,
) -> HellingerEstimate:
    """Estimate the Hellinger geometry of positions ``0..n-1``.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
        The whole corpus; rows ``0..n-1`` need tokens.
    n : int
        Positions analysed (``n_eff``), ``2 <= n <= n_positions``.
    shards : sequence of matrices of shape (n_positions, vocab_size), optional
        Counts of random shards of the sequences (summing to ``counts``); with ``>= 2`` of them
        the cross-fit splits by sequence, otherwise by thinning.
    estimator : {"crossfit", "plugin"}
    splits : int
        Random splits ``S >= 1`` of the shards averaged by the cross-fit, distinct, so at most
        :func:`distinct_splits` of the shards (the estimate records how many). Thinning (no shards)
        averages over every split exactly (:func:`expected_thinning_bc`); ``splits`` is then
        only recorded.
    seed : int
        Seed of the splits (``numpy.random.default_rng``).
    spectrum : bool
        False: no eigensolve, ``mds`` holds the gram and ``||B_H||_F^2`` only
        (:func:`no_spectrum`).

    Returns
    -------
    HellingerEstimate
    """
    estimator = check_choice("estimator", estimator, ESTIMATORS)
    c = sp.csr_matrix(counts)
    n = check_int("n_eff", n, 2, c.shape[0], hi_label="n_positions")
    splits = check_int("splits", splits, 1)
    seed = check_int("seed", seed, 0)
    # One BLAS thread for small geometries (posdiag._util.threads).
    with small_blas(n):
        if estimator == "plugin":
            return _estimate("plugin", "none", 0, seed, plugin_bc(c[:n]), spectrum)
        # Own stream: the same --seed also draws the shards and the bootstrap replicates.
        if len(shards) >= 2:
            try:
                halves = shard_halves(shards, n, splits, np.random.default_rng([seed, 1]))
            except PosdiagError:
                pass  # a random half of the shards left a position without tokens: thin instead
            else:
                # Float32 dense blocks centred on the level, as the thinning's below.
                bc = crossfit_bc(halves, dtype=np.float32)
                # len(halves): fewer than asked when the shards have fewer distinct splits.
                return _estimate("crossfit", "shards", len(halves), seed, bc, spectrum)
        # Thinning: the exact average over every thinning, one product (no split noise, no seed).
        # Float32 dense block, centred on its columns' level (posdiag.geometry._gram._level),
        # float64 rare tokens: the top-10 eigenvalues within 2e-7 of float64 at n = 4,096 and 5.8e-8
        # at 16,384 (float32 rare tokens: 9.5e-6 there), in ~0.6 of the time
        # (tests/geometry/test_longctx_paths.py bounds the printed numbers).
        bc = expected_thinning_bc(c, n, dtype=np.float32, rare=np.float64)
        return _estimate("crossfit", "thinning", splits, seed, bc, spectrum)


def restrict(estimate: HellingerEstimate, n: int) -> HellingerEstimate:
    """The estimate on positions ``0..n-1``: the ``BC`` block, re-centred (``B_H`` recomputed).

    ``B_H = 1/2 J BC J`` removes only terms ``1 a^T + a 1^T`` from ``2 B_H``, and double centring
    removes those again, so the block's ``1/2 J_n BC[:n, :n] J_n`` is ``J_n B_H[:n, :n] J_n``:
    computed from the gram, as ``1/2 J_n (2 B_H[:n, :n]) J_n`` (the doubling is exact). The
    distances of a pair do not depend on the other positions: the block of the distances.
    """
    n = check_int("n", n, 2, estimate.n)
    if n == estimate.n:
        return estimate
    gram = gram_from_bc(estimate.gram[:n, :n] * 2.0, overwrite=True)
    distances = np.ascontiguousarray(estimate.distances[:n, :n])
    return _from_gram(
        estimate.estimator, estimate.method, estimate.splits, estimate.seed, gram, distances
    )


def negative_eigenvalue_note(eigenvalues: np.ndarray, *, partial: bool = False) -> str | None:
    """One line on the negative eigenvalues of an estimated ``B_H``, or None if there are none.

    Names the most negative eigenvalue, its ratio to ``l_1``, and how many eigenvalues exceed its
    magnitude (the signal rank: directions clearly above the noise the negatives reveal).
    ``partial``: ``eigenvalues`` are the top ``k`` followed by the smallest one (a partial
    spectrum); when all ``k`` exceed its magnitude the count reads "more than k".
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    if lam.size == 0 or lam[0] <= 0:
        return None
    low = float(lam[-1])
    # Rounding-size negatives are not worth a line (the plug-in is exactly Euclidean).
    if low >= -1e-10 * float(lam[0]):
        return None
    signal = int(np.sum(lam > abs(low)))
    count = str(signal)
    if partial and signal >= lam.size - 1:
        count = f"at least {lam.size - 1}"  # every computed one (the last is the bottom)
    return (
        f"most negative eigenvalue {low:.3g} ({low / lam[0]:+.1%} of l_1 = {lam[0]:.3g}); "
        f"{count} eigenvalue{'s' if signal != 1 else ''} exceed its magnitude (signal rank)"
    )
