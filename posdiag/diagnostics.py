"""From counts to answers: the corpus geometry, the MDS spectrum and every encoding's stress."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validate import check_int
from .counts import Counts
from .encodings import DEFAULT_SET, Encoding, make_encoding, parse_encoding
from .errors import PosdiagError
from .geometry import (
    MDS,
    classical_mds,
    compare,
    effective_rank,
    hellinger_distances,
    stress_by_rank,
    supported_prefix,
)
from .uncertainty import (
    DEFAULT_LEVEL,
    DEFAULT_REPLICATES,
    ShardedCounts,
    bootstrap_stress,
    noise_floor,
    pair_floor,
)

__all__ = [
    "DEFAULT_MIN_COUNT",
    "EFFECTIVE_RANK_TOLERANCES",
    "CorpusGeometry",
    "CorpusSummary",
    "EncodingScore",
    "Spectrum",
    "StressReport",
    "Uncertainty",
    "corpus_geometry",
    "score_encodings",
    "stress_report",
]

# Why 100: the split-half noise floor of d_H at a position falls roughly like 1/sqrt(N_i); below
# ~100 sequences a word-level distribution is mostly singletons and its distances to every other
# position saturate near 1, which would masquerade as geometry (README, "min-count").
DEFAULT_MIN_COUNT = 100
EFFECTIVE_RANK_TOLERANCES = (0.1, 0.05)


@dataclass(frozen=True)
class CorpusSummary:
    """What was analysed: the corpus, how it was read, and which positions are covered.

    ``supports`` has shape (max_len,); ``dropped`` lists positions at or after ``n_eff`` that
    have any support (they are reported, never mixed in).
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


@dataclass(frozen=True)
class CorpusGeometry:
    """The corpus side of every comparison, on positions ``0..n_eff-1``.

    Attributes
    ----------
    summary : CorpusSummary
    distances : ndarray of shape (n_eff, n_eff)
        Hellinger distances ``D_H``.
    mds : MDS
        Classical MDS of ``D_H``; ``mds.gram`` is ``B_H``.
    warnings : tuple of str
        Numerical warnings raised while computing it (negative eigenvalues).
    """

    summary: CorpusSummary
    distances: np.ndarray
    mds: MDS
    warnings: tuple[str, ...] = ()

    @property
    def n_eff(self) -> int:
        return self.summary.n_eff


def corpus_geometry(counts: Counts, min_count: int = DEFAULT_MIN_COUNT) -> CorpusGeometry:
    """Hellinger distances and classical MDS of the supported prefix of ``counts``."""
    min_count = check_int("min_count", min_count, 1)
    supports = counts.supports
    n_eff = supported_prefix(supports, min_count)
    meta = counts.meta
    source = str(meta.get("source", "<counts>"))
    if n_eff < 2:
        head = ", ".join(str(int(s)) for s in supports[:5])
        raise PosdiagError(
            f"{source}: fewer than 2 positions have support >= min_count={min_count} "
            f"(n_eff={n_eff}; supports of positions 0..4: {head}); lower --min-count or add data"
        )
    nonzero = np.flatnonzero(supports > 0)
    last = int(nonzero[-1]) if nonzero.size else -1
    summary = CorpusSummary(
        source=source,
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
    )
    d_h = hellinger_distances(counts.matrix[:n_eff])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mds = classical_mds(d_h)
    return CorpusGeometry(summary, d_h, mds, tuple(str(w.message) for w in caught))


@dataclass(frozen=True)
class Spectrum:
    """The MDS eigen spectrum and what it says about rank.

    ``stress_by_rank[r-1]`` is the stress of the rank-r MDS encoding; ``effective_rank`` maps a
    tolerance to the smallest rank reaching it.
    """

    eigenvalues: tuple[float, ...]
    stress_by_rank: tuple[float, ...]
    effective_rank: Mapping[float, int]
    min_eigenvalue: float


def spectrum(
    geometry: CorpusGeometry, tolerances: Sequence[float] = EFFECTIVE_RANK_TOLERANCES
) -> Spectrum:
    lam = geometry.mds.eigenvalues
    return Spectrum(
        eigenvalues=tuple(float(x) for x in lam),
        stress_by_rank=tuple(float(x) for x in stress_by_rank(lam)),
        effective_rank={float(t): effective_rank(lam, t) for t in tolerances},
        min_eigenvalue=float(lam[-1]),
    )


@dataclass(frozen=True)
class EncodingScore:
    """One row of the stress table (GEOMETRY.md section 4); ``spearman`` may be NaN.

    ``ci_low``/``ci_high`` bound ``stress`` with the shard bootstrap (docs/theory.md); NaN when
    no interval was computed.
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


def _resolve(
    specs: Sequence[str | tuple[str, Mapping[str, Any]]] | None, n_eff: int
) -> list[tuple[str, dict[str, Any]]]:
    if specs is None:
        out = [parse_encoding(s) for s in DEFAULT_SET]
        # The default MDS ranks only make sense below n_eff.
        return [(nm, p) for nm, p in out if nm != "mds" or p["rank"] <= n_eff - 1]
    return [parse_encoding(s) if isinstance(s, str) else (s[0], dict(s[1])) for s in specs]


def _scored(
    geometry: CorpusGeometry, specs: Sequence[str | tuple[str, Mapping[str, Any]]] | None
) -> list[tuple[EncodingScore, Encoding]]:
    resolved = _resolve(specs, geometry.n_eff)
    encs = [make_encoding(nm, geometry.n_eff, p, mds=geometry.mds) for nm, p in resolved]
    b_h = geometry.mds.gram
    out = []
    for enc in encs:
        m = compare(geometry.distances, b_h, enc.delta, enc.gram())
        score = EncodingScore(
            enc.name, dict(enc.params), m.stress, m.raw, m.kruskal, m.spearman, enc.n_params
        )
        out.append((score, enc))
    # Stable sort: ties keep the order the user asked for.
    return sorted(out, key=lambda se: (se[0].stress, math.isnan(se[0].spearman)))


def score_encodings(
    geometry: CorpusGeometry, specs: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None
) -> list[EncodingScore]:
    """Score encodings against the corpus geometry, best (lowest stress) first.

    Parameters
    ----------
    specs : sequence, optional
        ``"NAME[:key=value,...]"`` strings or ``(name, params)`` pairs; default
        :data:`~posdiag.encodings.DEFAULT_SET`.
    """
    return [s for s, _ in _scored(geometry, specs)]


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
        Split-half ``d_H`` of each position 0..n_eff-1 (always computed).
    unstable : tuple of int
        Positions within the noise floor of at least half of the other positions.
    note : str
        Why there are no intervals, when there are none.
    """

    level: float
    shards: int
    replicates: int
    seed: int
    stress_by_rank: tuple[tuple[float, float], ...]
    noise_floor: tuple[float, ...]
    unstable: tuple[int, ...]
    note: str = ""


def _indistinguishable(d_h: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Boolean (n, n) mask of pairs ``i != j`` with ``d_H(i, j) <= pair floor``."""
    mask = d_h <= pair_floor(floor)
    np.fill_diagonal(mask, False)
    return np.asarray(mask)


def _unstable(mask: np.ndarray) -> tuple[int, ...]:
    n = mask.shape[0]
    return tuple(int(i) for i in np.flatnonzero(mask.sum(axis=1) * 2 >= n - 1))


def _with_intervals(
    geometry: CorpusGeometry,
    counts: Counts | ShardedCounts,
    scored: list[tuple[EncodingScore, Encoding]],
    level: float,
    replicates: int,
    seed: int,
) -> tuple[list[EncodingScore], Uncertainty]:
    n = geometry.n_eff
    sharded = counts if isinstance(counts, ShardedCounts) else ShardedCounts(counts)
    floor = noise_floor(sharded.counts.matrix[:n], seed=seed)
    unstable = _unstable(_indistinguishable(geometry.distances, floor))
    scores = [s for s, _ in scored]
    if sharded.k < 2:
        note = f"no intervals: {sharded.why_no_shards}"
        unc = Uncertainty(level, 0, 0, seed, (), tuple(float(x) for x in floor), unstable, note)
        return scores, unc
    iv = bootstrap_stress(
        sharded,
        n,
        [e for _, e in scored],
        [s.stress for s in scores],
        level=level,
        replicates=replicates,
        seed=seed,
    )
    scores = [
        dataclasses.replace(s, ci_low=lo, ci_high=hi)
        for s, (lo, hi) in zip(scores, iv.encodings, strict=True)
    ]
    unc = Uncertainty(
        iv.level,
        iv.shards,
        iv.replicates,
        seed,
        iv.stress_by_rank,
        tuple(float(x) for x in floor),
        unstable,
    )
    return scores, unc


@dataclass(frozen=True)
class StressReport:
    """Everything ``posdiag stress`` prints; ``uncertainty`` is None when not asked for."""

    corpus: CorpusSummary
    spectrum: Spectrum
    encodings: tuple[EncodingScore, ...]
    warnings: tuple[str, ...] = ()
    uncertainty: Uncertainty | None = None


def stress_report(
    counts: Counts | ShardedCounts,
    encodings: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
    *,
    min_count: int = DEFAULT_MIN_COUNT,
    level: float | None = None,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = 0,
) -> StressReport:
    """The stress table of ``encodings`` (default set when None) on the corpus ``counts``.

    With sharded counts (:func:`~posdiag.uncertainty.corpus_counts_sharded`) every stress gets a
    bootstrap interval of coverage ``level`` (default 0.95); ``level=None`` with plain counts
    skips the uncertainty part altogether.
    """
    total = counts.counts if isinstance(counts, ShardedCounts) else counts
    geo = corpus_geometry(total, min_count)
    scored = _scored(geo, encodings)
    if level is None and not isinstance(counts, ShardedCounts):
        return StressReport(geo.summary, spectrum(geo), tuple(s for s, _ in scored), geo.warnings)
    lvl = DEFAULT_LEVEL if level is None else level
    scores, unc = _with_intervals(geo, counts, scored, lvl, replicates, seed)
    return StressReport(geo.summary, spectrum(geo), tuple(scores), geo.warnings, unc)
