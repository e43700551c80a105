"""Geometry drift between two corpora (``posdiag diff A B``) on their common supported positions
``0..n-1``, ``n = min(n_eff(A), n_eff(B))``: the cross-stress of each side's MDS encoding on the
other's ``B_H`` next to its own optimum, the geometry stress judged against random re-splits of
A+B (:func:`geometry_reference`), the per-position Hellinger distance, and the encodings whose
ranking changes. :func:`count_pair` puts both sides on one vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.validate import check_float, check_int
from ..corpus.reading import Reading
from ..counts.core import Counts, ProgressFn, align_vocabularies, is_counts_file
from ..counts.corpus import corpus_counts
from ..errors import PosdiagError
from ..geometry import spectral
from ..geometry.core import MDS, _fix_signs, gram_from_vectors, reached_rank
from ..geometry.estimator import DEFAULT_ESTIMATOR, restrict
from .analysis import (
    CROSSFIT_MIN_TOKENS,
    DEFAULT_ANALYSIS,
    CorpusGeometry,
    CorpusSummary,
    analysed_geometry,
    corpus_geometry,
    mds_floor,
    mds_with_notes,
)
from .options import Analysis
from .scores import score_encodings

__all__ = [
    "DEFAULT_TOLERANCE",
    "Drift",
    "RankChange",
    "corpus_drift",
    "count_pair",
    "fitted_stress",
    "geometry_reference",
    "no_drift_reference",
    "position_hellinger",
]

DEFAULT_TOLERANCE = 0.1
DEFAULT_DRAWS = 5
# Re-splits behind the geometry stress's reference (each costs two geometries).
GEOMETRY_DRAWS = 10
DRIFT_Z = 3.0
_SHARED = ("tokenizer", "view", "max_len")


def _widen(c: Counts, v: int) -> Counts:
    if c.vocab_size == v:
        return c

    def wide(x: sp.csr_matrix) -> sp.csr_matrix:
        m = sp.csr_matrix(x, copy=True)
        m.resize((m.shape[0], v))
        return m

    return Counts(wide(c.matrix), {**c.meta, "vocab_size": v}, c.vocab, tuple(map(wide, c.shards)))


def _check_compatible(a: Counts, b: Counts, names: tuple[str, str] | None = None) -> None:
    """``names``: the files the user gave (a counts file's stored source is the corpus it was
    counted from, which the user may not have passed)."""
    na, nb = names or (a.meta.get("source", "A"), b.meta.get("source", "B"))
    for key in _SHARED:
        va, vb = a.meta.get(key), b.meta.get(key)
        if va != vb:
            raise PosdiagError(
                f"cannot compare {na} and {nb}: "
                f"{key} {va!r} vs {vb!r}; both corpora must share tokenizer, view and max_len"
            )


def count_pair(
    a: str,
    b: str,
    reading: Reading | None = None,
    *,
    column_b: str | None = None,
    seed: int = 0,
    progress: ProgressFn | None = None,
    shards: int = 0,
) -> tuple[Counts, Counts]:
    """Counts of two corpora whose token ids agree, on a common vocabulary width.

    Each side is counted as :func:`posdiag.counts.corpus.corpus_counts` would with ``reading``
    (the same options for both); a counts ``.npz`` fixes tokenizer, view and max_len for the
    other side, and per-run ``whitespace`` ids are renumbered onto one vocabulary. ``column_b``:
    B's text column when it differs from A's. ``shards=K``: ``K`` seeded shards of each text
    side, as ``posdiag stress`` counts them.
    """
    from ..corpus.sources import open_source

    if a == b == "-":
        raise PosdiagError(
            "'-' (stdin) can be read only once; save it to a file to compare it with itself"
        )
    r = reading if reading is not None else Reading()
    sides = [(a, r.column), (b, column_b if column_b is not None else r.column)]
    loaded: dict[tuple[str, str | None], Counts] = {}
    for side in sides:
        name, column = side
        if is_counts_file(name) and side not in loaded:
            loaded[side] = corpus_counts(
                name,
                column=column,
                tokenizer=r.tokenizer,
                view_name=r.view,
                max_len=r.max_len,
                limit=r.limit,
                sample=r.sample,
            )
    if loaded:
        meta = next(iter(loaded.values())).meta
        r = replace(
            r,
            tokenizer=r.tokenizer or str(meta.get("tokenizer")),
            view=r.view or str(meta.get("view")),
            max_len=r.max_len if r.max_len is not None else int(meta.get("max_len", 512)),
        )
    # Both checked before any counting (one file may be read twice, e.g. two of its columns).
    sources = {
        side: open_source(
            side[0],
            side[1],
            limit=r.limit,
            sample=r.sample,
            seed=seed,
            data_dir=r.data_dir,
            dtype=r.dtype,
        )
        for side in sides
        if side not in loaded
    }
    out = [
        loaded[side]
        if side in loaded
        else corpus_counts(
            side[0],
            progress=progress,
            seed=seed,
            shards=shards,
            shard_seed=seed,
            # --vocab-size is the width of token id files only; text sides keep the tokenizer's.
            **replace(
                r,
                column=side[1],
                vocab_size=r.vocab_size if sources[side].is_ids else None,
            ).kwargs(),
        )
        for side in sides
    ]
    ca, cb = out
    _check_compatible(ca, cb, (a, b))
    # Per-run (whitespace) ids of separate runs are renumbered onto one vocabulary.
    ca, cb = align_vocabularies([ca, cb], [a, b])
    v = max(ca.vocab_size, cb.vocab_size)
    return _widen(ca, v), _widen(cb, v)


def _pooled(a: Counts, b: Counts, n: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """A+B's counts on positions ``0..n-1`` (csr, one vocabulary width) and A's supports (n,)."""
    v = max(a.vocab_size, b.vocab_size)
    ma = sp.csr_matrix(_widen(a, v).matrix[:n])
    pooled = sp.csr_matrix(ma + sp.csr_matrix(_widen(b, v).matrix[:n]))
    return pooled, np.asarray(ma.sum(axis=1)).ravel()


def position_hellinger(a: Counts, b: Counts, n: int) -> np.ndarray:
    """Hellinger distance between A's and B's token distributions at positions ``0..n-1``.

    Returns
    -------
    ndarray of shape (n,)
        Values in [0, 1]; ``d_i = sqrt(1 - sum_v sqrt(mu_A,i[v] mu_B,i[v]))``.
    """
    v = max(a.vocab_size, b.vocab_size)
    rows = []
    for c in (a, b):
        m = sp.csr_matrix(_widen(c, v).matrix[:n], dtype=np.float64)
        sup = np.asarray(m.sum(axis=1)).ravel()
        if np.any(sup <= 0):
            raise PosdiagError("every compared position needs a positive support in both corpora")
        s = sp.csr_matrix(sp.diags(1.0 / sup) @ m)
        s.data = np.sqrt(s.data)
        rows.append(s)
    # ||s_A - s_B|| / sqrt(2) is exactly 0 for identical rows (sqrt(1 - BC) leaves ~1e-8).
    diff = sp.csr_matrix(rows[0] - rows[1])
    sq = np.asarray(diff.multiply(diff).sum(axis=1)).ravel() / 2.0
    return np.sqrt(np.clip(sq, 0.0, 1.0))


def no_drift_reference(
    a: Counts, b: Counts, n: int, *, draws: int = DEFAULT_DRAWS, seed: int = 0
) -> np.ndarray:
    """Per-position Hellinger distance expected when A and B do NOT differ: each position's
    pooled tokens re-split into groups of A's and B's sizes (multivariate hypergeometric),
    averaged over ``draws`` seeded draws.

    Returns
    -------
    ndarray of shape (n,)
    """
    draws = check_int("draws", draws, 1)
    pooled, sup_a = _pooled(a, b, n)
    rng = np.random.default_rng(seed)
    out = np.zeros(n)
    ptr, data = pooled.indptr, pooled.data
    for i in range(n):
        colors = data[ptr[i] : ptr[i + 1]].astype(np.int64)  # the tokens seen at i only
        na, total = int(sup_a[i]), int(colors.sum())
        if na == 0 or na == total:
            raise PosdiagError("every compared position needs a positive support in both corpora")
        acc = 0.0
        for _ in range(draws):
            xa = rng.multivariate_hypergeometric(colors, na, method="marginals")
            xb = colors - xa
            diff = np.sqrt(xa / na) - np.sqrt(xb / (total - na))
            acc += float(np.sqrt(min(1.0, float(diff @ diff) / 2.0)))
        out[i] = acc / draws
    return out


def _resplit(a: Counts, b: Counts, n: int, rng: np.random.Generator) -> tuple[Counts, Counts]:
    """One random re-split of A+B (positions ``0..n-1``) into groups of A's and B's sizes: whole
    shards dealt out when both sides have them (the cross-fit then splits by sequence, as the
    observed one does), else each position's pooled tokens (as :func:`no_drift_reference`)."""
    v = max(a.vocab_size, b.vocab_size)
    if a.shards and b.shards:
        pool = [sp.csr_matrix(x[:n]) for x in (*_widen(a, v).shards, *_widen(b, v).shards)]
        order = rng.permutation(len(pool))
        groups = [
            tuple(pool[k] for k in order[: len(a.shards)]),
            tuple(pool[k] for k in order[len(a.shards) :]),
        ]
        return tuple(  # type: ignore[return-value]
            Counts(sp.csr_matrix(sum(g[1:], g[0])), c.meta, None, g)
            for g, c in zip(groups, (a, b), strict=True)
        )
    pooled, sup_a = _pooled(a, b, n)
    ptr = pooled.indptr
    drawn = [
        rng.multivariate_hypergeometric(
            pooled.data[ptr[i] : ptr[i + 1]].astype(np.int64), int(sup_a[i]), method="marginals"
        )
        for i in range(n)
    ]
    # Copies: sort_indices and eliminate_zeros work in place, pooled is still needed.
    xa = sp.csr_matrix((np.concatenate(drawn), pooled.indices, ptr), (n, v), np.int64, copy=True)
    xa.sort_indices()
    xb = sp.csr_matrix(pooled - xa, dtype=np.int64)
    xa.eliminate_zeros()
    xb.eliminate_zeros()
    return Counts(xa, a.meta), Counts(xb, b.meta)


def geometry_reference(
    a: Counts,
    b: Counts,
    n: int,
    *,
    draws: int = GEOMETRY_DRAWS,
    seed: int = 0,
    estimator: str = DEFAULT_ESTIMATOR,
) -> tuple[float, ...]:
    """The geometry stress between A and B expected when they do NOT differ: that of each of
    ``draws`` seeded re-splits (:func:`_resplit`) on positions ``0..n-1``, estimated as the
    observed one is.

    Returns
    -------
    tuple of float, length draws
    """
    draws = check_int("draws", draws, 2)
    rng = np.random.default_rng([seed, 0x6E0])  # not the per-position reference's stream
    out = []
    for _ in range(draws):
        xa, xb = _resplit(a, b, n, rng)
        # Every compared position the estimator can use is kept.
        low = CROSSFIT_MIN_TOKENS if estimator == "crossfit" else 1
        ga, gb = (
            corpus_geometry(x, low, estimator=estimator, seed=seed, plain=False, spectrum=False)
            for x in (xa, xb)
        )
        m = min(ga.n_eff, gb.n_eff)
        out.append(fitted_stress(_prefix(gb, m).mds.gram, _prefix(ga, m).mds.gram))
    return tuple(out)


def fitted_stress(b_h: np.ndarray, b_e: np.ndarray) -> float:
    """``min_{c>=0} ||B_H - c B_E||_F / ||B_H||_F`` from the residual itself (``B_H``, ``B_E``
    (n, n)): :func:`posdiag.geometry.core.stress`, but exactly ~0 (not ~1e-8) for a multiple."""
    nh = float(np.linalg.norm(b_h))
    if nh == 0.0:
        raise PosdiagError("the corpus Gram matrix is zero: all positions are identical")
    ee = float(np.vdot(b_e, b_e))
    c = max(0.0, float(np.vdot(b_h, b_e))) / ee if ee > 0 else 0.0
    return min(1.0, float(np.linalg.norm(b_h - c * b_e)) / nh)


def _prefix(geo: CorpusGeometry, n: int) -> CorpusGeometry:
    """The geometry of positions ``0..n-1``: distances are a sub-matrix, MDS is recomputed."""
    if n == geo.n_eff:
        return geo
    summary = replace(geo.summary, n_eff=n)
    if geo.estimate is not None:
        # The BC block re-centred: the same estimator on fewer positions.
        est = restrict(geo.estimate, n)
        plain = restrict(geo.plain, n) if geo.plain is not None else None
        return CorpusGeometry(summary, est.distances, est.mds, (), est, plain, geo.counts, {})
    d = geo.distances[:n, :n]
    mds, notes = mds_with_notes(d)
    return CorpusGeometry(summary, d, mds, tuple(notes))


def _with_pairs(geo: CorpusGeometry, rank: int) -> CorpusGeometry:
    """``geo`` with at least ``rank`` eigenpairs (a partial spectrum grown, warm-started)."""
    mds = geo.mds
    if mds.total is None or mds.eigenvalues.size >= rank:
        return geo
    full_max = spectral.PARTIAL_FROM - 1  # read when called, as mds_of_gram does
    spec = spectral.partial_spectrum(
        mds.gram, (), min_rank=rank, max_rank=rank, start=mds.vectors, full_max=full_max
    )
    grown = MDS(
        eigenvalues=spec.eigenvalues,
        vectors=_fix_signs(spec.vectors),
        gram=mds.gram,
        total=spec.total,
        bottom=mds.bottom,
    )
    return replace(geo, mds=grown)


@dataclass(frozen=True)
class RankChange:
    """One encoding's stress and rank (1 = best) on A and on B, on the common positions."""

    name: str
    params: Mapping[str, Any]
    stress_a: float
    stress_b: float
    rank_a: int
    rank_b: int

    @property
    def changed(self) -> bool:
        return self.rank_a != self.rank_b


@dataclass(frozen=True)
class Drift:
    """How the positional geometry of corpus B differs from A's.

    Attributes
    ----------
    a, b : CorpusSummary
        Each corpus as analysed on its own (its own ``n_eff``).
    n : int
        Common positions compared, ``min(n_eff(A), n_eff(B))``.
    rank_a, rank_b : int
        Rank of A's (B's) MDS encoding used for the cross-stress, chosen by ``tolerance``
        when not given.
    a_on_b, b_optimum : float
        Stress of A's rank-``rank_a`` MDS encoding on B's geometry, and B's own optimum at
        that rank; ``b_on_a``, ``a_optimum``: the roles swapped.
    geometry_stress : float
        ``stress(B_H(B), B_H(A))``, symmetric in A and B.
    position_hellinger, position_reference : tuple of float, length n
        Hellinger distance between A's and B's distributions at each position, and the same
        expected without any drift (:func:`no_drift_reference`).
    rankings : tuple of RankChange
        In A's order, best first.
    geometry_reference : tuple of float
        ``geometry_stress`` between random re-splits of A+B (:func:`geometry_reference`).
    rank_reached_a, rank_reached_b : bool
        Whether the rank reaches ``tolerance`` (else it is the signal rank).
    floor_a, floor_b : float
        Each corpus's stress floor on the common positions.
    """

    a: CorpusSummary
    b: CorpusSummary
    n: int
    rank_a: int
    rank_b: int
    tolerance: float
    a_on_b: float
    b_optimum: float
    b_on_a: float
    a_optimum: float
    geometry_stress: float
    position_hellinger: tuple[float, ...]
    rankings: tuple[RankChange, ...]
    position_reference: tuple[float, ...] = ()
    seed: int = 0
    warnings: tuple[str, ...] = ()
    geometry_reference: tuple[float, ...] = ()
    rank_reached_a: bool = True
    rank_reached_b: bool = True
    floor_a: float = 0.0
    floor_b: float = 0.0
    rank_given: bool = False

    @property
    def reference_mean(self) -> float:
        return float(np.mean(self.geometry_reference)) if self.geometry_reference else math.nan

    @property
    def reference_sd(self) -> float:
        ref = self.geometry_reference
        return float(np.std(ref, ddof=1)) if len(ref) > 1 else math.nan

    @property
    def drift_threshold(self) -> float:
        """The geometry stress above which the drift is beyond sampling: more than every re-split
        and more than their mean + ``DRIFT_Z`` sd."""
        if not self.geometry_reference:
            return math.nan
        return max(max(self.geometry_reference), self.reference_mean + DRIFT_Z * self.reference_sd)

    @property
    def drifted(self) -> bool | None:
        """True: drift; False: no drift beyond sampling; None: no reference was computed."""
        return self.geometry_stress > self.drift_threshold if self.geometry_reference else None

    @property
    def verdict(self) -> str:
        if self.drifted is None:
            return "not judged (no reference)"
        return "drift" if self.drifted else "no drift beyond sampling"

    @property
    def above_reference(self) -> tuple[int, ...]:
        """Positions whose drift exceeds the no-drift reference."""
        above = np.greater(self.position_hellinger, self.position_reference)
        return tuple(int(i) for i in np.flatnonzero(above))

    @property
    def changed(self) -> tuple[RankChange, ...]:
        return tuple(r for r in self.rankings if r.changed)


def _key(name: str, params: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted((k, repr(v)) for k, v in params.items()))


def _default_rank(mds: MDS, tolerance: float) -> int:
    """Effective rank at ``tolerance``, else the signal rank (the eigenvalues above the
    magnitude of the most negative one), else for a partial spectrum whose smallest eigenvalue
    is unknown its top rank."""
    lam = np.asarray(mds.eigenvalues)
    if mds.total is None:
        hit = reached_rank(lam, tolerance)
        low = float(lam[-1])
    else:
        hits = np.flatnonzero(mds.stress_by_rank() <= tolerance)
        hit = int(hits[0] + 1) if hits.size else None
        low = mds.min_eigenvalue
    if hit is not None:
        return hit
    top = min(lam.size, mds.n - 1)
    if math.isnan(low):
        return top
    signal = int(np.sum(lam > abs(min(0.0, low))))
    return max(1, min(signal, top))


def _rankings(
    pa: CorpusGeometry,
    pb: CorpusGeometry,
    encodings: Sequence[str | tuple[str, Mapping[str, Any]]] | None,
) -> tuple[RankChange, ...]:
    """Each encoding's stress and rank on A and on B, in A's order."""
    sa, sb = score_encodings(pa, encodings), score_encodings(pb, encodings)
    rank_in_b = {_key(s.name, s.params): (i + 1, s.stress) for i, s in enumerate(sb)}
    rows = []
    for i, s in enumerate(sa):
        rk_b, st_b = rank_in_b[_key(s.name, s.params)]
        rows.append(RankChange(s.name, dict(s.params), s.stress, st_b, i + 1, rk_b))
    return tuple(rows)


def check_draws(draws: int) -> int:
    """``--draws``: 0 (no verdict) or >= 2 re-splits (a spread needs two)."""
    draws = check_int("draws", draws, 0)
    if draws == 1:
        raise PosdiagError("'draws' must be 0 (no verdict) or an int >= 2; got 1")
    return draws


def corpus_drift(
    a: Counts,
    b: Counts,
    analysis: Analysis = DEFAULT_ANALYSIS,
    *,
    rank: int | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    encodings: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
    geometry_draws: int = GEOMETRY_DRAWS,
) -> Drift:
    """Compare the positional geometry of two corpora counted with the same tokenizer.

    Parameters
    ----------
    a, b : Counts
        Same tokenizer, view and max_len (checked); vocabulary widths may differ.
    rank : int, optional
        Rank of both MDS encodings for the cross-stress; default each corpus's effective rank
        at ``tolerance`` on the common positions (else its signal rank).
    analysis : Analysis
        min_count, estimator and seed (also of the re-splits); no intervals.
    encodings : sequence, optional
        Encodings to rank (default set when None).
    geometry_draws : int
        Re-splits behind the geometry stress's no-drift reference (0: no verdict).
    """
    _check_compatible(a, b)
    tolerance = check_float("tolerance", tolerance, 0.0, 1.0)
    geometry_draws = check_draws(geometry_draws)
    # plain=False: no figure of the drift is a plug-in one.
    ga, gb = (analysed_geometry(x, analysis, plain=False) for x in (a, b))
    seed = analysis.seed
    n = min(ga.n_eff, gb.n_eff)
    pa, pb = _prefix(ga, n), _prefix(gb, n)
    if rank is not None:
        rank = check_int("rank", rank, 1, n - 1, hi_label="n-1")
        # A partial spectrum holds the top pairs only: grown to the rank asked for.
        pa, pb = _with_pairs(pa, rank), _with_pairs(pb, rank)
    ra = rank if rank is not None else _default_rank(pa.mds, tolerance)
    rb = rank if rank is not None else _default_rank(pb.mds, tolerance)
    by_a, by_b = pa.mds.stress_by_rank(), pb.mds.stress_by_rank()
    reached_a, reached_b = bool(by_a[ra - 1] <= tolerance), bool(by_b[rb - 1] <= tolerance)
    floor_a, floor_b = mds_floor(pa.mds), mds_floor(pb.mds)
    notes = [
        f"no MDS rank of {side} reaches stress <= {tolerance:g} on the common positions "
        f"(floor {fl:.3f}); the cross-stress uses {side}'s signal rank {r} instead"
        for side, r, ok, fl in (("A", ra, reached_a, floor_a), ("B", rb, reached_b, floor_b))
        if not ok and rank is None
    ]
    return Drift(
        a=ga.summary,
        b=gb.summary,
        n=n,
        rank_a=ra,
        rank_b=rb,
        tolerance=tolerance,
        a_on_b=fitted_stress(pb.mds.gram, gram_from_vectors(pa.mds.coordinates(ra))),
        # The MDS's own tail: exact for a partial spectrum too (from ||B_H||_F^2).
        b_optimum=float(by_b[ra - 1]),
        b_on_a=fitted_stress(pa.mds.gram, gram_from_vectors(pb.mds.coordinates(rb))),
        a_optimum=float(by_a[rb - 1]),
        geometry_stress=fitted_stress(pb.mds.gram, pa.mds.gram),
        position_hellinger=tuple(float(x) for x in position_hellinger(a, b, n)),
        rankings=_rankings(pa, pb, encodings),
        position_reference=tuple(float(x) for x in no_drift_reference(a, b, n, seed=seed)),
        seed=seed,
        warnings=tuple(
            dict.fromkeys((*ga.warnings, *gb.warnings, *pa.warnings, *pb.warnings, *notes))
        ),
        geometry_reference=(
            geometry_reference(
                a, b, n, draws=geometry_draws, seed=seed, estimator=analysis.estimator
            )
            if geometry_draws
            else ()
        ),
        rank_reached_a=reached_a,
        rank_reached_b=reached_b,
        floor_a=floor_a,
        floor_b=floor_b,
        rank_given=rank is not None,
    )
