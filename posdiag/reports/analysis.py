"""The corpus geometry: what was counted, the estimated Hellinger geometry on the supported
prefix, and its MDS spectrum (docs/geometry.md).
"""

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
from .._util.userdocs import doc_ref
from .._util.validate import check_float, check_int
from ..corpus.units import UnitTally, duplicate_warning
from ..counts.core import Counts
from ..errors import PosdiagError
from ..geometry import estimator as estimator_module
from ..geometry.core import (
    MDS,
    classical_mds,
    reached_rank,
    stress_by_rank,
    stress_floor,
    supported_prefix,
)
from ..geometry.estimator import (
    DEFAULT_ESTIMATOR,
    DEFAULT_SPLITS,
    HellingerEstimate,
    SplitHalfSummary,
    distances_to_first,
    estimate_hellinger,
    negative_eigenvalue_note,
    pack_upper,
    split_half_summary,
    unpack_upper,
)
from .options import Analysis
from .padding import padding_warnings

__all__ = [
    "CROSSFIT_MIN_TOKENS",
    "IMPLICIT_FROM",
    "CorpusGeometry",
    "CorpusSummary",
    "DEFAULT_MIN_COUNT",
    "EFFECTIVE_RANK_TOLERANCES",
    "MAX_PAIRS_LISTED",
    "Spectrum",
    "analysed_geometry",
    "corpus_geometry",
    "corpus_summary",
    "mds_floor",
    "rank_text",
    "spectrum",
    "summary_notes",
]

EFFECTIVE_RANK_TOLERANCES = (0.1, 0.05)
DEFAULT_ANALYSIS = Analysis()
# Called with (done, replicates) during the bootstrap.
Progress = Callable[[int, int], None] | None
# Below this every position is one distribution: sqrt turns 1e-16 rounding in 1 - BC into 1e-8.
IDENTICAL_TOL = 1e-6
# Pairs listed in the report (the count is always complete).
MAX_PAIRS_LISTED = 100
# From here no n x n geometry is built (reports.longctx; why: docs/performance.md).
IMPLICIT_FROM = 16_385


@dataclass(frozen=True)
class CorpusSummary:
    """What was analysed: the corpus, how it was read, and which positions are covered.

    ``supports`` (max_len,): sequences reaching each position; ``real_supports`` (same shape,
    model view only): the real (non-pad) tokens there, which ``min_count`` then counts
    (``support_unit`` says which). ``dropped``: positions from ``n_eff`` on with any support.
    ``units``: the sampling-unit tally of a counted text corpus (else None); when present
    ``min_count`` counts distinct units (docs/geometry.md 2b).
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
        """Sequences at each position (model view: real tokens)."""
        return self.real_supports or self.supports

    @property
    def unit_supports(self) -> tuple[int, ...]:
        """What ``min_count`` counts: distinct sampling units when known, else
        :attr:`counted_supports`."""
        base = self.counted_supports
        if self.units is None or len(self.units.unit_supports) != len(base):
            return base
        return tuple(min(a, b) for a, b in zip(base, self.units.unit_supports, strict=True))

    @property
    def real_share(self) -> tuple[float, ...]:
        """Share of real (non-pad) tokens at each position (NaN where no sequence reaches)."""
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
        Hellinger distances ``D_H`` of the estimate (cross-fit: implied by its ``B_H``).
    mds : MDS
        Eigen-decomposition of ``B_H`` (``mds.gram``); eigenvalues may be negative.
    warnings : tuple of str
    estimate, plain : HellingerEstimate or None
        The headline estimate (``--estimator``) and the plug-in (the ``plain`` figures).
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

    def has_split_half(self) -> bool:
        """Whether split-half grams exist for this geometry (a cross-fit with its counts)."""
        est = self.estimate
        return est is not None and est.estimator == "crossfit" and self.counts is not None

    def split_half_summary(
        self, ranks: Sequence[int] = (), *, noise: bool = False
    ) -> SplitHalfSummary | None:
        """What the split-half grams give (held-out ``mds-r`` of ``ranks``, noise energy, and with
        ``noise`` the pairs within their sampling error), cross-fit only, else None.

        Cached, the grams not kept; asking for more recomputes both (the same seeded halves).
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
            # Freed before the new one is made.
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
        """``D_H``'s upper triangle packed and ``D_H`` dropped while the split-half grams are made
        one outer split at a time (peak 2.5 ``n x n`` arrays instead of 3), else None.
        :meth:`_unpark_distances` restores it bit for bit (``D_H`` is exactly symmetric)."""
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
        also prepares the noise diagnostics."""
        if not ranks:
            return {}  # before split_half: its grams cost four Gram products
        summary = self.split_half_summary(ranks, noise=noise)
        return {} if summary is None else {int(r): summary.heldout[int(r)] for r in ranks}


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
    """What gives 2 analysed positions: the largest --min-count that does, when the estimator's
    ``need`` tokens a position allow it, else more data (or the plug-in)."""
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
    counts: Counts,
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
    counts : Counts
        With shards the cross-fit splits by sequence, otherwise by thinning.
    estimator : {"crossfit", "plugin"}
        ``crossfit`` (default) removes the noise bias of the plug-in (docs/geometry.md).
    splits, seed : int
        Random splits of the cross-fit and their seed.
    plain : bool
        Also compute the plug-in estimate beside a cross-fit (the scores' ``plain`` figures);
        False leaves them NaN.
    spectrum : bool
        False: no eigensolve (``mds`` holds the gram and ``||B_H||_F^2`` only).
    """
    # The geometry uses the shards even where intervals were declined (--shards 0).
    shards = counts.shards
    summary = corpus_summary(counts, min_count)
    n_eff, source = summary.n_eff, summary.source
    need = CROSSFIT_MIN_TOKENS if estimator == "crossfit" else 1
    _check_two_positions(summary, need)
    if n_eff >= IMPLICIT_FROM:
        raise PosdiagError(
            f"{source}: the n x n geometry (plot, diff, inspect --corpus) is built only below "
            f"{IMPLICIT_FROM:,} analysed positions; n_eff = {n_eff:,} (stress, check, "
            "build-encoding, diagnose and report analyse this length without it: docs/geometry.md, "
            f"'Long contexts'; or count at most {IMPLICIT_FROM - 1} positions, --max-len "
            f"{IMPLICIT_FROM - 1})"
        )
    # D_H, B_H, the eigendecomposition and its workspace; a few vocabulary-sized columns.
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
        raise identical_positions(source, n_eff, largest)
    _check_tokens(summary, need)
    if estimator == "plugin":
        assert plug is not None
        est = plug
        mds, notes = mds_with_notes(plug.distances) if spectrum else (plug.mds, [])
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
            notes.append(thinning_note(source, len(shards)))
    notes += summary_notes(summary, sharded=bool(shards) or estimator == "plugin")
    with_shards = dataclasses.replace(counts, shards=tuple(shards))
    return CorpusGeometry(summary, est.distances, mds, tuple(notes), est, plug, with_shards, {})


def mds_with_notes(distances: np.ndarray) -> tuple[MDS, list[str]]:
    """:func:`classical_mds` of ``distances`` (n, n) and the warnings it raised, as notes."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mds = classical_mds(distances)
    return mds, [str(w.message) for w in caught]


def thinning_note(source: str, shards: int) -> str:
    """The note of a cross-fit that split each position's counts because a half of the
    ``shards`` left a position without tokens."""
    return (
        f"{source}: a random half of the {shards} shards left a position without tokens, so the "
        "cross-fit split each position's counts instead (thinning); fewer --shards or a larger "
        "--min-count keep the split by sequence"
    )


def analysed_geometry(counts: Counts, analysis: Analysis, *, plain: bool = True) -> CorpusGeometry:
    """:func:`corpus_geometry` with the parameters of ``analysis``."""
    return corpus_geometry(
        counts,
        analysis.positions_from,
        estimator=analysis.estimator,
        splits=analysis.splits,
        seed=analysis.seed,
        plain=plain,
    )


def _check_two_positions(summary: CorpusSummary, need: int) -> None:
    """Refuse fewer than 2 analysed positions, with what would give 2."""
    if summary.n_eff >= 2:
        return
    head = ", ".join(str(s) for s in summary.counted_supports[:5])
    what = "supports" if summary.support_unit == "sequences" else "real-token supports"
    if summary.unit_supports != summary.counted_supports:
        # Copies share a unit and count once (docs/geometry.md 2b): say so, with the figure.
        units = ", ".join(str(s) for s in summary.unit_supports[:5])
        head += f"; distinct sampling units: {units}"
    raise PosdiagError(
        f"{summary.source}: fewer than 2 positions have support >= "
        f"min_count={summary.min_count} (n_eff={summary.n_eff}; {what} of positions 0..4: "
        f"{head}); {_two_positions_advice(summary, need)}"
    )


def _check_tokens(summary: CorpusSummary, need: int) -> None:
    """Refuse an analysed position with fewer than ``need`` tokens, saying which option to
    change."""
    n_eff = summary.n_eff
    tokens = np.asarray(summary.supports[:n_eff])
    if not np.any(tokens < need):
        return
    i = int(np.flatnonzero(tokens < need)[0])
    fixes = []
    if supported_prefix(np.asarray(summary.counted_supports), need) >= 2:
        fixes.append(f"raise --min-count to {need}")
    if i >= 2:
        fixes.append(f"lower --max-len to {i}")
    fixes.append("use --estimator plugin" if fixes else "add data or use --estimator plugin")
    raise PosdiagError(
        f"{summary.source}: the cross-fitted geometry needs >= {need} tokens at every analysed "
        f"position; position {i} has {int(tokens[i])} (--min-count {summary.min_count} kept "
        f"positions 0..{n_eff - 1}): {', '.join(fixes[:-1])}"
        f"{', or ' if len(fixes) > 1 else ''}{fixes[-1]}"
    )


def summary_notes(summary: CorpusSummary, *, sharded: bool) -> list[str]:
    """The warnings of what was counted: padding, copies, only two positions."""
    notes = padding_warnings(summary)
    dup = duplicate_warning(summary.units, sharded=sharded)
    if dup is not None:
        notes.append(f"{summary.source}: {dup}")
    if summary.n_eff == 2:
        # Two points are always exactly embeddable on a line, so the comparison says nothing.
        notes.append(
            f"{summary.source}: only 2 positions are analysed (n_eff=2), so every encoding that "
            "separates them has stress 0; lower --min-count or add data to compare encodings"
        )
    return notes


# Positions whose distance to position 0 is tried first by _maybe_identical (fractions of n).
_PROBES = (1.0, 0.5, 0.0)


def identical_positions(source: str, n_eff: int, largest: float) -> PosdiagError:
    """The error when every analysed position has the same token distribution (the dense and
    the implicit path alike)."""
    return PosdiagError(
        f"{source}: all {n_eff:,} analysed positions have the same token distribution "
        f"(largest Hellinger distance {largest:.2g}); there is no positional geometry to fit"
    )


def refuse_identical(counts: Counts, n_eff: int, source: str) -> None:
    """Raise :func:`identical_positions` when every position of ``0..n_eff-1`` is within
    :data:`IDENTICAL_TOL` of position 0 (``O(nnz)``, no pair)."""
    if _maybe_identical(counts.matrix, n_eff):
        largest = float(distances_to_first(sp.csr_matrix(counts.matrix), n_eff).max())
        raise identical_positions(source, n_eff, largest)


def _maybe_identical(matrix: Any, n: int) -> bool:
    """False when some position's plug-in Hellinger distance to position 0 is at least
    :data:`IDENTICAL_TOL`; True means "check with the full plug-in"."""
    # A few probe rows first (far from position 0 on any real corpus); twice the tolerance
    # covers their other summation order.
    c = sp.csr_matrix(matrix)
    probes = sorted({min(n - 1, max(1, int(f * (n - 1)))) for f in _PROBES})
    if distances_to_first(c[[0, *probes]], len(probes) + 1).max() >= 2.0 * IDENTICAL_TOL:
        return False
    return bool(distances_to_first(c, n).max() < IDENTICAL_TOL)


@dataclass(frozen=True)
class Spectrum:
    """The MDS eigen spectrum and what it says about rank.

    ``stress_by_rank[r-1]``: in-sample stress of the rank-r MDS encoding; ``effective_rank``:
    tolerance -> smallest rank reaching it, None below ``floor`` (the stress the negative
    eigenvalues leave); ``negative``: the note on them; ``signal_rank``: eigenvalues above the
    magnitude of the most negative one. With ``computed > 0`` only the top ``computed`` are
    known: a rank of ``computed + 1`` reads "more than" and ``floor`` is a lower bound.
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
    unknown = (
        f"only the top {lam.size} eigenvalues were computed at n_eff = {geometry.n_eff:,} (the "
        f"smallest, and so the stress floor, are not: {doc_ref('geometry', 'Long contexts')})"
    )
    by_rank, bottom, floor = mds.stress_by_rank(), mds.min_eigenvalue, mds_floor(mds)
    return top_spectrum(lam, by_rank, bottom, floor, geometry.estimator, tolerances, unknown)


def top_spectrum(
    lam: np.ndarray,
    by_rank: np.ndarray,
    bottom: float,
    floor: float,
    estimator: str,
    tolerances: Sequence[float],
    unknown: str,
) -> Spectrum:
    """The :class:`Spectrum` of the top ``k`` eigenvalues ``lam`` (k,), their stresses
    ``by_rank`` (k,) and the smallest eigenvalue ``bottom`` (NaN: unknown, then the note is
    ``unknown``)."""
    k = int(lam.size)
    known = not math.isnan(bottom)
    low = min(0.0, bottom) if known else 0.0
    eff: dict[float, int | None] = {}
    for t in tolerances:
        eps = check_float("eps", t, 0.0, 1.0)
        hits = np.flatnonzero(by_rank <= eps)
        # Beyond the computed ranks: unreachable above a known floor, else "more than k".
        eff[float(t)] = int(hits[0] + 1) if hits.size else (None if floor > eps else k + 1)
    return Spectrum(
        eigenvalues=tuple(float(x) for x in lam),
        stress_by_rank=tuple(float(x) for x in by_rank),
        effective_rank=eff,
        min_eigenvalue=float(bottom),
        floor=floor,
        signal_rank=int(np.sum(lam > abs(low))) if known else 0,
        negative=(
            negative_eigenvalue_note(np.append(lam, low), partial=True) or "" if known else unknown
        ),
        estimator=estimator,
        computed=k,
    )


def mds_floor(mds: MDS) -> float:
    """The stress floor the negative eigenvalues leave (of a partial spectrum a lower bound, 0
    when unknown)."""
    if mds.total is None:
        return stress_floor(mds.eigenvalues)
    low, total = mds.min_eigenvalue, float(mds.total or 0.0)
    return 0.0 if math.isnan(low) or total <= 0 else math.sqrt(min(0.0, low) ** 2 / total)


def rank_text(rank: int | None, floor: float, computed: int = 0) -> str:
    """An effective rank for reports: the number, "not reached (floor 0.123)", or, past the
    top ``computed`` eigenvalues of a partial spectrum, "> 128" (floor then a lower bound)."""
    if rank is None:
        return f"not reached (floor {'>= ' if computed else ''}{floor:.3f})"
    return f"> {computed}" if computed and rank > computed else str(rank)
