"""How sure are the numbers? Sharded counts, the shard bootstrap, the split-half noise floor and
the noise level of positional information (docs/geometry.md section 8; docs/theory.md).

Counts are additive, so counting a corpus into ``K`` random shards (each sequence goes to one
shard, chosen with a seeded generator) costs one pass and gives, for free, the total (the sum of
the shards) and a resampling scheme for intervals: a replicate corpus is the sum of half of the
shards, drawn without replacement (half-sampling; see :func:`bootstrap_stress` for why not the
multinomial bootstrap).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.defaults import (  # why: see there
    BALANCED_FROM,
    BALANCED_MAX_REPLICATES,
    DEFAULT_ESTIMATOR,
    DEFAULT_LEVEL,
    DEFAULT_REPLICATES,
    DEFAULT_SHARDS,
)
from .._util.memory import require
from .._util.threads import one_blas_thread
from .._util.validate import check_choice, check_int
from ..corpus.tokenizers import Tokenizer
from ..counts.core import Counts, ProgressFn, count_texts, is_counts_file
from ..counts.corpus import corpus_counts
from ..encodings import Encoding
from ..errors import PosdiagError
from ..geometry._hypergeom import VECTORISED_FLOOR_FROM, _half_draw
from ..geometry.core import (
    MDS,
    gram_from_distances,
    hellinger_distances,
    mds_from_gram,
    positional_information,
    stress_by_rank,
)
from ..geometry.estimator import (
    ESTIMATORS,
    crossfit_bc,
    gram_from_bc,
    heldout_pair,
    implied_distances,
    split_picks,
    stack_shards,
    stacked_halves,
)
from ..geometry.spectral import top_eigenpairs
from ..scoring.scores import GramScorer, diagonal_sums
from ._hadamard import hadamard
from ._permnull import PERMUTED_NULL_FROM, shuffled_null
from ._replicates import PatternTooLarge, ShardPattern
from ._shardsum import ShardStack

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_REPLICATES",
    "DEFAULT_SHARDS",
    "DESIGNS",
    "BALANCED_FROM",
    "BALANCED_MAX_REPLICATES",
    "PERCENTILE_FROM",
    "REPLICATE_SPLITS",
    "InformationNull",
    "ShardedCounts",
    "StressIntervals",
    "balanced_halves",
    "bootstrap_stress",
    "check_level",
    "corpus_counts_sharded",
    "count_texts_sharded",
    "default_replicates",
    "information_null",
    "interval_method",
    "noise_floor",
    "noise_floor_by_shards",
    "pair_floor",
    "paired_halves",
    "replicate_halves",
]


@dataclass(frozen=True)
class ShardedCounts:
    """The counts of a corpus and of ``K`` random shards of it.

    Attributes
    ----------
    counts : Counts
        The whole corpus: the sum of the shards.
    shards : tuple of csr_matrix, each of shape (n_positions, vocab_size)
        Empty when the corpus was read from a counts file (sequences can no longer be split).
    seed : int
        Seed of the shard assignment.
    why_no_shards : str
        When ``shards`` is empty: why (reported instead of intervals).
    """

    counts: Counts
    shards: tuple[sp.csr_matrix, ...] = ()
    seed: int = 0
    # The CLI and corpus_counts_sharded say why they made no shards; plain counts handed to the
    # library just have none.
    why_no_shards: str = "the counts carry no shards (count the corpus with shards >= 2)"

    @property
    def k(self) -> int:
        return len(self.shards)


def count_texts_sharded(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    *,
    shards: int = DEFAULT_SHARDS,
    seed: int = 0,
    view_name: str = "text",
    max_len: int = 512,
    batch_size: int = 1024,
    progress: ProgressFn | None = None,
    source: str = "<texts>",
) -> ShardedCounts:
    """Tokenize, apply a view and count into ``shards`` seeded random shards in one pass.

    Each sequence (after the view: a window in the packed view) goes to one shard drawn
    uniformly with ``numpy.random.default_rng(seed)``; see :func:`posdiag.counts.core.count_texts`.
    """
    counts = count_texts(
        texts,
        tokenizer,
        view_name=view_name,
        max_len=max_len,
        batch_size=batch_size,
        progress=progress,
        source=source,
        shards=check_int("shards", shards, 2),
        shard_seed=seed,
    )
    return ShardedCounts(counts, counts.shards, seed)


def corpus_counts_sharded(
    corpus: str,
    *,
    shards: int = DEFAULT_SHARDS,
    seed: int = 0,
    **read: Any,
) -> ShardedCounts:
    """:func:`~posdiag.counts.corpus.corpus_counts` with shards.

    ``read`` takes every keyword of ``corpus_counts`` (column, tokenizer, view_name, max_len,
    pad_token, progress, limit, sample, data_dir, dtype, vocab_size, ...); ``seed`` seeds both
    the shards and ``sample``. ``shards=0`` counts without shards (no intervals). A counts
    ``.npz`` has lost the sequences and a token id file is counted by the fast dense path, so
    both are read without shards whatever ``shards`` says; the reason is kept for the report.
    """
    k = check_shards(shards, "plugin")  # the estimator's own minimum: when intervals start
    counts = corpus_counts(corpus, shards=k, shard_seed=seed, seed=seed, **read)
    if counts.shards:
        return ShardedCounts(counts, counts.shards, seed)
    if k == 0:
        why = "--shards 0 was given"
    elif is_counts_file(corpus):
        why = "a counts file keeps no shards; pass the corpus itself for intervals"
    else:
        why = "token id files are counted without shards; intervals need a text corpus"
    return ShardedCounts(counts, (), seed, why)


@dataclass(frozen=True)
class StressIntervals:
    """Bootstrap intervals of every stress, from half-samples of the shards.

    Attributes
    ----------
    level : float
        Coverage, e.g. 0.95.
    shards, replicates, seed : int
        Shards re-weighted, replicates used (replicates where a position lost all its support
        are skipped), seed of the weights.
    encodings : tuple of (float, float)
        ``(low, high)`` for each encoding, in the order given.
    stress_by_rank : tuple of (float, float)
        ``(low, high)`` of the rank-r MDS stress, r = 1..n_eff-1.
    method : {"percentile", "t"}
        How the intervals were read from the replicates (:func:`interval_method` of
        ``replicates``).
    distance_sd : ndarray of shape (n_eff, n_eff), or None
        Bootstrap standard deviation of each ``d_H(i, j)``; None when not asked for
        (``distances=False``).
    bias : tuple of float
        Mean replicate stress minus the estimate, per encoding: how much extra sampling noise
        moves the stress (positive: noise inflates it; the estimate is likely inflated too).
    heldout_pairs : int
        Complementary replicate pairs whose held-out ``mds-r`` figures widened the held-out
        ``mds-r`` intervals (0: none did; :func:`bootstrap_stress`, Notes).
    heldout_splits : int
        Outer splits each held-out ``mds-r`` headline averages (the pairs' spread is divided
        by its square root); 0 when no held-out ``mds-r`` was scored. With ``heldout_pairs``
        0 the pairs could not widen its intervals (fewer than 2 kept every position).
    design : {"balanced", "random"}
        How the half-samples were drawn (:func:`replicate_halves`): rows of a Hadamard matrix
        of order ``shards`` and their complements, or uniform random halves in complementary
        pairs.
    """

    level: float
    shards: int
    replicates: int
    seed: int
    encodings: tuple[tuple[float, float], ...]
    stress_by_rank: tuple[tuple[float, float], ...]
    distance_sd: np.ndarray | None
    bias: tuple[float, ...] = ()
    method: str = "percentile"
    heldout_pairs: int = 0
    heldout_splits: int = 0
    design: str = "random"


def check_shards(shards: int, estimator: str = DEFAULT_ESTIMATOR) -> int:
    """The one rule for ``--shards``: 0 (no intervals), or enough shards for the estimator's
    intervals (a cross-fitted replicate splits its half of the shards again: 4; plug-in: 2)."""
    k = check_int("shards", shards, 0)
    low = 4 if estimator == "crossfit" else 2
    if 0 < k < low:
        why = (
            " (a cross-fitted replicate splits its half of the shards again; 2 suffice with "
            "--estimator plugin)"
            if low == 4
            else ""
        )
        raise PosdiagError(f"'shards' must be 0 (no intervals) or an int >= {low}{why}; got {k}")
    return k


def check_level(level: float) -> float:
    """``level`` as a coverage in (0, 1), else ``'ci' must be a float in (0, 1); got ...``."""
    ok = isinstance(level, int | float) and not isinstance(level, bool)
    if not ok or not 0.0 < float(level) < 1.0:
        raise PosdiagError(f"'ci' must be a float in (0, 1); got {level!r}")
    return float(level)


def default_replicates(n_eff: int, shards: int = DEFAULT_SHARDS) -> int:
    """The replicates a bootstrap draws when none are asked for: :data:`DEFAULT_REPLICATES`;
    from :data:`BALANCED_FROM` positions :data:`BALANCED_MAX_REPLICATES`, or where a
    Hadamard matrix of order ``shards`` is built, ``min(BALANCED_MAX_REPLICATES, 2 (shards -
    1))``, balanced ones (38 for the default 20 shards; why: see posdiag._util.defaults and
    :func:`replicate_halves`)."""
    if n_eff < BALANCED_FROM:
        return DEFAULT_REPLICATES
    if shards >= 2 and hadamard(shards) is not None:
        return min(BALANCED_MAX_REPLICATES, 2 * (shards - 1))
    return BALANCED_MAX_REPLICATES


def interval_method(samples: int) -> str:
    """``"percentile"`` from :data:`PERCENTILE_FROM` replicates, else ``"t"``."""
    return "percentile" if samples >= PERCENTILE_FROM else "t"


def _interval(
    estimate: float,
    samples: np.ndarray,
    level: float,
    scale: float = 1.0,
    extra: tuple[float, int] = (0.0, 0),
) -> tuple[float, float]:
    """Interval of ``samples`` around ``estimate``, clipped to [0, 1].

    From :data:`PERCENTILE_FROM` samples the percentile interval ``estimate + scale (q - mean)``;
    with fewer, ``estimate +- scale t sd`` (``t`` the Student quantile with ``R - 1`` degrees of
    freedom, ``sd`` the samples' standard deviation): the 2.5% tail of 50 replicates is one or
    two values, while their sd is known to ~10% (the percentile interval of 200 replicates is
    to ~10% as well).

    Every replicate is a half-size corpus, so its distances carry a larger small-sample bias and
    the replicate distribution sits off the estimate by that bias; centring on the estimate keeps
    the spread (what the interval is for) and drops the shift. ``scale`` converts the spread of
    half-samples to the full sample's (see :func:`bootstrap_stress`).

    ``extra = (sd, dof)``, with ``dof > 0``: a second, independent source of spread (a held-out
    figure's outer splits), added to each side in quadrature as ``t_dof * sd``.
    """
    from scipy.special import stdtrit  # the Student quantile, without importing scipy.stats

    samples = np.asarray(samples, dtype=np.float64)
    alpha = (1.0 - level) / 2.0
    if interval_method(samples.size) == "percentile":
        lo, hi = np.quantile(samples, [alpha, 1.0 - alpha])
        mean = float(np.mean(samples))
        lo, hi = float(lo) - mean, float(hi) - mean
    else:
        hi = float(stdtrit(samples.size - 1, 1.0 - alpha)) * float(np.std(samples, ddof=1))
        lo = -hi
    lo, hi = scale * lo, scale * hi
    sd, dof = extra
    if dof > 0 and sd > 0.0:
        q = float(stdtrit(dof, 1.0 - alpha)) * sd
        lo, hi = -math.hypot(min(lo, 0.0), q), math.hypot(max(hi, 0.0), q)
    return (
        float(np.clip(estimate + lo, 0.0, 1.0)),
        float(np.clip(estimate + hi, 0.0, 1.0)),
    )


def _mds_rank(enc: Encoding) -> int | None:
    rank = enc.params.get("rank")
    return int(rank) if rank is not None and enc.name == f"mds-{rank}" else None


def _stress_against(b: np.ndarray, nb: float, b_e: np.ndarray, ne: float) -> float:
    if ne == 0.0:
        return 1.0
    cos = max(0.0, float(np.vdot(b, b_e))) / (nb * ne)
    return float(np.sqrt(max(0.0, 1.0 - cos * cos)))


def _tail_stress(lam: np.ndarray) -> np.ndarray:
    return stress_by_rank(lam)


# Percentile intervals from this many replicates (2.5 values in each 2.5% tail); fewer give a
# t interval from their sd (_interval).
PERCENTILE_FROM = 100
# Cross-fit splits inside each bootstrap replicate: the replicate's spread, not its mean, makes
# the interval, and 2 keep it calibrated (benchmarks/estimator.py measures it).
REPLICATE_SPLITS = 2
# Replicate Grams whose eigenvalues are computed in one stacked call (bytes of the stack).
EIG_BATCH_BYTES = 32 << 20
ENGINES = ("auto", "pattern", "scipy")
# From this n a replicate's rank stresses come from its top REPLICATE_RANKS eigenpairs (block
# subspace iteration warm-started from the full-data eigenvectors) and ||B||_F^2, not a full
# eigvalsh (O(n^3) per replicate). The rank intervals
# then cover ranks 1..REPLICATE_RANKS (the ranks a report shows) and every mds-r asked for.
PARTIAL_EIG_FROM = 512
REPLICATE_RANKS = 10
# Residual bound of the replicates' Ritz pairs, relative to ||B||_F: a rank stress then errs by
# ~1e-7 against eigvalsh, far below an interval's width.
REPLICATE_EIG_TOL = 1e-4
REPLICATE_EIG_ITER = 200
# Below this n the replicate loop runs on one BLAS thread, whatever the engine: its products,
# subspace passes and scoring are sequential and small, and two threads fought for the shared
# cores (load ~6 on 2 cores: n = 512 1.2-1.4 s a replicate with two, 0.25-0.44 s with one;
# n = 1,024 2.0-4.2 s against 1.0-1.7 s; the same intervals).
REPLICATE_THREADS_FROM = 2048


def bootstrap_stress(
    sharded: ShardedCounts,
    n_eff: int,
    encodings: Sequence[Encoding],
    estimates: Sequence[float],
    *,
    level: float = DEFAULT_LEVEL,
    replicates: int | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    estimator: str = "plugin",
    replicate_splits: int = REPLICATE_SPLITS,
    full_eigenvalues: np.ndarray | None = None,
    engine: str = "auto",
    full_mds: MDS | None = None,
    distances: bool = True,
    heldout_splits: int = 0,
) -> StressIntervals:
    """Intervals for the stress of each encoding and of each MDS rank on positions ``0..n_eff-1``.

    A replicate keeps ``h = floor(K/2)`` of the ``K`` shards, drawn without replacement
    (half-sampling), and recomputes ``D_H``, ``B_H`` and each stress; ``mds-r`` encodings are
    refitted on the replicate (their stress is the replicate's eigenvalue tail), the others are
    fixed geometries. Why half-samples and not the multinomial bootstrap: Hellinger distances
    carry a small-sample bias that depends on how many distinct sequences a replicate holds; a
    multinomial replicate holds a varying number (a shard drawn twice adds none), so that bias
    varied between replicates and swamped the spread of noise-dominated stresses (intervals up
    to 6x too wide, others 0.66x too narrow, measured on 30 independent subsamples). Every
    half-sample holds the same number of shards, so the bias is a constant shift, removed by
    centring. With ``f = h/K`` the spread of half-sample statistics is ``(1-f)/f`` times the
    full sample's variance (finite-population correction), so deviations are scaled by
    ``sqrt(f/(1-f))`` (1 for even ``K``).

    With ``estimator="crossfit"`` each replicate recomputes the cross-fitted geometry from its
    own shards (``replicate_splits`` random halves of the replicate's shards,
    posdiag.geometry.estimator),
    so the interval carries the noise of the estimator actually reported.

    From :data:`PERCENTILE_FROM` kept replicates the intervals are percentile intervals of the
    replicates (centred and scaled as above), with fewer a Student t interval from their sd
    (:func:`_interval`).

    Parameters
    ----------
    estimates : sequence of float
        Full-data stress of each encoding, where the intervals are centred.
    replicates : int, optional
        Replicates drawn; default :func:`default_replicates` of ``n_eff`` and the shards (200;
        from 128 positions 38 balanced half-samples for 20 shards, at most 50), drawn by
        :func:`replicate_halves`.
    progress : callable, optional
        Called after each replicate with (done, replicates).
    estimator : {"crossfit", "plugin"}
    replicate_splits : int
        Cross-fit splits per replicate.
    full_eigenvalues : ndarray of shape (n_eff,), optional
        Eigenvalues of the full-data ``B_H`` (centre of the rank intervals when ``full_mds`` is
        not given); default: those of the plug-in.
    engine : {"auto", "pattern", "scipy"}
        How each replicate's counts and products are formed: on the shards' fixed pattern
        (:class:`~posdiag.uncertainty._replicates.ShardPattern`) or with scipy selections and
        :mod:`posdiag.geometry._gram` products per split. ``auto``: the pattern while it fits its
        memory bounds, and from :data:`PARTIAL_EIG_FROM` positions the replicates' top
        eigenpairs only. ``scipy``: the loop as it was (scipy products, a full ``eigvalsh`` per
        replicate), the reference of tests and ``make bench``; same draws, same numbers to
        ~1e-14.
    full_mds : MDS, optional
        The full-data geometry (eigenvalues, eigenvectors; partial spectra allowed): the centre
        of the rank intervals, and the warm start of the
        replicates' partial eigensolver from :data:`PARTIAL_EIG_FROM` positions (a cold start
        without it). Default: the plug-in's, computed here when ``full_eigenvalues`` is not
        given either.
    distances : bool
        Also the bootstrap spread of every distance (:attr:`StressIntervals.distance_sd`):
        two ``n x n`` running sums and each replicate's implied distances, which no report
        prints (``False`` from :mod:`posdiag.reports.analysis`).
    heldout_splits : int
        Outer splits averaged in the ``estimates`` of the ``mds-r`` encodings when those are
        held-out figures (:func:`posdiag.geometry.estimator.split_half_summary`, cross-fit only); 0
        when they are in-sample tails.

    Notes
    -----
    Replicates come in complementary pairs: replicate ``2j+1`` holds the shards replicate
    ``2j`` left out (``h`` of them when ``K`` is odd). Each replicate is still a uniform
    half-sample. A held-out ``mds-r`` figure varies for two reasons: the data (what the
    replicates' in-sample tails spread by) and which shards its outer split put in which half,
    a random choice made given the data. From the true rank up, the second dominates (sd 0.0147
    against 0.0032 over 100 synthetic corpora, docs/theory.md), and intervals from the first
    alone covered 35-45% of the time. A pair of complementary replicates is such an outer split
    of the full data, so the sd of its held-out figure over the pairs, ``s``, over
    ``sqrt(heldout_splits)``, is that part; each side of the interval adds it in quadrature,
    with the Student quantile of ``pairs - 1`` degrees of freedom.
    """
    if sharded.k < 2:
        raise PosdiagError("intervals need a corpus counted into >= 2 shards (--shards)")
    level = check_level(level)
    n = check_int("n_eff", n_eff, 2)
    replicates = check_int(
        "replicates", default_replicates(n, sharded.k) if replicates is None else replicates, 2
    )
    estimator = check_choice("estimator", estimator, ESTIMATORS)
    replicate_splits = check_int("replicate_splits", replicate_splits, 1)
    engine = check_choice("engine", engine, ENGINES)
    heldout_splits = check_int("heldout_splits", heldout_splits, 0)
    k = sharded.k
    ranks_of = [_mds_rank(e) for e in encodings]
    # Replicate weights and samples, plus the running sums and one replicate's geometry, and
    # each table's dense B_E where the scorer keeps one (fastscore.DENSE_TABLE_MAX).
    tables = sum(
        1 for e, r in zip(encodings, ranks_of, strict=True) if e.profile is None and r is None
    )
    heldout_ranks = (
        sorted({r for r in ranks_of if r is not None})
        if heldout_splits and estimator == "crossfit"
        else []
    )
    require(
        f"{replicates:,} bootstrap replicates (--replicates) of {len(encodings)} encodings",
        # One more n x n: a pair's first replicate waits for its complement.
        8 * replicates * (k + len(encodings) + n) + 8 * (8 + tables + bool(heldout_ranks)) * n * n,
    )
    check_shards(k, estimator)
    # Each fixed encoding's side once: Toeplitz encodings share one diagonal-sum
    # pass per replicate, tables a vdot (or B JP past fastscore.DENSE_TABLE_MAX positions);
    # no n x n Gram per Toeplitz encoding.
    scorers = [
        None if r is not None else GramScorer(e) for e, r in zip(encodings, ranks_of, strict=True)
    ]
    h = k // 2
    rng = np.random.default_rng(seed)
    # A separate stream for the splits inside replicates: the replicate weights stay the ones
    # the plug-in path draws for the same seed.
    split_rng = np.random.default_rng([seed, 2])
    weights, design = replicate_halves(k, replicates, rng)
    scale = float(np.sqrt(h / (k - h)))
    if full_mds is None and full_eigenvalues is None:
        full_mds = mds_from_gram(gram_from_distances(_full_distances(sharded, n)))
    if full_mds is not None:
        # A partial spectrum (long contexts) carries ||B||_F^2: its tails stay exact.
        full_by_rank = full_mds.stress_by_rank()
    else:
        assert full_eigenvalues is not None
        full_by_rank = _tail_stress(np.sort(np.asarray(full_eigenvalues, dtype=np.float64))[::-1])
    enc_arrays, ranks, sd, used, pairs = _exact_replicates(
        sharded,
        n,
        ranks_of,
        scorers,
        weights,
        estimator,
        replicate_splits,
        split_rng,
        progress,
        engine,
        full_mds,
        distances,
        heldout_ranks,
    )
    if used < 2:
        raise PosdiagError(
            f"bootstrap: only {used} of {replicates} replicates kept every position supported; "
            "use fewer --shards or a larger --min-count"
        )
    if pairs.shape[0] < 2:
        pairs = pairs[:0]  # one pair has no spread: the held-out intervals stay in-sample
    n_ranks = min(full_by_rank.size, ranks.shape[1])
    return StressIntervals(
        level=level,
        shards=k,
        replicates=used,
        seed=seed,
        encodings=tuple(
            _interval(
                float(est),
                smp,
                level,
                scale,
                _split_spread(pairs, heldout_ranks, r, heldout_splits),
            )
            for est, smp, r in zip(estimates, enc_arrays, ranks_of, strict=True)
        ),
        stress_by_rank=tuple(
            _interval(float(full_by_rank[r]), ranks[:, r], level, scale) for r in range(n_ranks)
        ),
        distance_sd=sd,
        bias=tuple(
            float(np.mean(smp)) - float(est) for est, smp in zip(estimates, enc_arrays, strict=True)
        ),
        method=interval_method(used),
        heldout_pairs=pairs.shape[0],
        heldout_splits=heldout_splits if heldout_ranks else 0,
        design=design,
    )


DESIGNS = ("balanced", "random")


def replicate_halves(k: int, replicates: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """0/1 weights of ``replicates`` half-samples of ``k`` shards in complementary pairs, of
    shape (replicates, k), and the design that drew them (one of :data:`DESIGNS`).

    ``"balanced"`` (:func:`balanced_halves`) where a Hadamard matrix of order ``k`` is built
    and ``replicates <= 2 (k - 1)``, else ``"random"`` (:func:`paired_halves`).

    Why balanced: for a statistic linear in the shards, the spread of all ``C(k, k/2)``
    half-samples is the usual variance estimate with ``k - 1`` degrees of freedom, and random
    half-samples add Monte Carlo noise to it (25 random pairs: about as much again as the
    ``k - 1`` degrees of freedom carry at ``k = 20``). The ``k - 1`` non-trivial rows of a
    Hadamard matrix reproduce that spread exactly, with no Monte Carlo noise, and a random
    subset of them with less noise than as many random pairs: the 19 balanced pairs of 20
    shards spread the widths of the fixed encodings' 95% intervals less than 25 random pairs
    did (docs/theory.md, "Balanced half-samples").
    """
    weights = balanced_halves(k, replicates, rng)
    if weights is not None:
        return weights, "balanced"
    return paired_halves(k, replicates, rng), "random"


def balanced_halves(k: int, replicates: int, rng: np.random.Generator) -> np.ndarray | None:
    """0/1 weights of ``replicates`` balanced half-samples of ``k`` shards, of shape
    (replicates, k), or None where no Hadamard matrix of order ``k`` is built
    (:func:`posdiag.uncertainty._hadamard.hadamard`) or ``replicates > 2 (k - 1)``.

    Row ``2j`` keeps the ``k/2`` shards where row ``j`` of a Hadamard matrix (first row all
    ones, left out) is +1, row ``2j+1`` the other ``k/2``: the same pair layout as
    :func:`paired_halves`. Which ``ceil(replicates / 2)`` of the ``k - 1`` rows, and which
    column each shard takes, are seeded random choices, so every shard is equally likely in
    every row. All ``k - 1`` rows balance exactly: any two shards share a half in ``k/2 - 1``
    of them and are apart in ``k/2`` (columns of a Hadamard matrix are orthogonal).
    """
    h = hadamard(k) if k >= 2 else None
    if h is None or replicates > 2 * (k - 1):
        return None
    rows = h[1:][rng.permutation(k - 1)][:, rng.permutation(k)]
    j = np.arange(replicates)
    signs = rows[j // 2] * np.where(j % 2, -1, 1)[:, None]
    return (signs > 0).astype(np.float64)


def paired_halves(k: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """0/1 weights of ``replicates`` half-samples of ``k`` shards, of shape (replicates, k).

    Row ``2j`` keeps ``floor(k/2)`` shards drawn without replacement; row ``2j+1`` keeps the
    shards row ``2j`` left out (``floor(k/2)`` of them, drawn, when ``k`` is odd). Every row is
    a uniform half-sample; a pair is two disjoint halves, one outer split of the held-out
    ``mds-r`` fit (:func:`bootstrap_stress`, Notes).
    """
    h = k // 2
    weights = np.zeros((replicates, k))
    for j, row in enumerate(weights):
        if j % 2:
            rest = np.flatnonzero(weights[j - 1] == 0)
            row[rest if rest.size == h else rng.choice(rest, size=h, replace=False)] = 1.0
        else:
            row[rng.choice(k, size=h, replace=False)] = 1.0
    return weights


def _split_spread(
    pairs: np.ndarray, heldout_ranks: list[int], rank: int | None, splits: int
) -> tuple[float, int]:
    """``(sd, degrees of freedom)`` of a held-out ``mds-r`` headline over its outer splits: the
    sd of the complementary pairs' held-out figures over ``sqrt(splits)``; ``(0, 0)`` for any
    other encoding, or without pairs (:func:`bootstrap_stress` keeps none of a single one)."""
    if rank is None or rank not in heldout_ranks or not pairs.shape[0]:
        return 0.0, 0
    col = pairs[:, heldout_ranks.index(rank)]
    return float(np.std(col, ddof=1)) / float(np.sqrt(splits)), col.size - 1


Samples = tuple[list[np.ndarray], np.ndarray, np.ndarray | None, int, np.ndarray]


def _exact_replicates(
    sharded: ShardedCounts,
    n: int,
    ranks_of: list[int | None],
    scorers: list[GramScorer | None],
    weights: np.ndarray,
    estimator: str,
    replicate_splits: int,
    split_rng: np.random.Generator,
    progress: Callable[[int, int], None] | None,
    engine: str,
    full: MDS | None,
    distances: bool = True,
    heldout_ranks: Sequence[int] = (),
) -> Samples:
    """Every replicate recomputed: samples per encoding, rank samples (R, n-1), the spread of
    each distance, the number of replicates kept, and the held-out stress of ``heldout_ranks``
    of each complementary pair both of whose replicates were kept (P, len(heldout_ranks))."""
    enc_samples: list[list[float]] = [[] for _ in ranks_of]
    rank_samples: list[np.ndarray] = []
    pair_samples: list[list[float]] = []
    fit_top = max(heldout_ranks, default=0)
    # The first replicate of a pair (index, B, MDS coordinates) until its complement comes.
    waiting: tuple[int, np.ndarray, np.ndarray] | None = None
    # The spread of each distance: two n x n sums, and each cross-fitted replicate's implied
    # distances (an n x n pass a replicate), only when asked for.
    d_sum = np.zeros((n, n)) if distances else None
    d_sq = np.zeros((n, n)) if distances else None
    used = 0
    pattern: ShardPattern | None = None
    if engine != "scipy":
        try:
            total = sharded.counts.matrix
            cells = int(total.indptr[n]) if isinstance(total, sp.csr_matrix) else None
            pattern = ShardPattern(sharded.shards, n, cells)
        except PatternTooLarge:
            if engine == "pattern":
                raise
    if pattern is not None:
        grams = _pattern_replicates(
            pattern, n, weights, estimator, replicate_splits, split_rng, progress, distances
        )
    else:
        grams = _scipy_replicates(
            sharded,
            n,
            weights,
            estimator,
            replicate_splits,
            split_rng,
            progress,
            dense_dtype=np.float64 if engine == "scipy" else np.float32,
            distances=distances,
        )
    # Eigenvalues of several replicates in one stacked call (the same LAPACK routine per matrix,
    # without the per-call overhead that dominated at n = 76); memory bounded by EIG_BATCH_BYTES.
    # From PARTIAL_EIG_FROM positions only the top pairs the rank intervals show, warm-started.
    partial = n >= PARTIAL_EIG_FROM and engine != "scipy"  # scipy: the previous loop
    top = min(n - 1, max([REPLICATE_RANKS, *(r for r in ranks_of if r is not None)]))
    # Every full-data eigenvector there is, not only the ``top`` wanted: the solver's block
    # holds ``top`` + 8 (oversampling), and warm oversampled vectors converge in 5-6 passes
    # where random ones took 8-9.
    start = None if full is None else full.vectors
    batch = 1 if engine == "scipy" else max(1, EIG_BATCH_BYTES // (8 * n * n))
    pending: list[np.ndarray] = []

    def add_ranks(by_rank: np.ndarray) -> None:
        rank_samples.append(by_rank)
        for idx, rank in enumerate(ranks_of):
            if rank is not None:
                enc_samples[idx].append(float(by_rank[rank - 1]))

    def flush() -> None:
        if pending:
            for lam_desc in np.linalg.eigvalsh(np.stack(pending))[:, ::-1]:
                add_ranks(_tail_stress(lam_desc))
            pending.clear()

    with one_blas_thread() if n < REPLICATE_THREADS_FROM else contextlib.nullcontext():
        for j, b, d in grams:
            nb = float(np.linalg.norm(b))
            if nb == 0.0:
                continue
            if partial:
                lam, vecs, _, _ = top_eigenpairs(
                    b, top, tol=REPLICATE_EIG_TOL, start=start, max_iter=REPLICATE_EIG_ITER
                )
                kept = np.cumsum(np.clip(lam, 0.0, None) ** 2)
                add_ranks(np.sqrt(np.clip((nb * nb - kept) / (nb * nb), 0.0, 1.0)))
            else:
                pending.append(b)
            if fit_top:
                if not partial:
                    lam, vecs = _top_pairs(b, fit_top)
                x = vecs[:, :fit_top] * np.sqrt(np.clip(lam[:fit_top], 0.0, None))[None, :]
                if j % 2 == 0:
                    waiting = (j, b, x)
                elif waiting is not None and waiting[0] == j - 1:
                    ho = heldout_pair(waiting[1], waiting[2], b, x, heldout_ranks)
                    pair_samples.append([ho[r] for r in heldout_ranks])
                    waiting = None
            lags = diagonal_sums(b) if any(sc is not None for sc in scorers) else np.zeros(n)
            for idx, scorer in enumerate(scorers):
                if scorer is not None:
                    enc_samples[idx].append(scorer.stress(b, nb, lags))
            if d_sum is not None and d_sq is not None and d is not None:
                d_sum += d
                d_sq += d * d
            used += 1
            if len(pending) >= batch:
                flush()
        flush()
    pairs = np.array(pair_samples).reshape(len(pair_samples), len(heldout_ranks))
    if used < 2:
        return [np.array(x) for x in enc_samples], np.zeros((used, n - 1)), d_sum, used, pairs
    sd = None
    if d_sum is not None and d_sq is not None:
        mean = d_sum / used
        sd = np.sqrt(np.clip(d_sq / used - mean * mean, 0.0, None))
    return [np.array(x) for x in enc_samples], np.array(rank_samples), sd, used, pairs


def _top_pairs(b: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``top`` largest eigenpairs of symmetric ``b``, largest first (LAPACK's subset
    solver: a fraction of a full ``eigh`` for a few pairs)."""
    from scipy.linalg import eigh

    n = b.shape[0]
    # check_finite=False: a replicate's gram is made here, finite (a third of the call at n = 76).
    lam, vecs = eigh(b, subset_by_index=(n - top, n - 1), check_finite=False)
    return lam[::-1], vecs[:, ::-1]


# (index of the replicate in the weights, B, D or None) of each replicate kept.
ReplicateGrams = Iterator[tuple[int, np.ndarray, np.ndarray | None]]


def _pattern_replicates(
    pattern: ShardPattern,
    n: int,
    weights: np.ndarray,
    estimator: str,
    splits: int,
    split_rng: np.random.Generator,
    progress: Callable[[int, int], None] | None,
    distances: bool = True,
) -> ReplicateGrams:
    """``(B, D)`` of each replicate whose every position keeps support, on the fixed pattern of
    :class:`~posdiag.uncertainty._replicates.ShardPattern` (same draws, same numbers as
    :func:`_scipy_replicates` up to the order of additions)."""
    k = pattern.k
    for done, w in enumerate(weights, 1):
        j = done - 1
        if progress is not None:
            progress(done, len(weights))
        cw = pattern.counts(w)
        if np.any(pattern.supports(cw) <= 0):
            continue
        if estimator != "crossfit":
            d = hellinger_distances(pattern.csr(cw))
            yield j, gram_from_distances(d), d
            continue
        subset = np.flatnonzero(w)
        acc: np.ndarray | None = None
        made = 0
        for first in split_picks(subset.size, splits, split_rng):
            # The draw of posdiag.geometry.estimator.stacked_halves, checked split by split as
            # there.
            pick = np.zeros(k)
            pick[subset[first]] = 1.0
            ca = pattern.counts(pick)
            cb = cw - ca
            na, nb = pattern.supports(ca), pattern.supports(cb)
            if np.any(na <= 0) or np.any(nb <= 0):
                acc = None  # a position lost all its support in a quarter of the shards
                break
            x = pattern.product(pattern.sqrt_rows(ca, na), pattern.sqrt_rows(cb, nb))
            acc = x + x.T if acc is None else acc + x + x.T
            made += 1
        if acc is None:
            continue
        bc = acc / (2.0 * made)
        yield j, gram_from_bc(bc), implied_distances(bc) if distances else None


def _scipy_replicates(
    sharded: ShardedCounts,
    n: int,
    weights: np.ndarray,
    estimator: str,
    splits: int,
    split_rng: np.random.Generator,
    progress: Callable[[int, int], None] | None,
    dense_dtype: type[np.floating] = np.float64,
    distances: bool = True,
) -> ReplicateGrams:
    """The replicates as computed before :class:`~posdiag.uncertainty._replicates.ShardPattern`:
    scipy selections and :mod:`posdiag.geometry._gram` products per split (with float64 dense
    blocks: the
    reference of tests and `make bench`).

    ``dense_dtype=np.float32`` (long contexts, where the pattern does not fit): the products'
    dense BLAS block in float32, faster; a replicate's ``B_H`` then moves by
    ~1e-6 relative (BC entries by 2e-7), three orders below the interval widths.
    """
    k = sharded.k
    # Float64 (as the selection products made it): a ShardStack then shares its arrays.
    stack = stack_shards(sharded.shards, n)
    rows = np.tile(np.arange(n), k)
    cols = np.arange(k * n)
    # Long contexts: every sum of shards on their union pattern (posdiag.uncertainty._shardsum),
    # made once; the reference loop (float64) keeps the selection products it had.
    lists = ShardStack(stack, n) if dense_dtype is not np.float64 else None
    for done, w in enumerate(weights, 1):
        j = done - 1
        if progress is not None:
            progress(done, len(weights))
        if lists is not None:
            if np.any(lists.supports(w) <= 0):
                continue
        else:
            select = sp.csr_matrix(
                (np.repeat(w, n).astype(np.float64), (rows, cols)), shape=(n, k * n)
            )
            c = select @ stack
            if np.any(np.asarray(c.sum(axis=1)).ravel() <= 0):
                continue
        if estimator == "crossfit":
            try:
                halves = stacked_halves(
                    stack if lists is None else lists, n, np.flatnonzero(w), splits, split_rng
                )
            except PosdiagError:
                continue  # a position lost all its support in a quarter of the shards
            bc = crossfit_bc(halves, dtype=dense_dtype)
            yield j, gram_from_bc(bc), implied_distances(bc) if distances else None
        else:
            if lists is not None:
                c = lists.sum(np.flatnonzero(w))
            d = hellinger_distances(c)
            yield j, gram_from_distances(d), d


def _full_distances(sharded: ShardedCounts, n: int) -> np.ndarray:
    return hellinger_distances(sharded.counts.matrix[:n])


def noise_floor(
    counts: sp.spmatrix | sp.sparray | np.ndarray, *, repeats: int = 3, seed: int = 0
) -> np.ndarray:
    """Split-half noise floor of each position (docs/geometry.md section 8).

    The sequences reaching position ``i`` are split into two random halves and ``d_H`` is taken
    between the halves' distributions, averaged over ``repeats`` seeded splits. Splitting the
    sequences at one position is exactly a multivariate hypergeometric draw of ``floor(N_i/2)``
    of its ``N_i`` tokens, so the counts suffice: no second pass, and counts files work too.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)

    Returns
    -------
    ndarray of shape (n_positions,)
        NaN where ``N_i < 2``.
    """
    repeats = check_int("repeats", repeats, 1)
    c = sp.csr_matrix(counts)
    c.sum_duplicates()
    if c.shape[0] < VECTORISED_FLOOR_FROM:
        return _noise_floor_by_row(c, repeats, seed)
    rng = np.random.default_rng(seed)
    totals = np.asarray(c.sum(axis=1)).ravel().astype(np.int64)
    out = np.full(c.shape[0], np.nan)
    rows = np.flatnonzero(totals >= 2)
    if rows.size == 0:
        return out
    acc = np.zeros(rows.size)
    for _ in range(repeats):
        a = _half_draw(c, rows, totals[rows], rng)
        data = c.data.astype(np.float64)
        total = totals[rows].astype(np.float64)
        half = np.floor(total / 2.0)
        per_entry_row = np.repeat(np.arange(c.shape[0]), np.diff(c.indptr))
        keep = np.isin(per_entry_row, rows)
        pos = np.searchsorted(rows, per_entry_row[keep])
        b = data[keep] - a[keep]
        terms = np.sqrt(a[keep] / half[pos] * b / (total[pos] - half[pos]))
        bc = np.bincount(pos, weights=terms, minlength=rows.size)
        acc += np.sqrt(np.clip(1.0 - bc, 0.0, None))
    out[rows] = acc / repeats
    return out


def noise_floor_by_shards(
    shards: Sequence[sp.csr_matrix], n: int, *, repeats: int = 3, seed: int = 0
) -> np.ndarray:
    """:func:`noise_floor` with halves made of whole shards, i.e. of sampling units.

    Copies of a sequence share a shard (:mod:`posdiag.corpus.units`), so the two halves are
    independent samples even when the corpus repeats itself; a split of each position's tokens
    would put copies on both sides and understate the noise. ``repeats`` distinct random
    halves of the ``K`` shards (``floor(K/2)`` and the rest), seeded, are averaged.

    Returns
    -------
    ndarray of shape (n,)
        NaN where a half has no token at the position in every repeat.
    """
    from ..geometry.estimator import split_picks

    repeats = check_int("repeats", repeats, 1)
    k = len(shards)
    rows = [sp.csr_matrix(m[:n], dtype=np.float64) for m in shards]
    total = rows[0].copy()
    for m in rows[1:]:
        total = total + m
    rng = np.random.default_rng([seed, 3])
    acc = np.zeros(n)
    seen = np.zeros(n)
    for pick in split_picks(k, repeats, rng):
        a = rows[int(pick[0])].copy()
        for j in pick[1:]:
            a = a + rows[int(j)]
        b = sp.csr_matrix(total - a)
        na = np.asarray(a.sum(axis=1)).ravel()
        nb = np.asarray(b.sum(axis=1)).ravel()
        bc = np.asarray(a.multiply(b).sqrt().sum(axis=1)).ravel()
        ok = (na > 0) & (nb > 0)
        bc[ok] /= np.sqrt(na[ok] * nb[ok])
        acc[ok] += np.sqrt(np.clip(1.0 - bc[ok], 0.0, None))
        seen[ok] += 1
    out = np.full(n, np.nan)
    out[seen > 0] = acc[seen > 0] / seen[seen > 0]
    return out


def _noise_floor_by_row(c: sp.csr_matrix, repeats: int, seed: int) -> np.ndarray:
    """:func:`noise_floor` one row at a time (numpy's multivariate hypergeometric per row)."""
    rng = np.random.default_rng(seed)
    out = np.full(c.shape[0], np.nan)
    for i in range(c.shape[0]):
        row = c.data[c.indptr[i] : c.indptr[i + 1]].astype(np.int64)
        total = int(row.sum())
        if total < 2:
            continue
        half = total // 2
        acc = 0.0
        for _ in range(repeats):
            a = rng.multivariate_hypergeometric(row, half).astype(np.float64)
            b = row - a
            bc = float(np.sum(np.sqrt(a / half * b / (total - half))))
            acc += float(np.sqrt(max(0.0, 1.0 - bc)))
        out[i] = acc / repeats
    return out


def pair_floor(floor: np.ndarray) -> np.ndarray:
    """Expected ``d_H(i, j)`` of two full-size estimates of the *same* distribution.

    A half-size estimate has twice the squared error of a full one, so the split-half floor
    ``f_i`` satisfies ``f_i^2 ~ 4 e_i`` with ``e_i`` the full estimate's squared error, and two
    positions with identical distributions sit at ``sqrt(e_i + e_j) = sqrt(f_i^2 + f_j^2) / 2``
    (small-noise approximation; docs/theory.md).

    Returns
    -------
    ndarray of shape (n, n)
    """
    f2 = np.asarray(floor, dtype=np.float64) ** 2
    return np.sqrt(f2[:, None] + f2[None, :]) / 2.0


@dataclass(frozen=True)
class InformationNull:
    """``I(position; token)`` expected when position and token are independent.

    Attributes
    ----------
    mean, sd : float
        Mean and standard deviation, in bits, over ``repeats`` permuted tables: the tokens of the
        analysed positions shuffled across positions, keeping every support ``N_i`` and every
        token's total count.
    per_position : ndarray of shape (n_positions,)
        Mean ``KL(mu_i || mu_bar)`` of each position under the permutation, in bits.
    repeats : int
    """

    mean: float
    sd: float
    per_position: np.ndarray
    repeats: int


def information_null(
    counts: sp.spmatrix | sp.sparray | np.ndarray, *, repeats: int = 5, seed: int = 0
) -> InformationNull:
    """The level of the plug-in ``I`` on data where position carries no information.

    The plug-in estimate is biased upward (about ``(V-1)(n-1) / (2 N ln 2)`` bits for large
    samples, more with many rare types). Shuffling tokens across positions keeps both margins
    (supports and token totals), so the rare types stay as rare as they are: a permuted table is
    drawn row by row as a multivariate hypergeometric sample of ``N_i`` tokens from those not
    yet placed. Drawing rows from the pooled distribution instead would lose a third of the
    singletons and understate the bias on word-level corpora.

    Parameters
    ----------
    counts : sparse matrix or ndarray of shape (n_positions, vocab_size)
    """
    repeats = check_int("repeats", repeats, 2)
    c = sp.csr_matrix(counts)
    supports = np.asarray(c.sum(axis=1)).ravel().astype(np.int64)
    pooled = np.asarray(c.sum(axis=0)).ravel().astype(np.int64)
    seen = np.flatnonzero(pooled > 0)
    rng = np.random.default_rng(seed)
    if c.shape[0] * seen.size >= PERMUTED_NULL_FROM:
        # The same law as one shuffle of the token list, O(tokens) instead of O(n V) a table
        # (posdiag.uncertainty._permnull; another random stream, like the noise floor's from 1,024
        # rows).
        bits, per_mean = shuffled_null(supports, pooled[seen], repeats, rng)
        return InformationNull(float(bits.mean()), float(bits.std(ddof=1)), per_mean, repeats)
    totals = np.empty(repeats)
    per = np.zeros(c.shape[0])
    for r in range(repeats):
        left = pooled[seen].copy()
        idx_parts, val_parts, row_parts = [], [], []
        for i, n_i in enumerate(supports):
            if n_i == 0:
                continue
            x = rng.multivariate_hypergeometric(left, int(n_i))
            left -= x
            nz = np.flatnonzero(x)
            idx_parts.append(nz)
            val_parts.append(x[nz])
            row_parts.append(np.full(nz.size, i))
        sim = sp.csr_matrix(
            (np.concatenate(val_parts), (np.concatenate(row_parts), np.concatenate(idx_parts))),
            shape=(c.shape[0], seen.size),
        )
        totals[r], kl = positional_information(sim)
        per += kl
    return InformationNull(float(totals.mean()), float(totals.std(ddof=1)), per / repeats, repeats)
