"""From counts to answers: the corpus geometry, the MDS spectrum and every encoding's stress."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.defaults import DEFAULT_MIN_COUNT  # why 100: see there
from .._util.memory import require
from .._util.threads import small_blas
from .._util.userdocs import doc_ref
from .._util.validate import check_float, check_int
from ..corpus.units import UnitTally, duplicate_warning
from ..counts.core import Counts
from ..encodings import DEFAULT_DIM, DEFAULT_SET, Encoding, make_encoding, parse_encoding, with_dim
from ..encodings.families import family as family_of
from ..encodings.families import is_relative
from ..errors import PosdiagError
from ..geometry import estimator as estimator_module
from ..geometry.core import (
    MDS,
    classical_mds,
    parameter_saving,
    positional_information,
    reached_rank,
    shift_equivariance,
    smoothness,
    stress_by_rank,
    stress_floor,
    supported_prefix,
)
from ..geometry.estimator import (
    DEFAULT_ESTIMATOR,
    DEFAULT_SPLITS,
    HellingerEstimate,
    SplitHalf,
    SplitHalfSummary,
    distances_to_first,
    estimate_hellinger,
    negative_eigenvalue_note,
    pack_upper,
    split_half_grams,
    split_half_summary,
    unpack_upper,
)
from ..scoring.scores import (
    GramScorer,
    corpus_side,
    diagonal_sums,
    score_encoding,
    score_vectors_many,
)
from ..uncertainty.bootstrap import (
    DEFAULT_LEVEL,
    ShardedCounts,
    StressIntervals,
    bootstrap_stress,
    information_null,
    noise_floor,
    noise_floor_by_shards,
    pair_floor,
)
from .padding import _ranges as position_ranges
from .padding import padding_warnings

__all__ = [
    "DEFAULT_MIN_COUNT",
    "EFFECTIVE_RANK_TOLERANCES",
    "CorpusGeometry",
    "CorpusSummary",
    "Diagnosis",
    "EncodingScore",
    "InformationDiagnosis",
    "NoiseDiagnosis",
    "RankDiagnosis",
    "Recommendation",
    "ShiftDiagnosis",
    "Spectrum",
    "StressReport",
    "Uncertainty",
    "corpus_geometry",
    "corpus_summary",
    "diagnose",
    "geometry_report",
    "interval_scores",
    "score_encodings",
    "stress_report",
]

EFFECTIVE_RANK_TOLERANCES = (0.1, 0.05)
# Largest Hellinger distance below which all positions count as one distribution: rounding in
# 1 - BC is ~1e-16, which sqrt turns into distances of ~1e-8.
IDENTICAL_TOL = 1e-6
# A position whose own noise share (docs/theory.md) reaches this is flagged unstable.
UNSTABLE_SHARE = 0.5


@dataclass(frozen=True)
class CorpusSummary:
    """What was analysed: the corpus, how it was read, and which positions are covered.

    ``supports`` has shape (max_len,): sequences reaching each position. ``real_supports``, same
    shape, counts the real (non-pad) tokens there: in the model view every sequence is padded to
    ``max_len``, so ``supports`` is flat and ``min_count`` counts ``real_supports`` instead
    (``support_unit`` says which: ``"sequences"`` or ``"real tokens"``). ``dropped`` lists
    positions at or after ``n_eff`` that have any such support (reported, never mixed in).
    ``units`` is the duplicate and sampling-unit tally of a counted text corpus (None for token
    id files and older counts files); when present, ``min_count`` counts the distinct sampling
    units reaching each position (``units.unit_supports``, docs/geometry.md section 2b), so copies
    of a sequence do not make a position look better supported than it is.
    """

    source: str
    tokenizer: str
    view: str
    max_len: int
    min_count: int
    documents: int
    sequences: int
    tokens: int
    vocab_size: int
    vocab_seen: int
    n_eff: int
    supports: tuple[int, ...]
    dropped: tuple[int, ...]
    real_supports: tuple[int, ...] = ()
    support_unit: str = "sequences"
    units: UnitTally | None = None

    @property
    def counted_supports(self) -> tuple[int, ...]:
        """Sequences at each position (model view: real tokens), as ``check --min-support``
        counts them."""
        return self.real_supports or self.supports

    @property
    def unit_supports(self) -> tuple[int, ...]:
        """What ``min_count`` counts at each position: the distinct sampling units reaching it
        when known (docs/geometry.md 2b), else :attr:`counted_supports`."""
        base = self.counted_supports
        if self.units is None or len(self.units.unit_supports) != len(base):
            return base
        return tuple(min(a, b) for a, b in zip(base, self.units.unit_supports, strict=True))

    @property
    def real_share(self) -> tuple[float, ...]:
        """Share of real (non-pad) tokens among the sequences at each position (1 without
        padding; NaN where no sequence reaches)."""
        return tuple(
            r / s if s else math.nan
            for r, s in zip(self.counted_supports, self.supports, strict=True)
        )


@dataclass(frozen=True)
class CorpusGeometry:
    """The corpus side of every comparison, on positions ``0..n_eff-1``.

    Attributes
    ----------
    summary : CorpusSummary
    distances : ndarray of shape (n_eff, n_eff)
        Hellinger distances ``D_H`` of the estimate (for the cross-fit: the distances its
        ``B_H`` implies, see :func:`posdiag.geometry.estimator.implied_distances`).
    mds : MDS
        Eigen-decomposition of ``B_H`` (``mds.gram``); eigenvalues may be negative.
    warnings : tuple of str
        Numerical warnings raised while computing it.
    estimate : HellingerEstimate or None
        The headline estimate (``--estimator``, default the cross-fit).
    plain : HellingerEstimate or None
        The plug-in estimate, kept for the ``plain`` figure of every encoding.
    heldout : mapping of int to float
        Held-out stress of each ``mds-r`` fitted so far (filled by :func:`score_encodings`).
    """

    summary: CorpusSummary
    distances: np.ndarray
    mds: MDS
    warnings: tuple[str, ...] = ()
    estimate: HellingerEstimate | None = field(default=None, repr=False, compare=False)
    plain: HellingerEstimate | None = field(default=None, repr=False, compare=False)
    counts: Counts | None = field(default=None, repr=False, compare=False)
    # Filled on demand (held-out mds-r, noise energy); a cache, not part of what the geometry is.
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_eff(self) -> int:
        return self.summary.n_eff

    @property
    def estimator(self) -> str:
        return self.estimate.estimator if self.estimate is not None else "plugin"

    def split_half(self) -> SplitHalf | None:
        """Cross-fitted geometries of two independent halves of the data (cross-fit only).

        Computed on demand and cached: a few cross-fits that only held-out ``mds-r`` scores and
        the noise diagnostics need.
        """
        est = self.estimate
        if est is None or est.estimator != "crossfit" or self.counts is None:
            return None
        if "split_half" not in self._cache:
            self._cache["split_half"] = split_half_grams(
                self.counts.matrix,
                self.n_eff,
                shards=self.counts.shards,
                splits=est.splits,
                seed=est.seed,
            )
        half: SplitHalf = self._cache["split_half"]
        return half

    def has_split_half(self) -> bool:
        """Whether split-half grams exist for this geometry (a cross-fit with its counts)."""
        est = self.estimate
        return est is not None and est.estimator == "crossfit" and self.counts is not None

    def split_half_summary(
        self, ranks: Sequence[int] = (), *, noise: bool = False
    ) -> SplitHalfSummary | None:
        """What the split-half grams give (held-out ``mds-r`` of ``ranks``, noise energy, and with
        ``noise`` the pairs within their sampling error), cross-fit only, else None.

        Cached; the grams themselves are not kept
        (:func:`posdiag.geometry.estimator.split_half_summary`:
        at n = 16,384 each is 2.1 GB). Asking for more than the cache holds recomputes the
        summary for both (the same seeded halves, the same numbers).
        """
        if not self.has_split_half():
            return None
        est, counts = self.estimate, self.counts
        assert est is not None and counts is not None
        wanted = {int(r) for r in ranks}
        have: SplitHalfSummary | None = self._cache.get("split_half_summary")
        if have is not None:
            if wanted <= set(have.heldout) and (have.partners is not None or not noise):
                return have
            wanted |= set(have.heldout)
            noise = noise or have.partners is not None
            # Freed before the new one is made; a larger top rank refits (within the held-out
            # fits' tolerance, posdiag.geometry.heldout.HELDOUT_TOL).
            del self._cache["split_half_summary"], have
        packed = self._park_distances()
        try:
            summary = split_half_summary(
                counts.matrix,
                self.n_eff,
                self.mds.gram,
                shards=counts.shards,
                splits=est.splits,
                seed=est.seed,
                ranks=sorted(wanted),
                noise=noise,
                # B_H's lower triangle holds the first half's gram while the second is made.
                stash=self.mds.gram if packed is not None else None,
                max_pairs=MAX_PAIRS_LISTED,
            )
        finally:
            if packed is not None:
                self._unpark_distances(packed)
        self._cache["split_half_summary"] = summary
        return summary

    def _park_distances(self) -> np.ndarray | None:
        """``D_H``'s upper triangle packed (half an ``n x n`` array), ``D_H`` itself dropped
        from this geometry and its estimate, when the split-half grams are made one outer
        split at a time (long contexts): nothing reads ``D_H`` meanwhile, and with ``B_H``'s
        redundant lower triangle holding the first half's gram (:func:`split_half_summary`)
        the peak holds 2.5 ``n x n`` arrays there instead of 3 (1 GB at n = 16,384). None when
        not parked. :meth:`_unpark_distances` puts it back, bit for bit (``D_H`` is exactly
        symmetric: :func:`posdiag.geometry.estimator.implied_distances`)."""
        est, d, n = self.estimate, self.distances, self.n_eff
        if (
            est is None
            or d is not est.distances
            or estimator_module.outer_splits(n) > 1
            or d.shape != (n, n)
            or d.dtype != np.float64
        ):
            return None
        packed = pack_upper(d)
        # Frozen dataclasses: the one place their arrays are swapped, restored in a finally.
        object.__setattr__(self, "distances", None)
        object.__setattr__(est, "distances", None)
        return packed

    def _unpark_distances(self, packed: np.ndarray) -> None:
        d = unpack_upper(packed, self.n_eff)
        object.__setattr__(self, "distances", d)
        object.__setattr__(self.estimate, "distances", d)

    def heldout_stress(self, ranks: Sequence[int], *, noise: bool = False) -> dict[int, float]:
        """Held-out stress of ``mds-r`` for each rank (cross-fit only, else empty); ``noise``
        also prepares the noise diagnostics from the same split-half grams."""
        if not ranks:
            return {}  # before split_half: its grams cost four Gram products
        summary = self.split_half_summary(ranks, noise=noise)
        if summary is None:
            return {}
        return {int(r): summary.heldout[int(r)] for r in ranks}


def corpus_summary(counts: Counts, min_count: int = DEFAULT_MIN_COUNT) -> CorpusSummary:
    """What ``counts`` holds and which prefix ``0..n_eff-1`` has support >= ``min_count``."""
    min_count = check_int("min_count", min_count, 1)
    supports = counts.supports
    padded = counts.pad_id is not None
    # In the model view every sequence reaches every position: count real tokens instead.
    counted = counts.real_supports if padded else supports
    units = counts.units
    if units is not None and len(units.unit_supports) != counts.n:
        units = None  # not this matrix's positions (a hand-edited counts file): ignored
    # Copies of a sequence are one sampling unit: min_count counts units (docs/geometry.md 2b).
    by_unit = counted if units is None else np.minimum(counted, units.unit_supports)
    n_eff = supported_prefix(by_unit, min_count)
    meta = counts.meta
    nonzero = np.flatnonzero(by_unit > 0)
    last = int(nonzero[-1]) if nonzero.size else -1
    return CorpusSummary(
        source=str(meta.get("source", "<counts>")),
        tokenizer=str(meta.get("tokenizer", "?")),
        view=str(meta.get("view", "?")),
        max_len=counts.n,
        min_count=min_count,
        documents=int(meta.get("documents", 0)),
        sequences=int(meta.get("sequences", 0)),
        tokens=int(meta.get("tokens", 0)),
        vocab_size=counts.vocab_size,
        vocab_seen=counts.vocab_seen,
        n_eff=n_eff,
        supports=tuple(int(s) for s in supports),
        dropped=tuple(range(n_eff, last + 1)),
        real_supports=tuple(int(s) for s in counted) if padded else (),
        support_unit="real tokens" if padded else "sequences",
        units=units,
    )


# The cross-fit splits each position's tokens in two and each half again (split-half checks).
CROSSFIT_MIN_TOKENS = 4


def _two_positions_advice(summary: CorpusSummary, need: int) -> str:
    """What gives 2 analysed positions: the largest --min-count that does (min_count counts
    sampling units, :attr:`CorpusSummary.unit_supports`), when the estimator can use that
    little (it needs ``need`` tokens a position), else more data (and the plug-in, when it
    could use what there is)."""
    units, counted = summary.unit_supports, summary.counted_supports
    if len(units) < 2 or min(units[:2]) < 1:
        return "add data (fewer than 2 positions hold any token)"
    best = int(min(units[:2]))
    if min(counted[:2]) >= max(need, 1):
        return f"lower --min-count to {best} or add data"
    return (
        f"add data (the cross-fit needs >= {need} tokens at each position, positions 0 and 1 "
        f"have {counted[0]} and {counted[1]}), or use --estimator plugin with --min-count {best}"
    )


def corpus_geometry(
    counts: Counts | ShardedCounts,
    min_count: int = DEFAULT_MIN_COUNT,
    *,
    estimator: str = DEFAULT_ESTIMATOR,
    splits: int = DEFAULT_SPLITS,
    seed: int = 0,
    plain: bool = True,
    spectrum: bool = True,
) -> CorpusGeometry:
    """The estimated Hellinger geometry and its MDS on the supported prefix of ``counts``.

    Parameters
    ----------
    counts : Counts or ShardedCounts
        With shards (either kind) the cross-fit splits by sequence, otherwise by thinning.
    estimator : {"crossfit", "plugin"}
        ``crossfit`` (default) removes the noise bias of the plug-in (docs/geometry.md).
    splits, seed : int
        Random splits of the cross-fit and their seed.
    plain : bool
        Also compute the plug-in estimate beside a cross-fit (``CorpusGeometry.plain``, the
        ``plain`` figure of every score: ``stress --verbose`` and the JSON). False leaves it
        None, and the scores' ``plain`` NaN: one Gram product and one eigensolve fewer.
    spectrum : bool
        False: no eigensolve of the estimate (``mds`` holds the gram and ``||B_H||_F^2`` only,
        :func:`posdiag.geometry.estimator.no_spectrum`), for callers that use the gram and the
        distances alone (``inspect --corpus``).
    """
    if isinstance(counts, ShardedCounts):
        counts = counts.counts
    # The shards live on the counts too (ShardedCounts.shards are the same matrices, or empty
    # when intervals were declined with --shards 0; the geometry uses them either way).
    shards = counts.shards
    summary = corpus_summary(counts, min_count)
    n_eff, source = summary.n_eff, summary.source
    need = CROSSFIT_MIN_TOKENS if estimator == "crossfit" else 1
    if n_eff < 2:
        head = ", ".join(str(s) for s in summary.counted_supports[:5])
        what = "supports" if summary.support_unit == "sequences" else "real-token supports"
        if summary.unit_supports != summary.counted_supports:
            # Copies share a unit and count once (docs/geometry.md 2b): say so, with the figure.
            units = ", ".join(str(s) for s in summary.unit_supports[:5])
            head += f"; distinct sampling units: {units}"
        raise PosdiagError(
            f"{source}: fewer than 2 positions have support >= min_count={summary.min_count} "
            f"(n_eff={n_eff}; {what} of positions 0..4: {head}); "
            f"{_two_positions_advice(summary, need)}"
        )
    # D_H, B_H, the eigendecomposition and its workspace: about six n_eff x n_eff float arrays,
    # and a few per-column arrays of the vocabulary (totals, column selections).
    require(
        f"{source}: the geometry of {n_eff:,} positions x {counts.vocab_size:,} token ids",
        6 * 8 * n_eff * n_eff + 24 * counts.vocab_size,
    )
    plug: HellingerEstimate | None = None
    if estimator == "plugin" or plain or _maybe_identical(counts.matrix, n_eff):
        # Its eigenpairs serve the plug-in headline or the plain figures, not the check below.
        plug = estimate_hellinger(
            counts.matrix,
            n_eff,
            estimator="plugin",
            spectrum=spectrum if estimator == "plugin" else plain,
        )
        largest = float(plug.distances.max())
    else:
        largest = math.inf  # some position is >= IDENTICAL_TOL from position 0
    if largest < IDENTICAL_TOL:
        raise PosdiagError(
            f"{source}: all {n_eff} analysed positions have the same token distribution "
            f"(largest Hellinger distance {largest:.2g}); there is no positional geometry to fit"
        )
    tokens = np.asarray(summary.supports[:n_eff])
    if np.any(tokens < need):
        # min_count below the cross-fit's minimum: say which option to change, not the estimator.
        i = int(np.flatnonzero(tokens < need)[0])
        fixes = []
        if supported_prefix(np.asarray(summary.counted_supports), need) >= 2:
            fixes.append(f"raise --min-count to {need}")
        if i >= 2:
            fixes.append(f"lower --max-len to {i}")
        fixes.append("use --estimator plugin" if fixes else "add data or use --estimator plugin")
        raise PosdiagError(
            f"{source}: the cross-fitted geometry needs >= {need} tokens at every analysed "
            f"position; position {i} has {int(tokens[i])} (--min-count {summary.min_count} kept "
            f"positions 0..{n_eff - 1}): {', '.join(fixes[:-1])}"
            f"{', or ' if len(fixes) > 1 else ''}{fixes[-1]}"
        )
    if estimator == "plugin":
        assert plug is not None
        est = plug
        if spectrum:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                mds = classical_mds(plug.distances)
            notes = [str(w.message) for w in caught]
        else:
            mds, notes = plug.mds, []
    else:
        est = estimate_hellinger(
            counts.matrix,
            n_eff,
            shards=shards,
            estimator=estimator,
            splits=splits,
            seed=seed,
            spectrum=spectrum,
        )
        # Negative eigenvalues are expected here: the spectrum reports them in one line.
        mds, notes = est.mds, []
        if shards and est.method == "thinning":
            notes.append(
                f"{source}: a random half of the {len(shards)} shards left a position without "
                "tokens, so the cross-fit split each position's counts instead (thinning); "
                "fewer --shards or a larger --min-count keep the split by sequence"
            )
    notes += padding_warnings(summary)
    dup = duplicate_warning(summary.units, sharded=bool(shards) or estimator == "plugin")
    if dup is not None:
        notes.append(f"{source}: {dup}")
    if n_eff == 2:
        # Two points are always exactly embeddable on a line, so the comparison says nothing.
        notes.append(
            f"{source}: only 2 positions are analysed (n_eff=2), so every encoding that "
            "separates them has stress 0; lower --min-count or add data to compare encodings"
        )
    with_shards = dataclasses.replace(counts, shards=tuple(shards))
    return CorpusGeometry(summary, est.distances, mds, tuple(notes), est, plug, with_shards, {})


# Positions whose distance to position 0 is tried first by _maybe_identical (fractions of n).
_PROBES = (1.0, 0.5, 0.0)


def _maybe_identical(matrix: Any, n: int) -> bool:
    """False when some position's plug-in Hellinger distance to position 0 is at least
    :data:`IDENTICAL_TOL` (then the largest distance is too): the distances to position 0
    instead of the whole plug-in geometry. True means "check with the full plug-in"."""
    # A few positions first (the last, the middle, position 1): on any real corpus one of them
    # is far from position 0, and their rows cost O(row) instead of the O(nnz) merge of every
    # row. Their distances are those of the full pass up to rounding
    # (another summation order for small inputs), so twice the tolerance decides for sure.
    c = sp.csr_matrix(matrix)
    probes = sorted({min(n - 1, max(1, int(f * (n - 1)))) for f in _PROBES})
    if distances_to_first(c[[0, *probes]], len(probes) + 1).max() >= 2.0 * IDENTICAL_TOL:
        return False
    return bool(distances_to_first(c, n).max() < IDENTICAL_TOL)


@dataclass(frozen=True)
class Spectrum:
    """The MDS eigen spectrum and what it says about rank.

    ``stress_by_rank[r-1]`` is the in-sample stress of the rank-r MDS encoding (the eigenvalue
    tail, negative eigenvalues included); ``effective_rank`` maps a tolerance to the smallest
    rank reaching it, or None when none does (the tolerance is below ``floor``, the stress left
    by the negative eigenvalues). ``negative`` is the one-line note on the negative eigenvalues
    ("" when there are none); ``signal_rank`` counts the eigenvalues above the magnitude of the
    most negative one.

    At long contexts (``computed > 0``, posdiag.geometry.spectral) only the top ``computed``
    eigenvalues are known (``stress_by_rank`` is exact for those ranks, from ``||B_H||_F^2``); an
    effective rank of ``computed + 1`` then reads "more than ``computed``" (:func:`rank_text`), and
    ``floor`` is a lower bound, the share of the most negative eigenvalue alone (the exact floor
    needs every negative eigenvalue); ``signal_rank`` is exact when below ``computed``.
    """

    eigenvalues: tuple[float, ...]
    stress_by_rank: tuple[float, ...]
    effective_rank: Mapping[float, int | None]
    min_eigenvalue: float
    floor: float = 0.0
    signal_rank: int = 0
    negative: str = ""
    estimator: str = "plugin"
    computed: int = 0


def spectrum(
    geometry: CorpusGeometry, tolerances: Sequence[float] = EFFECTIVE_RANK_TOLERANCES
) -> Spectrum:
    mds = geometry.mds
    lam = mds.eigenvalues
    if mds.total is None:
        low = min(0.0, float(lam[-1]))
        return Spectrum(
            eigenvalues=tuple(float(x) for x in lam),
            stress_by_rank=tuple(float(x) for x in stress_by_rank(lam)),
            effective_rank={float(t): reached_rank(lam, t) for t in tolerances},
            min_eigenvalue=float(lam[-1]),
            floor=stress_floor(lam),
            signal_rank=int(np.sum(lam > abs(low))),
            negative=negative_eigenvalue_note(lam) or "",
            estimator=geometry.estimator,
        )
    return _partial_spectrum(geometry, tolerances)


def _partial_spectrum(geometry: CorpusGeometry, tolerances: Sequence[float]) -> Spectrum:
    """:func:`spectrum` of a partial MDS (the top ``k`` eigenpairs, ``||B||_F^2`` and the
    smallest eigenvalue): see :class:`Spectrum` for what is exact and what is bounded."""
    mds = geometry.mds
    lam = mds.eigenvalues
    k = int(lam.size)
    by_rank = mds.stress_by_rank()
    bottom = mds.min_eigenvalue
    known = not math.isnan(bottom)
    low = min(0.0, bottom) if known else 0.0
    total = float(mds.total or 0.0)
    floor = math.sqrt(low * low / total) if total > 0 else 0.0
    eff: dict[float, int | None] = {}
    for t in tolerances:
        eps = check_float("eps", t, 0.0, 1.0)
        hits = np.flatnonzero(by_rank <= eps)
        # Beyond the computed ranks: unreachable when even the most negative eigenvalue alone
        # leaves more than eps, else "more than k".
        eff[float(t)] = int(hits[0] + 1) if hits.size else (None if floor > eps else k + 1)
    return Spectrum(
        eigenvalues=tuple(float(x) for x in lam),
        stress_by_rank=tuple(float(x) for x in by_rank),
        effective_rank=eff,
        min_eigenvalue=float(mds.min_eigenvalue),
        floor=floor,
        signal_rank=int(np.sum(lam > abs(low))) if known else 0,
        negative=(
            negative_eigenvalue_note(np.append(lam, low), partial=True) or ""
            if known
            else f"only the top {k} eigenvalues were computed at n_eff = {geometry.n_eff:,} "
            "(the smallest, and so the stress floor, are not: "
            f"{doc_ref('geometry', 'Long contexts')})"
        ),
        estimator=geometry.estimator,
        computed=k,
    )


def rank_text(rank: int | None, floor: float, computed: int = 0) -> str:
    """An effective rank for reports: the number, "not reached (floor 0.123)", or, past the
    top ``computed`` eigenvalues of a partial spectrum, "> 128" (floor then a lower bound)."""
    if rank is None:
        return f"not reached (floor {'>= ' if computed else ''}{floor:.3f})"
    return f"> {computed}" if computed and rank > computed else str(rank)


@dataclass(frozen=True)
class EncodingScore:
    """One row of the stress table (docs/geometry.md section 4); ``spearman`` may be NaN.

    ``ci_low``/``ci_high`` bound ``stress`` with the shard bootstrap (docs/theory.md); NaN when
    no interval was computed. ``plain`` is the stress against the plug-in geometry (the old
    headline, biased by sampling noise); ``in_sample`` is, for ``mds-r`` scored held-out, the
    optimistic in-sample eigenvalue tail (NaN otherwise).
    """

    name: str
    params: Mapping[str, Any]
    stress: float
    raw: float
    kruskal: float
    spearman: float
    n_params: int
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    plain: float = float("nan")
    in_sample: float = float("nan")
    preset: str = ""

    @property
    def label(self) -> str:
        """The row's name: ``learned-random (gpt2)`` for a row from a model preset."""
        return f"{self.name} ({self.preset})" if self.preset else self.name


# An encoding as asked for: "NAME[:k=v,...]", (name, params), or (name, params, preset) for the
# rows of a model preset (see posdiag.encodings.preset_specs).
EncodingRequest = str | tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]


def _resolve(
    specs: Sequence[EncodingRequest] | None, n_eff: int, dim: int | None = None
) -> list[tuple[str, dict[str, Any], str]]:
    """(name, params, preset) of every encoding; ``dim`` sets the model dimension of each
    encoding that has one and was not given it explicitly."""
    if specs is None:
        out = [parse_encoding(s) for s in DEFAULT_SET]
        # The default MDS ranks only make sense below n_eff and within the model dimension.
        top = min(n_eff - 1, dim if dim is not None else n_eff)
        out = [(nm, p) for nm, p in out if nm != "mds" or p["rank"] <= top]
        return [(nm, with_dim(nm, p, dim), "") for nm, p in out]
    resolved = []
    for s in specs:
        if isinstance(s, str):
            nm, p = parse_encoding(s)
            preset = ""
        else:
            nm, p, preset = s[0], dict(s[1]), str(s[2]) if len(s) > 2 else ""
        resolved.append((nm, with_dim(nm, p, dim), preset))
    return resolved


def _scored(
    geometry: CorpusGeometry,
    specs: Sequence[EncodingRequest] | None,
    dim: int | None = None,
    *,
    noise: bool = False,
) -> list[tuple[EncodingScore, Encoding]]:
    """Every encoding scored, best first; ``noise``: the report also prints the noise
    diagnostics, whose split-half sums are then made with the held-out ones (one pass, and the
    split-half grams are gone before the encodings are scored)."""
    with small_blas(geometry.n_eff):  # posdiag._util.threads: small dense work, one BLAS thread
        return _score_each(geometry, specs, dim, noise)


def _score_each(
    geometry: CorpusGeometry, specs: Sequence[EncodingRequest] | None, dim: int | None, noise: bool
) -> list[tuple[EncodingScore, Encoding]]:
    resolved = _resolve(specs, geometry.n_eff, dim)
    encs = [
        (make_encoding(nm, geometry.n_eff, p, mds=geometry.mds), preset)
        for nm, p, preset in resolved
    ]
    b_h = geometry.mds.gram
    plain = geometry.plain
    ranks = [int(e.params["rank"]) for e, _ in encs if _is_mds(e)]
    heldout = geometry.heldout_stress(ranks, noise=noise)
    # The corpus side of every score once; each encoding then costs O(n log n) (Toeplitz) or
    # O(n^2 d) (vectors) instead of two n x n matrices and a sort of n^2/2 pairs.
    side = corpus_side(geometry.distances, b_h)
    # The mds-r tables are the leading columns of one another: scored together, in one pass.
    family = [e for e, _ in encs if _is_mds(e) and e.profile is None and e.vectors is not None]
    together = score_vectors_many(side, b_h, [e.vectors for e in family if e.vectors is not None])
    batched = {id(e): m for e, m in zip(family, together, strict=True)}
    plain_lags = None
    out = []
    for enc, preset in encs:
        if id(enc) in batched:
            m = batched[id(enc)]
        else:
            m = score_encoding(side, geometry.distances, b_h, enc)
        headline, in_sample = m.stress, float("nan")
        rank = int(enc.params["rank"]) if _is_mds(enc) else None
        if rank is not None and rank in heldout:
            # Fitted to the noise of the very estimate it is scored on: show the held-out
            # figure (docs/geometry.md, "mds-r is scored held-out").
            headline, in_sample = heldout[rank], m.stress
        if plain is geometry.estimate or geometry.estimator == "plugin":
            plain_stress = m.stress
        elif plain is None:
            plain_stress = math.nan  # not asked for (corpus_geometry(plain=False))
        elif rank is not None:
            plain_stress = float(plain.mds.stress_by_rank()[rank - 1])
        else:
            if plain_lags is None:
                plain_lags = diagonal_sums(plain.gram)
            plain_norm = float(np.linalg.norm(plain.gram))
            plain_stress = GramScorer(enc).stress(plain.gram, plain_norm, plain_lags)
        score = EncodingScore(
            enc.name,
            dict(enc.params),
            headline,
            m.raw,
            m.kruskal,
            m.spearman,
            enc.n_params,
            plain=plain_stress,
            in_sample=in_sample,
            preset=preset,
        )
        out.append((score, enc))
    # Stable sort: ties keep the order the user asked for.
    return sorted(out, key=lambda se: (se[0].stress, math.isnan(se[0].spearman)))


def _is_mds(enc: Encoding) -> bool:
    rank = enc.params.get("rank")
    return rank is not None and enc.name == f"mds-{rank}"


def score_encodings(
    geometry: CorpusGeometry,
    specs: Sequence[EncodingRequest] | None = None,
    *,
    dim: int | None = None,
) -> list[EncodingScore]:
    """Score encodings against the corpus geometry, best (lowest stress) first.

    Parameters
    ----------
    specs : sequence, optional
        ``"NAME[:key=value,...]"`` strings, ``(name, params)`` pairs or ``(name, params,
        preset)`` triples (the row then names its model preset); default
        :data:`~posdiag.encodings.DEFAULT_SET`.
    dim : int, optional
        Model dimension of every encoding that has one (``d`` / ``dim``) and was not given it
        explicitly; None keeps the registry default (:data:`~posdiag.encodings.DEFAULT_DIM`).
    """
    return [s for s, _ in _scored(geometry, specs, dim)]


@dataclass(frozen=True)
class Uncertainty:
    """How the intervals were made, and which positions are too thinly supported to trust.

    Attributes
    ----------
    level : float
        Coverage of every interval (NaN-bounded scores when ``shards == 0``).
    shards, replicates, seed : int
        Shards re-weighted (0: no intervals), bootstrap replicates used, seed.
    stress_by_rank : tuple of (float, float)
        Interval of the rank-r MDS stress, r = 1..n_eff-1 (empty without shards).
    noise_floor : tuple of float
        Split-half ``d_H`` of each position 0..n_eff-1 (empty when a cross-fit report was asked
        for without details, ``stress_report(details=False)``: its unstable positions come from
        the split-half grams, and only ``--verbose`` and the JSON show the floor).
    unstable : tuple of int
        Positions too thinly supported for a stable estimate: within the noise floor of at least
        half of the other positions, or with at least half of their squared distance to the
        centroid due to sampling noise.
    note : str
        Why there are no intervals, when there are none.
    method : str
        How the intervals were read from the replicates: ``"percentile"`` (from 100
        replicates) or ``"t"`` (a Student t interval from their sd, fewer replicates: the
        default from 128 positions); empty without intervals.
    heldout_pairs : int
        Complementary replicate pairs whose held-out ``mds-r`` figures also widened the held-out
        ``mds-r`` intervals, by the spread the figure owes to its random outer split (0: no
        held-out ``mds-r``; :func:`posdiag.uncertainty.bootstrap.bootstrap_stress`, Notes).
    heldout_splits : int
        Outer splits each held-out ``mds-r`` headline averages
        (:func:`posdiag.geometry.estimator.outer_splits`); 0 without a held-out ``mds-r``. With
        ``heldout_pairs`` 0 its intervals are the in-sample replicates' only, too narrow.
    design : str
        How the half-samples were drawn: ``"balanced"`` (rows of a Hadamard matrix and their
        complements) or ``"random"`` (:func:`posdiag.uncertainty.bootstrap.replicate_halves`); empty
        without intervals.
    bias : tuple of float
        Bootstrap bias of each encoding's stress (mean replicate minus estimate), in the order of
        the report's encodings; positive values mean sampling noise inflates that stress.
    """

    level: float
    shards: int
    replicates: int
    seed: int
    stress_by_rank: tuple[tuple[float, float], ...]
    noise_floor: tuple[float, ...]
    unstable: tuple[int, ...]
    note: str = ""
    bias: tuple[float, ...] = ()
    method: str = ""
    heldout_pairs: int = 0
    heldout_splits: int = 0
    design: str = ""

    def describe(self) -> str:
        """``95% shard bootstrap (20 shards, 200 replicates, seed 0)``, naming a balanced design,
        a t interval, the outer splits of the held-out ``mds-r`` and the pairs that widened
        their intervals."""
        how = ", t interval from their sd" if self.method == "t" else ""
        kind = " balanced" if self.design == "balanced" else ""
        splits = (
            f"mean of {self.heldout_splits} outer splits"
            if self.heldout_splits > 1
            else "1 outer split"
        )
        if self.heldout_pairs:
            pairs = (
                f"; held-out mds-r: {splits}, spread also from {self.heldout_pairs} replicate pairs"
            )
        elif self.heldout_splits:
            # Rare (most replicates skipped), but the interval is then too narrow: say so.
            pairs = (
                f"; held-out mds-r: {splits}, spread from "
                "in-sample replicates only (fewer than 2 replicate pairs kept: too narrow)"
            )
        else:
            pairs = ""
        return (
            f"{self.level:.0%} shard bootstrap ({self.shards} shards, {self.replicates}{kind} "
            f"replicates{how}, seed {self.seed}{pairs})"
        )


def _indistinguishable(d_h: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Boolean (n, n) mask of pairs ``i != j`` with ``d_H(i, j) <= pair floor``."""
    mask = d_h <= pair_floor(floor)
    np.fill_diagonal(mask, False)
    return np.asarray(mask)


def _gram_sq_distances(gram: np.ndarray) -> np.ndarray:
    """Squared distances ``B_ii + B_jj - 2 B_ij`` a Gram matrix implies, shape (n, n)."""
    diag = np.diag(gram)
    return np.asarray(diag[:, None] + diag[None, :] - 2.0 * gram)


# Rows per block of the noise bounds: each block holds a few (rows, n) float64 arrays, so the
# bounds need no n x n temporary (2.1 GB each at n = 16,384).
NOISE_BLOCK_BYTES = 64 << 20


def _row_blocks(n: int) -> list[slice]:
    rows = max(1, NOISE_BLOCK_BYTES // (8 * n))
    return [slice(lo, min(n, lo + rows)) for lo in range(0, n, rows)]


def _sq_distance_rows(gram: np.ndarray, diag: np.ndarray, rows: slice) -> np.ndarray:
    """Rows ``rows`` of :func:`_gram_sq_distances` (the same arithmetic), shape (rows, n)."""
    return np.asarray(diag[rows, None] + diag[None, :] - 2.0 * gram[rows])


def _pairs_within_noise(geo: CorpusGeometry, floor: np.ndarray) -> np.ndarray:
    """Boolean (n, n) mask of pairs ``i != j`` whose distance sampling noise could explain.

    Plug-in: ``d_H(i, j)`` at or below the pair floor (two estimates of one distribution sit
    that far apart). Cross-fit: that bias is gone, so the squared distance is compared with its
    own sampling error, bounded from two independent halves of the data as for
    :func:`posdiag.geometry.heldout.noise_energy_rows` (rms of ``(d2_P - d2_Q) / 2``).
    """
    half = geo.split_half()
    if half is None:
        return _indistinguishable(geo.distances, floor)
    gram = geo.mds.gram
    n = gram.shape[0]
    # d2_P - d2_Q is the squared-distance map of B_P - B_Q; its diagonal is diag(P) - diag(Q).
    diffs = [(p, q, np.diag(p) - np.diag(q)) for p, q in half.grams]
    diag = np.diag(gram)
    mask = np.empty((n, n), dtype=bool)
    for rows in _row_blocks(n):
        acc = np.zeros((rows.stop - rows.start, n))
        for p, q, dd in diffs:
            d = dd[rows, None] + dd[None, :] - 2.0 * np.subtract(p[rows], q[rows])
            d *= d
            acc += d
        acc /= 4.0 * len(diffs)
        np.sqrt(acc, out=acc)
        mask[rows] = _sq_distance_rows(gram, diag, rows) <= acc
    np.fill_diagonal(mask, False)
    return mask


def _noise_pairs(
    geo: CorpusGeometry, floor: np.ndarray
) -> tuple[np.ndarray, int, tuple[tuple[int, int], ...]]:
    """What the report shows of :func:`_pairs_within_noise`'s mask, without it for a cross-fit:
    the partners of each position (its row sums, shape (n,)), the pairs ``i < j`` in it, and
    the first :data:`MAX_PAIRS_LISTED` of them in row-major order."""
    summary = geo.split_half_summary(noise=True)
    if summary is not None and summary.partners is not None:
        return summary.partners, summary.within, summary.first_pairs
    n = geo.n_eff
    mask = _pairs_within_noise(geo, floor)
    # Only the listed pairs become Python tuples (at n = 4,096 a noisy geometry has millions).
    upper = np.triu(mask, k=1)
    first = np.flatnonzero(upper.ravel())[:MAX_PAIRS_LISTED]
    pairs = tuple((int(k // n), int(k % n)) for k in first)
    return mask.sum(axis=1), int(np.count_nonzero(upper)), pairs


def _noise_gram_diagonal(floor: np.ndarray) -> np.ndarray:
    """The diagonal of ``J diag(e) J`` with ``e_i = floor_i^2 / 4``: what sampling noise adds to
    ``B_H`` (its trace is the sum of this), without the ``n x n`` matrix.

    Noise adds about ``e_i + e_j`` to every squared distance (docs/theory.md, "Noise share");
    ``(J diag(e) J)_ii = e_i (1 - 2/n) + sum(e) / n^2``.
    """
    e = np.nan_to_num(np.asarray(floor, dtype=np.float64)) ** 2 / 4.0
    n = e.size
    return np.asarray(e * (1.0 - 2.0 / n) + e.sum() / (n * n))


def _position_noise_share(gram: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Share of each position's squared distance to the centroid (``B_H[i, i]``) due to noise."""
    diag = np.diag(gram)
    noise = _noise_gram_diagonal(floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(diag > 0, noise / diag, np.inf)


def _noise_shares(geo: CorpusGeometry, floor: np.ndarray) -> tuple[float, np.ndarray]:
    """Share of the geometry due to sampling noise: in total and per position.

    Plug-in: the bias ``J diag(e) J`` noise adds, as a share of ``tr(B_H)`` and of each
    ``B_H[i, i]``. Cross-fit: that bias is gone; what is left is the sampling error of each
    entry, bounded from two independent halves of the data
    (:func:`posdiag.geometry.heldout.noise_energy_rows`), as a share of ``||B_H||_F^2`` and
    of each row's squared norm (the quantities stress is made of).
    """
    gram = geo.mds.gram
    summary = geo.split_half_summary()
    if summary is None:
        share = float(np.sum(_noise_gram_diagonal(floor)) / np.trace(gram))
        return share, _position_noise_share(gram, floor)
    energy = summary.energy_rows
    rows = np.concatenate([np.sum(gram[b] * gram[b], axis=1) for b in _row_blocks(len(gram))])
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(rows > 0, energy / rows, np.inf)
    return float(energy.sum() / rows.sum()), per


def _unstable(partners: np.ndarray, share: np.ndarray) -> tuple[int, ...]:
    """Positions within the floor of at least half of the others, or mostly noise themselves.

    ``partners`` (n,): for each position, the others within its floor (:func:`_noise_pairs`).
    """
    n = partners.shape[0]
    bad = (partners * 2 >= n - 1) | (share >= UNSTABLE_SHARE)
    return tuple(int(i) for i in np.flatnonzero(bad))


def interval_scores(
    sharded: ShardedCounts,
    n_eff: int,
    scored: Sequence[tuple[EncodingScore, Encoding]],
    level: float,
    replicates: int | None,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
    *,
    estimator: str = "plugin",
    full_eigenvalues: np.ndarray | None = None,
    full_mds: MDS | None = None,
) -> tuple[list[EncodingScore], StressIntervals]:
    """Each score with its shard-bootstrap interval (``ci_low``/``ci_high``), and the intervals.

    ``scored`` pairs each score with the encoding it was computed from, on positions
    ``0..n_eff-1``; ``sharded`` needs at least 2 shards. ``estimator`` and
    ``full_eigenvalues`` are those of the geometry scored (see
    :func:`~posdiag.uncertainty.bootstrap.bootstrap_stress`). Held-out ``mds-r`` scores (those with
    an ``in_sample`` figure) get the spread of their outer splits as well.
    """
    iv = bootstrap_stress(
        sharded,
        n_eff,
        [e for _, e in scored],
        [s.stress for s, _ in scored],
        level=level,
        replicates=replicates,
        seed=seed,
        progress=progress,
        estimator=estimator,
        full_eigenvalues=full_eigenvalues,
        full_mds=full_mds,
        distances=False,
        heldout_splits=(
            estimator_module.outer_splits(n_eff)
            if any(not math.isnan(s.in_sample) for s, _ in scored)
            else 0
        ),
    )
    scores = [
        dataclasses.replace(s, ci_low=lo, ci_high=hi)
        for (s, _), (lo, hi) in zip(scored, iv.encodings, strict=True)
    ]
    return scores, iv


def _with_intervals(
    geometry: CorpusGeometry,
    counts: Counts | ShardedCounts,
    scored: list[tuple[EncodingScore, Encoding]],
    level: float,
    replicates: int | None,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
    *,
    details: bool = True,
) -> tuple[list[EncodingScore], Uncertainty]:
    n = geometry.n_eff
    # Plain counts that were counted with shards still get their intervals.
    sharded = counts if isinstance(counts, ShardedCounts) else ShardedCounts(counts, counts.shards)
    # A cross-fit's unstable positions come from the split-half grams; without details the
    # per-position floor would only fill the JSON's noise_floor (not asked for), at the cost of
    # a draw per position.
    floor = None
    if details or geometry.estimator != "crossfit":
        # Halves of the shards when there are any: copies of a sequence then stay on one side.
        own = sharded.counts.shards
        floor = (
            noise_floor_by_shards(own, n, seed=seed)
            if len(own) >= 2
            else noise_floor(sharded.counts.matrix[:n], seed=seed)
        )
    probe = np.full(n, np.nan) if floor is None else floor
    unstable = _unstable(_noise_pairs(geometry, probe)[0], _noise_shares(geometry, probe)[1])
    floors = () if floor is None else tuple(float(x) for x in floor)
    if sharded.k < 2:
        note = f"no intervals: {sharded.why_no_shards}"
        unc = Uncertainty(level, 0, 0, seed, (), floors, unstable, note)
        return [s for s, _ in scored], unc
    scores, iv = interval_scores(
        sharded,
        n,
        scored,
        level,
        replicates,
        seed,
        progress,
        estimator=geometry.estimator,
        # Only a complete spectrum (a partial one holds the top eigenvalues only); the MDS
        # itself carries exact tails either way.
        full_eigenvalues=geometry.mds.eigenvalues if geometry.mds.total is None else None,
        full_mds=geometry.mds,
    )
    unc = Uncertainty(
        iv.level,
        iv.shards,
        iv.replicates,
        seed,
        iv.stress_by_rank,
        floors,
        unstable,
        # A replicate refits mds-r in-sample, so its bias is measured from the in-sample figure
        # (the headline of a held-out mds-r is a different quantity).
        bias=tuple(
            b + s.stress - s.in_sample if not math.isnan(s.in_sample) else b
            for b, s in zip(iv.bias, scores, strict=True)
        ),
        method=iv.method,
        heldout_pairs=iv.heldout_pairs,
        heldout_splits=iv.heldout_splits,
        design=iv.design,
    )
    return scores, unc


@dataclass(frozen=True)
class StressReport:
    """Everything ``posdiag stress`` prints; ``uncertainty`` is None when not asked for.

    ``geometry`` is the corpus geometry the report was computed on (kept for plots, so they need
    not recompute it); not part of the printed or JSON report.
    """

    corpus: CorpusSummary
    spectrum: Spectrum
    encodings: tuple[EncodingScore, ...]
    warnings: tuple[str, ...] = ()
    uncertainty: Uncertainty | None = None
    geometry: CorpusGeometry | None = field(default=None, repr=False, compare=False)


def geometry_report(
    geometry: CorpusGeometry,
    encodings: Sequence[EncodingRequest] | None = None,
    *,
    dim: int | None = None,
) -> StressReport:
    """The stress table of ``encodings`` (default set when None) on a computed geometry, without
    intervals; ``dim`` as in :func:`score_encodings`."""
    scores = tuple(score_encodings(geometry, encodings, dim=dim))
    return StressReport(
        geometry.summary, spectrum(geometry), scores, geometry.warnings, geometry=geometry
    )


def stress_report(
    counts: Counts | ShardedCounts,
    encodings: Sequence[EncodingRequest] | None = None,
    *,
    min_count: int = DEFAULT_MIN_COUNT,
    dim: int | None = None,
    level: float | None = None,
    replicates: int | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    estimator: str = DEFAULT_ESTIMATOR,
    splits: int = DEFAULT_SPLITS,
    details: bool = True,
) -> StressReport:
    """The stress table of ``encodings`` (default set when None) on the corpus ``counts``.

    With sharded counts (:func:`~posdiag.uncertainty.bootstrap.corpus_counts_sharded`) every stress
    gets a bootstrap interval of coverage ``level`` (default 0.95); ``level=None`` with plain counts
    skips the uncertainty part altogether. ``progress(done, replicates)`` follows the bootstrap;
    ``replicates`` defaults to :func:`~posdiag.uncertainty.bootstrap.default_replicates` of
    ``n_eff``. ``dim`` is the model dimension of the encodings that have one (see
    :func:`score_encodings`).
    ``estimator``, ``splits`` and ``seed`` choose the geometry (:func:`corpus_geometry`).
    ``details=False`` skips what only ``--verbose`` and the JSON show: each score's plug-in
    figure (``plain``, then NaN) and, without intervals, the per-position noise floor
    (``uncertainty.noise_floor``, then empty).
    """
    geo = corpus_geometry(
        counts, min_count, estimator=estimator, splits=splits, seed=seed, plain=details
    )
    if level is None and not isinstance(counts, ShardedCounts):
        return geometry_report(geo, encodings, dim=dim)
    scored = _scored(geo, encodings, dim, noise=True)
    lvl = DEFAULT_LEVEL if level is None else level
    scores, unc = _with_intervals(
        geo, counts, scored, lvl, replicates, seed, progress, details=details
    )
    warned = (*geo.warnings, *unstable_warnings(unc.unstable, geo.n_eff))
    return StressReport(geo.summary, spectrum(geo), tuple(scores), warned, unc, geo)


def unstable_warnings(unstable: Sequence[int], n: int) -> list[str]:
    """The warning the terminal, the HTML and the JSON all give for unstable positions."""
    if not unstable:
        return []
    return [
        f"{len(unstable)} of {n} positions are unstable (mostly sampling noise): "
        f"{position_ranges(sorted(unstable))}"
    ]


# ---------------------------------------------------------------------------------------------
# posdiag diagnose: the theory's checks on one corpus (docs/geometry.md section 8, docs/theory.md)
# ---------------------------------------------------------------------------------------------

DIAGNOSE_TOLERANCES = (0.2, 0.1, 0.05, 0.01)
DEFAULT_TARGET_STRESS = 0.1
# z-score above the independence null from which positional information counts as real.
INFORMATION_Z = 3.0
# Shift-equivariance R^2 from which relative encodings are recommended.
SHIFT_R2 = 0.9
# Fraction of indistinguishable pairs from which the report warns that noise dominates.
NOISY_FRACTION = 0.5
# Noise share of B_H's trace from which the report warns that noise dominates the ranking.
NOISY_SHARE = 0.25
# Pairs listed in the report (the count is always complete).
MAX_PAIRS_LISTED = 100


@dataclass(frozen=True)
class InformationDiagnosis:
    """Positional information ``I(position; token)`` against its noise level, in bits.

    ``per_position[i]`` is ``KL(mu_i || mu_bar)`` and ``per_position_null[i]`` its mean under
    independence; ``z = (bits - null_mean) / null_sd``.
    """

    bits: float
    null_mean: float
    null_sd: float
    excess: float
    z: float
    significant: bool
    per_position: tuple[float, ...]
    per_position_null: tuple[float, ...]
    reading: str


@dataclass(frozen=True)
class NoiseDiagnosis:
    """Split-half noise floor per position and the pairs it makes indistinguishable.

    ``pairs`` lists at most :data:`MAX_PAIRS_LISTED` pairs ``(i, j)`` (``i < j``, in order);
    ``n_indistinguishable`` counts all of them; ``per_position[i]`` counts the partners of ``i``.
    ``noise_share`` is the share of the geometry that sampling noise makes up. Plug-in: the
    share of the total variance (trace of ``B_H``) the noise bias adds,
    ``tr(J diag(e) J) / tr(B_H)`` with ``e_i = floor_i^2/4`` the squared error of position
    ``i``'s estimate (docs/theory.md). Cross-fit (no such bias): the bound on the squared
    sampling error of ``B_H`` from two independent halves of the data, as a share of
    ``||B_H||_F^2``. ``position_share[i]`` is the same ratio for position ``i`` (diagonal entry,
    resp. row). ``unstable`` positions are within the floor of at least half of the others or
    have ``position_share >= 0.5``. ``estimator`` names the geometry these refer to.
    """

    floor: tuple[float, ...]
    supports: tuple[int, ...]
    n_pairs: int
    n_indistinguishable: int
    fraction: float
    pairs: tuple[tuple[int, int], ...]
    per_position: tuple[int, ...]
    unstable: tuple[int, ...]
    noise_share: float
    position_share: tuple[float, ...]
    reading: str
    estimator: str = "plugin"


@dataclass(frozen=True)
class ShiftDiagnosis:
    """Shift-equivariance ``R^2`` and smoothness of ``D_H`` (NaN when undefined)."""

    r2: float
    profile: tuple[float, ...]
    smoothness: float
    neighbour_mean: float
    all_mean: float
    reading: str


@dataclass(frozen=True)
class RankDiagnosis:
    """The spectrum, effective ranks and the parameter saving at the recommended rank.

    ``rank`` is the smallest MDS rank with stress <= ``target``; when no rank reaches it
    (``reached`` False: the target is below the stress floor the negative eigenvalues of an
    estimated ``B_H`` leave) it is the rank with the lowest stress. ``saving`` is
    ``1 - rank (n + dim) / (n dim)`` with ``n = n_eff`` (Remark 8).
    """

    spectrum: Spectrum
    target: float
    rank: int
    rank_stress: float
    rank_interval: tuple[float, float]
    n: int
    dim: int
    n_params: int
    dense_params: int
    saving: float
    reading: str
    reached: bool = True


@dataclass(frozen=True)
class Recommendation:
    """Which encoding family fits best, the MDS rank reaching the target (None when no rank
    reaches it: :attr:`RankDiagnosis.rank` is then the signal rank), and why."""

    family: str
    encoding: str
    stress: float
    ci_low: float
    ci_high: float
    mds_rank: int | None
    text: str


@dataclass(frozen=True)
class Diagnosis:
    """Everything ``posdiag diagnose`` prints."""

    corpus: CorpusSummary
    information: InformationDiagnosis
    noise: NoiseDiagnosis
    shift: ShiftDiagnosis
    rank: RankDiagnosis
    encodings: tuple[EncodingScore, ...]
    recommendation: Recommendation
    uncertainty: Uncertainty
    warnings: tuple[str, ...] = ()
    geometry: CorpusGeometry | None = field(default=None, repr=False, compare=False)


def _information(counts: Counts, n: int, seed: int) -> InformationDiagnosis:
    m = counts.matrix[:n]
    bits, kl = positional_information(m)
    null = information_null(m, seed=seed)
    excess = bits - null.mean
    z = excess / null.sd if null.sd > 0 else (math.inf if excess > 0 else 0.0)
    significant = z >= INFORMATION_Z and excess > 0
    top = int(np.argmax(kl))
    if significant:
        reading = (
            f"word order is informative: I = {bits:.4g} bits, {excess:.4g} above the "
            f"{null.mean:.4g}-bit level of independent data (z = {z:.1f}); position {top} "
            f"differs most from the pooled distribution (KL {kl[top]:.3g} bits)"
        )
    else:
        reading = (
            f"no measurable positional information: I = {bits:.4g} bits is within the noise of "
            f"independent data ({null.mean:.4g} ± {null.sd:.2g} bits, z = {z:.1f})"
        )
    return InformationDiagnosis(
        bits,
        null.mean,
        null.sd,
        excess,
        float(z),
        significant,
        tuple(float(x) for x in kl),
        tuple(float(x) for x in null.per_position),
        reading,
    )


def _noise(geo: CorpusGeometry, floor: tuple[float, ...]) -> NoiseDiagnosis:
    n = geo.n_eff
    f = np.array(floor)
    partners, count, pairs = _noise_pairs(geo, f)
    n_pairs = n * (n - 1) // 2
    frac = count / n_pairs
    share, position_share = _noise_shares(geo, f)
    unstable = _unstable(partners, position_share)
    sup = geo.summary.supports
    last = n - 1
    plugin = not geo.has_split_half()
    what = "variance" if plugin else "squared norm (sampling error bound)"
    within = "within the floor" if plugin else "within their own sampling error"
    reading = (
        f"{_share_of(share, what)}; floor {f[0]:.2f} at "
        f"position 0 (N={sup[0]:,}), {f[last]:.2f} at position {last} (N={sup[last]:,}); "
        f"{frac:.1%} of position pairs ({count:,} of {n_pairs:,}) are {within}"
    )
    if unstable:
        reading += f"; {len(unstable)} of {n} positions unstable (mostly noise)"
    if frac >= NOISY_FRACTION or share >= NOISY_SHARE:
        reading += ": much of this geometry is sampling noise"
    return NoiseDiagnosis(
        floor,
        tuple(int(s) for s in sup[:n]),
        n_pairs,
        count,
        frac,
        pairs,
        tuple(int(x) for x in partners),
        unstable,
        share,
        tuple(float(x) for x in position_share),
        reading,
        geo.estimator,
    )


def _share_of(share: float, what: str) -> str:
    """What sampling noise makes up of the geometry, never more than all of it."""
    if share <= 1.0:
        return f"sampling noise makes up ~{share:.0%} of the geometry's {what}"
    return (
        "sampling noise can make up all of the geometry (its sampling error bound is "
        f"{share:.2g} x the geometry's squared norm)"
    )


def _shift(d_h: np.ndarray) -> ShiftDiagnosis:
    fit = shift_equivariance(d_h)
    smooth = smoothness(d_h)
    iu = np.triu_indices(d_h.shape[0], k=1)
    all_mean = float(d_h[iu].mean())
    neigh = float(np.diagonal(d_h, 1).mean())
    r2 = fit.r2
    if math.isnan(r2):
        kind = "undefined (all distances equal)"
    elif r2 >= SHIFT_R2:
        kind = "nearly a function of |i-j|: relative encodings suit this corpus"
    elif r2 >= 0.5:
        kind = "partly a function of |i-j|"
    else:
        kind = "not a function of |i-j|: absolute position matters"
    texture = "a smooth drift" if smooth < 0.5 else "neighbours nearly as far apart as any pair"
    reading = (
        f"shift-equivariance R^2 = {r2:.2f}: D_H is {kind}; neighbours are "
        f"{smooth:.2f} x the mean distance ({texture})"
    )
    return ShiftDiagnosis(
        r2, tuple(float(x) for x in fit.profile), smooth, neigh, all_mean, reading
    )


def noise_share_text(share: float) -> str:
    """``'~45%'``; from 100% on, what it is: the cross-fit's sampling error bound exceeding the
    geometry, ``'all of it (error bound 1.9 x the geometry)'``: a share cannot pass 100%."""
    if share <= 1.0:
        return f"~{share:.0%}"
    return f"~100% (error bound {share:.2g} x the geometry)"


def saving_phrase(saving: float, digits: int = 0) -> str:
    """``'88% fewer'``, or ``'53% more'`` when the factorisation costs more than a full table.

    A rank close to ``n`` with a small ``d`` makes ``r(n+d) > n d``; "-53% fewer" reads badly.
    """
    word = "fewer" if saving >= 0 else "more"
    return f"{abs(saving):.{digits}%} {word}"


def _rank(geo: CorpusGeometry, unc: Uncertainty, target: float, dim: int) -> RankDiagnosis:
    sp_ = spectrum(geo, DIAGNOSE_TOLERANCES)
    if geo.mds.total is None:
        hit = reached_rank(geo.mds.eigenvalues, target)
    else:
        # A partial spectrum: reached within the computed ranks, or treated as not reached.
        known = np.flatnonzero(np.asarray(sp_.stress_by_rank) <= target)
        hit = int(known[0] + 1) if known.size else None
    # Not reached: the signal rank, the eigenvalues above the noise level the negative ones
    # reveal (the ranks after it fit noise and only creep towards the floor).
    r = hit if hit is not None else max(1, min(sp_.signal_rank, len(sp_.stress_by_rank)))
    n = geo.n_eff
    st = sp_.stress_by_rank[r - 1]
    # Rank intervals stop at the replicates' computed ranks at long contexts.
    iv = unc.stress_by_rank[r - 1] if r <= len(unc.stress_by_rank) else (math.nan, math.nan)
    saving = parameter_saving(r, n, dim)
    cost = (
        f"as P = A B^T it costs r(n+d) = {r * (n + dim):,} parameters vs n*d = {n * dim:,} "
        f"({saving_phrase(saving)}, d={dim})"
    )
    if hit is not None:
        reading = f"rank {r} reaches stress {st:.3f} <= {target:g}; {cost}"
    else:
        reading = (
            f"stress <= {target:g} is not reached (floor {sp_.floor:.3f}: negative eigenvalues "
            f"of the estimate); the signal rank {r} has stress {st:.3f}; {cost}"
        )
    return RankDiagnosis(
        sp_, target, r, st, iv, n, dim, r * (n + dim), n * dim, saving, reading, hit is not None
    )


def _ci(s: EncodingScore) -> str:
    if math.isnan(s.ci_low):
        return ""
    return f" [{s.ci_low:.3f}, {s.ci_high:.3f}]"


def _mds_rank(rank: RankDiagnosis) -> int | None:
    """The recommended MDS rank: None when no rank reaches the target (``rank.rank`` is then
    the signal rank, a fallback, not a recommendation)."""
    return rank.rank if rank.reached else None


def _recommend(
    scores: Sequence[EncodingScore],
    info: InformationDiagnosis,
    noise: NoiseDiagnosis,
    shift: ShiftDiagnosis,
    rank: RankDiagnosis,
) -> Recommendation:
    standard = [s for s in scores if not s.name.startswith("mds") and s.name != "nope"]
    best = standard[0] if standard else scores[0]
    mds = (
        f"an MDS encoding reaches stress <= {rank.target:g} at rank {rank.rank}"
        if rank.reached
        else (
            f"no MDS rank reaches stress <= {rank.target:g} (the estimate's floor is "
            f"{rank.spectrum.floor:.3f}; the signal rank {rank.rank} has {rank.rank_stress:.3f})"
        )
    )
    if not info.significant:
        nope = next((s for s in scores if s.name == "nope"), best)
        return Recommendation(
            "none",
            "nope",
            nope.stress,
            nope.ci_low,
            nope.ci_high,
            _mds_rank(rank),
            f"No positional encoding is needed here: I(position; token) = {info.bits:.3g} bits "
            f"is within the noise of independent data ({info.null_mean:.3g} bits), so any "
            "geometry found is sampling noise.",
        )
    top = best
    if not math.isnan(shift.r2) and shift.r2 >= SHIFT_R2:
        rel = [s for s in standard if is_relative(s.name)]
        if rel:
            best = rel[0]
        why = f"D_H is nearly a function of |i-j| (R^2 = {shift.r2:.2f})"
    elif math.isnan(shift.r2):
        why = "it has the lowest stress (shift-equivariance is undefined: all distances are equal)"
    elif is_relative(best.name):
        why = (
            f"it has the lowest stress, although D_H is not shift-equivariant "
            f"(R^2 = {shift.r2:.2f})"
        )
    else:
        why = f"D_H is not shift-equivariant (R^2 = {shift.r2:.2f}), so absolute position matters"
    family = family_of(best.name)
    if best is top:
        runner = next((s for s in standard if s is not best), None)
        text = (
            f"{best.name} ({family}) fits best among standard encodings with stress "
            f"{best.stress:.3f}{_ci(best)}"
        )
    else:
        # Shift-equivariance favours a relative encoding that does not have the lowest stress.
        runner = top
        text = f"{best.name} ({family}) is recommended with stress {best.stress:.3f}{_ci(best)}"
    if runner is not None:
        text += f" vs {runner.name} {runner.stress:.3f}"
        close = (
            not math.isnan(best.ci_high)
            and not math.isnan(runner.ci_low)
            and runner.ci_low <= best.ci_high
            and best.ci_low <= runner.ci_high
        )
        if close:
            text += " (intervals overlap)"
    # The saving belongs to an MDS encoding that reaches the target; the signal rank does not.
    saving = f" ({saving_phrase(rank.saving)} parameters than a full table)" if rank.reached else ""
    text += f", because {why}; {mds}{saving}."
    if noise.fraction >= NOISY_FRACTION or noise.noise_share >= NOISY_SHARE:
        share = noise.noise_share
        if share > 1.0:  # the cross-fit's error bound exceeds the geometry: no share above 100%
            fact = f"sampling noise can make up all of the geometry (error bound {share:.2g} x it)"
        elif share >= NOISY_SHARE:
            fact = f"sampling noise makes up ~{share:.0%} of the geometry"
        else:
            fact = f"{noise.fraction:.0%} of position pairs are within the sampling noise"
        # Only the plug-in's noise is biased towards full-rank tables; the cross-fit's is not.
        bias = " (it favours full-rank tables)" if noise.estimator == "plugin" else ""
        text += (
            f" Caution: {fact}, so noise shapes this ranking{bias}: add data or raise --min-count."
        )
    return Recommendation(
        family, best.name, best.stress, best.ci_low, best.ci_high, _mds_rank(rank), text
    )


def diagnose(
    counts: Counts | ShardedCounts,
    encodings: Sequence[EncodingRequest] | None = None,
    *,
    min_count: int = DEFAULT_MIN_COUNT,
    target: float = DEFAULT_TARGET_STRESS,
    dim: int = DEFAULT_DIM,
    level: float = DEFAULT_LEVEL,
    replicates: int | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    estimator: str = DEFAULT_ESTIMATOR,
    splits: int = DEFAULT_SPLITS,
    details: bool = True,
) -> Diagnosis:
    """Run every theory diagnostic on a corpus (docs/geometry.md section 8, docs/theory.md).

    Parameters
    ----------
    counts : Counts or ShardedCounts
        With shards, every stress carries a bootstrap interval.
    target : float
        Stress the recommended MDS rank must reach, in (0, 1).
    dim : int
        Model dimension ``d``: of the parameter saving ``r(n+d)`` vs ``n d``, and of every
        encoding that has one and was not given it explicitly (``sinusoidal:d=512`` keeps 512).
    progress : callable, optional
        Called with (done, replicates) during the bootstrap.
    estimator, splits : see :func:`corpus_geometry`.
    details : bool
        False skips each score's plug-in figure (``plain``, then NaN), which only the JSON
        shows: one Gram product and one eigensolve fewer. The noise floor is computed either
        way (the report prints it).
    """
    target = check_float("target", target, 0.0, 1.0, lo_open=True)
    dim = check_int("dim", dim, 1)
    total = counts.counts if isinstance(counts, ShardedCounts) else counts
    geo = corpus_geometry(
        counts, min_count, estimator=estimator, splits=splits, seed=seed, plain=details
    )
    scored = _scored(geo, encodings, dim, noise=True)
    scores, unc = _with_intervals(geo, counts, scored, level, replicates, seed, progress)
    info = _information(total, geo.n_eff, seed)
    noise = _noise(geo, unc.noise_floor)
    shift = _shift(geo.distances)
    rank = _rank(geo, unc, target, dim)
    rec = _recommend(scores, info, noise, shift, rank)
    return Diagnosis(
        geo.summary,
        info,
        noise,
        shift,
        rank,
        tuple(scores),
        rec,
        unc,
        (*geo.warnings, *unstable_warnings(unc.unstable, geo.n_eff)),
        geo,
    )
