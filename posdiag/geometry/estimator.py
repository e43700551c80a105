"""Estimators of the Hellinger geometry ``B_H`` from counts: cross-fitted (default) and plug-in.

The plug-in's off-diagonal ``D_H^2`` are inflated by the positions' sampling errors, which double
centring turns into a full-rank component any random table matches (docs/theory.md, "The
estimator"). The cross-fit estimates every Bhattacharyya coefficient from two independent
halves of the data, random halves of the shards or, without shards, the exact average over
every thinning (docs/geometry.md 2b)::

    BC  = mean_s (X_s + X_s^T) / 2,  X_s = R^A_s (R^B_s)^T   (diagonal as computed: below 1)
    B_H = 1/2 J BC J

Its pieces live in :mod:`.crossfit` and :mod:`.heldout`; this module re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

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
    "split_half_summary",
    "split_picks",
    "sqrt_rows",
    "stack_shards",
    "stacked_halves",
    "unpack_upper",
]

ESTIMATORS = ("crossfit", "plugin")
# Stress levels whose effective ranks a partial headline spectrum grows for: those
# `posdiag stress` prints.
HEADLINE_TOLERANCES = (0.1, 0.05)


@dataclass(frozen=True)
class HellingerEstimate:
    """The estimated Hellinger geometry of positions ``0..n-1``.

    Attributes
    ----------
    estimator : str
        ``"crossfit"`` or ``"plugin"``.
    method : str
        How the halves were made: ``"shards"``, ``"thinning"`` or ``"none"`` (plug-in).
    splits : int
        Number of random splits averaged (0 for the plug-in).
    seed : int
        Seed of the splits.
    gram : ndarray of shape (n, n)
        ``B_H = 1/2 J BC J``, symmetric. ``BC`` itself is not kept (an n x n array the gram
        and the distances make redundant).
    distances : ndarray of shape (n, n)
        The distances ``B_H`` implies, ``sqrt(max(0, (BC_ii + BC_jj)/2 - BC_ij))``, zero
        diagonal (``sqrt(1 - BC)`` for the plug-in).
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
    """The estimate from ``BC``, whose memory becomes the gram (overwritten when C-contiguous
    float64): two n x n arrays at the end, not three."""
    bc = np.ascontiguousarray(bc, dtype=np.float64)
    distances = implied_distances(bc)
    gram = gram_from_bc(bc, overwrite=True)
    mds = _headline_mds(gram, spectrum)
    return HellingerEstimate(estimator, method, splits, seed, gram, distances, mds)


def _headline_mds(gram: np.ndarray, spectrum: bool = True) -> MDS:
    # Beyond EIGVALSH_MAX no Lanczos for the smallest eigenvalue: it converges slowly on the
    # noise cluster at the bottom of B_H (the report says so).
    if spectrum:
        return mds_of_gram(gram, tolerances=HEADLINE_TOLERANCES, bottom=False)
    return no_spectrum(gram)


def no_spectrum(gram: np.ndarray) -> MDS:
    """``gram`` as an MDS with no eigenpair computed (``total = ||B||_F^2`` only)."""
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
        :func:`distinct_splits`; thinning averages over every split exactly (only recorded).
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
                bc = crossfit_bc(halves, dtype=np.float32)
                # len(halves): fewer than asked when the shards have fewer distinct splits.
                return _estimate("crossfit", "shards", len(halves), seed, bc, spectrum)
        # Thinning: the exact average over every thinning (no split noise, no seed); float32
        # dense block centred on its level, float64 rare tokens (benchmarks/NOTES.md).
        bc = expected_thinning_bc(c, n, dtype=np.float32, rare=np.float64)
        return _estimate("crossfit", "thinning", splits, seed, bc, spectrum)


def restrict(estimate: HellingerEstimate, n: int) -> HellingerEstimate:
    """The estimate on positions ``0..n-1``: the ``BC`` block, re-centred (``B_H`` recomputed).

    Double centring removes again the terms ``1 a^T + a 1^T`` that separate ``2 B_H`` from
    ``BC``, so the block's ``1/2 J_n BC[:n, :n] J_n`` is computed from the gram; the distances
    are the block of the distances.
    """
    n = check_int("n", n, 2, estimate.n)
    if n == estimate.n:
        return estimate
    gram = gram_from_bc(estimate.gram[:n, :n] * 2.0, overwrite=True)
    distances = np.ascontiguousarray(estimate.distances[:n, :n])
    return replace(estimate, gram=gram, distances=distances, mds=_headline_mds(gram))


def negative_eigenvalue_note(eigenvalues: np.ndarray, *, partial: bool = False) -> str | None:
    """One line on the negative eigenvalues of an estimated ``B_H``, or None if there are none.

    Names the most negative eigenvalue, its ratio to ``l_1``, and how many eigenvalues exceed
    its magnitude (the signal rank). ``partial``: ``eigenvalues`` are the top ``k`` followed by
    the smallest one; when all ``k`` exceed its magnitude the count reads "at least k".
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
