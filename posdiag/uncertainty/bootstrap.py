"""How sure are the numbers? The shard bootstrap, the split-half noise floor and the noise level
of positional information (docs/geometry.md section 8; docs/theory.md, "Uncertainty").

Counts are additive, so counting a corpus into ``K`` seeded random shards (:attr:`Counts.shards`)
costs one pass and gives a resampling scheme: a replicate corpus is the sum of half the shards.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
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
from .._util.threads import small_blas
from .._util.validate import check_choice, check_int
from ..counts.core import Counts, is_counts_file
from ..counts.corpus import corpus_counts
from ..encodings import Encoding
from ..errors import PosdiagError
from ..geometry.core import (
    MDS,
    gram_from_distances,
    hellinger_distances,
    mds_from_gram,
    positional_information,
    stress_by_rank,
)
from ..geometry.estimator import ESTIMATORS, heldout_pair
from ..geometry.spectral import PARTIAL_FROM, top_eigenpairs
from ..scoring.scores import GramScorer, diagonal_sums
from ._hadamard import hadamard
from ._permnull import PERMUTED_NULL_FROM, shuffled_null
from ._replicates import ReplicateGrams, replicate_grams

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_REPLICATES",
    "DEFAULT_SHARDS",
    "BALANCED_FROM",
    "BALANCED_MAX_REPLICATES",
    "PERCENTILE_FROM",
    "REPLICATE_SPLITS",
    "InformationNull",
    "NO_SHARDS",
    "StressIntervals",
    "balanced_halves",
    "bootstrap_stress",
    "check_level",
    "corpus_counts_sharded",
    "default_replicates",
    "information_null",
    "interval_method",
    "noise_floor",
    "noise_floor_by_shards",
    "pair_floor",
    "paired_halves",
    "replicate_halves",
    "why_no_intervals",
]


NO_SHARDS = "the counts carry no shards (count the corpus with shards >= 2)"


def why_no_intervals(counts: Counts) -> str:
    """Why ``counts`` give no bootstrap intervals (:attr:`Counts.no_intervals`, or fewer than 2
    shards), or "" when they do."""
    if counts.no_intervals:
        return counts.no_intervals
    return "" if len(counts.shards) >= 2 else NO_SHARDS


def corpus_counts_sharded(
    corpus: str,
    *,
    shards: int = DEFAULT_SHARDS,
    seed: int = 0,
    **read: Any,
) -> Counts:
    """:func:`~posdiag.counts.corpus.corpus_counts` (every keyword in ``read``) with shards.

    ``seed`` seeds the shards and ``sample``. Counts files and token id files have no shards
    (nor has ``shards=0``); the reason is kept for the report (:attr:`Counts.no_intervals`).
    """
    k = check_shards(shards, "plugin")  # the estimator's own minimum: when intervals start
    counts = corpus_counts(corpus, shards=k, shard_seed=seed, seed=seed, **read)
    if counts.shards:
        return counts
    if k == 0:
        why = "--shards 0 was given"
    elif is_counts_file(corpus):
        why = "a counts file keeps no shards; pass the corpus itself for intervals"
    else:
        why = "token id files are counted without shards; intervals need a text corpus"
    return dataclasses.replace(counts, no_intervals=why)


@dataclass(frozen=True)
class StressIntervals:
    """Bootstrap intervals of every stress, from half-samples of the shards.

    Attributes
    ----------
    level : float
    shards, replicates, seed : int
        Shards, replicates kept (not those where a position lost all support), seed.
    encodings : tuple of (float, float)
        ``(low, high)`` for each encoding, in the order given.
    stress_by_rank : tuple of (float, float)
        ``(low, high)`` of the rank-r MDS stress, r = 1..n_eff-1.
    distance_sd : ndarray of shape (n_eff, n_eff), or None
        Bootstrap standard deviation of each ``d_H(i, j)``; None with ``distances=False``.
    bias : tuple of float
        Mean replicate stress minus the estimate, per encoding.
    method : {"percentile", "t"}
    heldout_pairs, heldout_splits : int
        Complementary pairs whose held-out ``mds-r`` figures widened those intervals, and the
        outer splits each held-out headline averages (0: none).
    design : {"balanced", "random"}
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
        why = " (a cross-fitted replicate splits its half of the shards again; 2 suffice with "
        why = f"{why}--estimator plugin)" if low == 4 else ""
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
    from :data:`BALANCED_FROM` positions :data:`BALANCED_MAX_REPLICATES`, at most ``2 (shards -
    1)`` where a Hadamard matrix of order ``shards`` is built (why: posdiag._util.defaults)."""
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
    """Interval of ``samples`` (R,) centred on ``estimate``, clipped to [0, 1] (docs/theory.md,
    "Percentile or t"); ``scale`` converts half-samples' spread to the full sample's, ``extra =
    (sd, dof)`` adds an independent spread in quadrature as ``t_dof sd``."""
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
    low, high = np.clip([estimate + lo, estimate + hi], 0.0, 1.0)
    return float(low), float(high)


def _mds_rank(enc: Encoding) -> int | None:
    rank = enc.params.get("rank")
    return int(rank) if rank is not None and enc.name == f"mds-{rank}" else None


# Percentile intervals from this many replicates (2.5 values in each 2.5% tail), else t.
PERCENTILE_FROM = 100
# Cross-fit splits inside a replicate: its spread makes the interval, and 2 keep it calibrated.
REPLICATE_SPLITS = 2
# Replicate Grams whose eigenvalues one LAPACK call computes (per-call overhead dominates).
_EIG_BATCH = 32
# From PARTIAL_FROM positions the rank intervals cover ranks 1..REPLICATE_RANKS and every mds-r.
REPLICATE_RANKS = 10
# Residual bound of the replicates' Ritz pairs relative to ||B||_F (rank stresses to ~1e-7).
REPLICATE_EIG_TOL = 1e-4
REPLICATE_EIG_ITER = 200


def bootstrap_stress(
    counts: Counts,
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
    full_mds: MDS | None = None,
    distances: bool = True,
    heldout_splits: int = 0,
    ranks: int | None = None,
) -> StressIntervals:
    """Intervals for the stress of each encoding and of each MDS rank on positions ``0..n_eff-1``.

    A replicate keeps ``h = floor(K/2)`` of the ``K`` shards (complementary pairs:
    docs/theory.md, "Uncertainty") and recomputes ``B_H`` and each stress (``mds-r`` refitted);
    deviations from the replicates' mean, scaled by ``sqrt(h / (K - h))``, are centred on the
    estimate (:func:`_interval`).

    Parameters
    ----------
    estimates : sequence of float
        Full-data stress of each encoding, where the intervals are centred.
    replicates : int, optional
        Default :func:`default_replicates`.
    progress : callable, optional
        Called after each replicate with (done, replicates).
    estimator : {"crossfit", "plugin"}
        With ``replicate_splits`` cross-fit splits per replicate.
    full_eigenvalues : ndarray of shape (n_eff,), optional
    full_mds : MDS, optional
        The full-data geometry, else its eigenvalues, else the plug-in's: the centres of the
        rank intervals (and the replicates' warm start).
    distances : bool
        Also :attr:`StressIntervals.distance_sd`.
    heldout_splits : int
        Outer splits averaged in the held-out ``mds-r`` ``estimates``, whose spread the
        complementary pairs add (:func:`_split_spread`); 0 for in-sample tails.
    ranks : int, optional
        Rank intervals for ranks ``1..ranks`` (and every ``mds-r``) only; default all below
        ``PARTIAL_FROM`` positions, else :data:`REPLICATE_RANKS`.
    """
    k, n, level, replicates = _checked(counts, n_eff, level, replicates)
    estimator = check_choice("estimator", estimator, ESTIMATORS)
    replicate_splits = check_int("replicate_splits", replicate_splits, 1)
    heldout_splits = check_int("heldout_splits", heldout_splits, 0)
    ranks_of = [_mds_rank(e) for e in encodings]
    fitted = sorted({r for r in ranks_of if r is not None})
    heldout_ranks = fitted if heldout_splits and estimator == "crossfit" else []
    _reserve(n, k, replicates, encodings, ranks_of, bool(heldout_ranks))
    check_shards(k, estimator)
    weights, design = replicate_halves(k, replicates, np.random.default_rng(seed))
    # The splits inside replicates draw from their own stream: the weights stay the plug-in's.
    split_rng = np.random.default_rng([seed, 2])
    full_by_rank, start = _full_by_rank(counts, n, full_mds, full_eigenvalues)
    if ranks is not None or n >= PARTIAL_FROM:
        top = REPLICATE_RANKS if ranks is None else check_int("ranks", ranks, 1)
        ranks = min(n - 1, max([top, *fitted]))
    scorers = [None if r else GramScorer(e) for e, r in zip(encodings, ranks_of, strict=True)]
    samples = _Samples(n, ranks_of, scorers, heldout_ranks, distances, ranks, start)
    grams = replicate_grams(
        counts.shards, n, weights, estimator, replicate_splits, split_rng, progress, distances,
        cells=_cells(counts.matrix, n),
    )  # fmt: skip
    enc_arrays, by_rank, sd, used, pairs = _exact_replicates(samples, grams, n, replicates)
    scale = float(np.sqrt((k // 2) / (k - k // 2)))
    spreads = [_split_spread(pairs, heldout_ranks, r, heldout_splits) for r in ranks_of]
    est_smp = list(zip(map(float, estimates), enc_arrays, strict=True))
    return StressIntervals(
        level=level,
        shards=k,
        replicates=used,
        seed=seed,
        encodings=tuple(
            _interval(e, smp, level, scale, x) for (e, smp), x in zip(est_smp, spreads, strict=True)
        ),
        stress_by_rank=tuple(
            _interval(float(full_by_rank[r]), by_rank[:, r], level, scale)
            for r in range(min(full_by_rank.size, by_rank.shape[1]))
        ),
        distance_sd=sd,
        bias=tuple(float(np.mean(smp)) - e for e, smp in est_smp),
        method=interval_method(used),
        heldout_pairs=pairs.shape[0],
        heldout_splits=heldout_splits if heldout_ranks else 0,
        design=design,
    )


def _checked(
    counts: Counts, n_eff: int, level: float, replicates: int | None
) -> tuple[int, int, float, int]:
    """Shards, positions, coverage and replicates of a bootstrap, checked."""
    k = len(counts.shards)
    if k < 2:
        raise PosdiagError("intervals need a corpus counted into >= 2 shards (--shards)")
    level = check_level(level)
    n = check_int("n_eff", n_eff, 2)
    drawn = default_replicates(n, k) if replicates is None else replicates
    return k, n, level, check_int("replicates", drawn, 2)


def _full_by_rank(
    counts: Counts, n: int, full_mds: MDS | None, full_eigenvalues: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The full data's rank stresses (the intervals' centres) and eigenvectors (the replicates'
    warm start), from ``full_mds``, else ``full_eigenvalues``, else the plug-in."""
    if full_mds is None and full_eigenvalues is None:
        full_mds = mds_from_gram(gram_from_distances(hellinger_distances(counts.matrix[:n])))
    if full_mds is not None:
        return full_mds.stress_by_rank(), full_mds.vectors  # a partial spectrum keeps ||B||_F^2
    lam = np.sort(np.asarray(full_eigenvalues, dtype=np.float64))[::-1]
    return stress_by_rank(lam), None


def _reserve(
    n: int,
    k: int,
    replicates: int,
    encodings: Sequence[Encoding],
    ranks_of: list[int | None],
    heldout: bool,
) -> None:
    """Refuse a bootstrap whose samples and ``n x n`` arrays (running sums, a replicate's
    geometry, each table's ``B_E``, a waiting held-out pair) would not fit in memory."""
    tables = sum(
        1 for e, r in zip(encodings, ranks_of, strict=True) if e.profile is None and r is None
    )
    require(
        f"{replicates:,} bootstrap replicates (--replicates) of {len(encodings)} encodings",
        8 * replicates * (k + len(encodings) + n) + 8 * (8 + tables + heldout) * n * n,
    )


def _cells(total: sp.spmatrix | sp.sparray | np.ndarray, n: int) -> int | None:
    """Stored cells of ``total``'s first ``n`` rows, when a csr knows them at once."""
    return int(total.indptr[n]) if isinstance(total, sp.csr_matrix) else None


def replicate_halves(k: int, replicates: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """0/1 weights (replicates, k) of half-samples of ``k`` shards in complementary pairs, and
    the design: ``"balanced"`` (:func:`balanced_halves`) where possible, else ``"random"``."""
    weights = balanced_halves(k, replicates, rng)
    if weights is not None:
        return weights, "balanced"
    return paired_halves(k, replicates, rng), "random"


def balanced_halves(k: int, replicates: int, rng: np.random.Generator) -> np.ndarray | None:
    """0/1 weights (replicates, k) of balanced half-samples (docs/theory.md, "Balanced
    half-samples"), or None without a Hadamard matrix of order ``k`` or past ``2 (k - 1)``.

    Row ``2j`` keeps the shards where row ``j`` of a Hadamard matrix (the ones row left out) is
    +1, row ``2j+1`` the others; rows and columns are permuted at random.
    """
    h = hadamard(k) if k >= 2 else None
    if h is None or replicates > 2 * (k - 1):
        return None
    rows = h[1:][rng.permutation(k - 1)][:, rng.permutation(k)]
    j = np.arange(replicates)
    signs = rows[j // 2] * np.where(j % 2, -1, 1)[:, None]
    return (signs > 0).astype(np.float64)


def paired_halves(k: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """0/1 weights (replicates, k) of random half-samples: row ``2j`` keeps ``floor(k/2)``
    shards, row ``2j+1`` the others (``floor(k/2)`` of them when ``k`` is odd)."""
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
    """``(sd, degrees of freedom)`` of a held-out ``mds-r`` headline over its outer splits, from
    the complementary pairs' figures; ``(0, 0)`` for other encodings or without pairs."""
    if rank is None or rank not in heldout_ranks or not pairs.shape[0]:
        return 0.0, 0
    col = pairs[:, heldout_ranks.index(rank)]
    return float(np.std(col, ddof=1)) / float(np.sqrt(splits)), col.size - 1


Samples = tuple[list[np.ndarray], np.ndarray, np.ndarray | None, int, np.ndarray]


class _Samples:
    """Each kept replicate's stresses, rank stresses, distance sums and the held-out stresses
    of each kept complementary pair. ``top``: rank stresses from the top ``top`` eigenpairs
    (warm-started from ``start``); None: every eigenvalue, in batches."""

    def __init__(
        self,
        n: int,
        ranks_of: list[int | None],
        scorers: list[GramScorer | None],
        heldout_ranks: Sequence[int],
        distances: bool,
        top: int | None,
        start: np.ndarray | None,
    ) -> None:
        self.n, self.ranks_of, self.scorers = n, ranks_of, scorers
        self.heldout_ranks, self.top, self.start = list(heldout_ranks), top, start
        self.enc: list[list[float]] = [[] for _ in ranks_of]
        self.by_rank: list[np.ndarray] = []
        self.pairs: list[list[float]] = []
        self.fit_top = max(heldout_ranks, default=0)
        # The first replicate of a pair (index, B, MDS coordinates) until its complement comes.
        self.waiting: tuple[int, np.ndarray, np.ndarray] | None = None
        self.d_sum = np.zeros((n, n)) if distances else None
        self.d_sq = np.zeros((n, n)) if distances else None
        self.used = 0
        self.pending: list[np.ndarray] = []

    def _add_ranks(self, by_rank: np.ndarray) -> None:
        self.by_rank.append(by_rank)
        for idx, rank in enumerate(self.ranks_of):
            if rank is not None:
                self.enc[idx].append(float(by_rank[rank - 1]))

    def flush(self) -> None:
        if self.pending:
            for lam_desc in np.linalg.eigvalsh(np.stack(self.pending))[:, ::-1]:
                self._add_ranks(stress_by_rank(lam_desc))
            self.pending.clear()

    def add(self, j: int, b: np.ndarray, d: np.ndarray | None) -> None:
        nb = float(np.linalg.norm(b))
        if nb == 0.0:
            return
        if self.top is not None:
            lam, vecs, _, _ = top_eigenpairs(
                b, self.top, tol=REPLICATE_EIG_TOL, start=self.start, max_iter=REPLICATE_EIG_ITER
            )
            kept = np.cumsum(np.clip(lam, 0.0, None) ** 2)
            self._add_ranks(np.sqrt(np.clip((nb * nb - kept) / (nb * nb), 0.0, 1.0)))
        else:
            self.pending.append(b)
        if self.fit_top:
            if self.top is None:
                lam, vecs = _top_pairs(b, self.fit_top)
            self._pair(
                j, b, vecs[:, : self.fit_top] * np.sqrt(np.clip(lam[: self.fit_top], 0, None))
            )
        lags = diagonal_sums(b) if any(sc is not None for sc in self.scorers) else np.zeros(self.n)
        for idx, scorer in enumerate(self.scorers):
            if scorer is not None:
                self.enc[idx].append(scorer.stress(b, nb, lags))
        if self.d_sum is not None and self.d_sq is not None and d is not None:
            self.d_sum += d
            self.d_sq += d * d
        self.used += 1
        if len(self.pending) >= _EIG_BATCH:
            self.flush()

    def _pair(self, j: int, b: np.ndarray, x: np.ndarray) -> None:
        if j % 2 == 0:
            self.waiting = (j, b, x)
        elif self.waiting is not None and self.waiting[0] == j - 1:
            ho = heldout_pair(self.waiting[1], self.waiting[2], b, x, self.heldout_ranks)
            self.pairs.append([ho[r] for r in self.heldout_ranks])
            self.waiting = None

    def result(self) -> Samples:
        self.flush()
        enc = [np.array(x) for x in self.enc]
        pairs = np.array(self.pairs).reshape(len(self.pairs), len(self.heldout_ranks))
        sd = None
        if self.d_sum is not None and self.d_sq is not None and self.used:
            mean = self.d_sum / self.used
            sd = np.sqrt(np.clip(self.d_sq / self.used - mean * mean, 0.0, None))
        return enc, np.array(self.by_rank), sd, self.used, pairs


def _exact_replicates(samples: _Samples, grams: ReplicateGrams, n: int, drawn: int) -> Samples:
    """Every replicate recomputed into ``samples``; at least 2 must keep every position, and a
    single complementary pair (no spread) is dropped."""
    with small_blas(n):
        for j, b, d in grams:
            samples.add(j, b, d)
        enc, by_rank, sd, used, pairs = samples.result()
    if used < 2:
        raise PosdiagError(
            f"bootstrap: only {used} of {drawn} replicates kept every position supported; "
            "use fewer --shards or a larger --min-count"
        )
    return enc, by_rank, sd, used, pairs if pairs.shape[0] >= 2 else pairs[:0]


def _top_pairs(b: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``top`` largest eigenpairs of symmetric ``b`` (n, n), largest first."""
    from scipy.linalg import eigh

    n = b.shape[0]
    lam, vecs = eigh(b, subset_by_index=(n - top, n - 1), check_finite=False)
    return lam[::-1], vecs[:, ::-1]


def noise_floor(
    counts: sp.spmatrix | sp.sparray | np.ndarray, *, repeats: int = 3, seed: int = 0
) -> np.ndarray:
    """Split-half noise floor of each position (docs/geometry.md section 8): ``d_H`` between
    two random halves of its ``N_i`` tokens (a multivariate hypergeometric draw), averaged over
    ``repeats`` seeded splits.

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
            bc = float(np.sum(np.sqrt(a / half * (row - a) / (total - half))))
            acc += float(np.sqrt(max(0.0, 1.0 - bc)))
        out[i] = acc / repeats
    return out


def noise_floor_by_shards(
    shards: Sequence[sp.csr_matrix], n: int, *, repeats: int = 3, seed: int = 0
) -> np.ndarray:
    """:func:`noise_floor` with halves of whole shards (sampling units: copies of a sequence
    share a shard, so they never sit on both sides), over ``repeats`` seeded halves.

    Returns
    -------
    ndarray of shape (n,)
        NaN where a half has no token at the position in every repeat.
    """
    from ..geometry.estimator import split_picks

    repeats = check_int("repeats", repeats, 1)
    k = len(shards)
    rows = [sp.csr_matrix(m[:n], dtype=np.float64) for m in shards]
    total = sum(rows[1:], rows[0])
    rng = np.random.default_rng([seed, 3])
    acc = np.zeros(n)
    seen = np.zeros(n)
    for pick in split_picks(k, repeats, rng):
        a = sum((rows[int(j)] for j in pick[1:]), rows[int(pick[0])])
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


def pair_floor(floor: np.ndarray) -> np.ndarray:
    """Expected ``d_H(i, j)`` (n, n) of two full-size estimates of the *same* distribution,
    ``sqrt(f_i^2 + f_j^2) / 2`` from the split-half floor ``f`` (n,) (docs/theory.md)."""
    f2 = np.asarray(floor, dtype=np.float64) ** 2
    return np.sqrt(f2[:, None] + f2[None, :]) / 2.0


@dataclass(frozen=True)
class InformationNull:
    """``I(position; token)`` expected when position and token are independent.

    ``mean``, ``sd``: over ``repeats`` permuted tables, in bits; ``per_position``
    (n_positions,): each position's mean ``KL(mu_i || mu_bar)`` under the permutation.
    """

    mean: float
    sd: float
    per_position: np.ndarray
    repeats: int


def information_null(
    counts: sp.spmatrix | sp.sparray | np.ndarray, *, repeats: int = 5, seed: int = 0
) -> InformationNull:
    """The level of the plug-in ``I`` (biased upward) on data where position carries no
    information: tokens permuted across positions, keeping both margins. Row by row, a
    multivariate hypergeometric sample of ``N_i`` of the tokens not yet placed; from
    :data:`PERMUTED_NULL_FROM` cells, one shuffle of the token list.

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
        # The same law by one shuffle of the token list (another random stream).
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
