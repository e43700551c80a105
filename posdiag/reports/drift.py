"""Geometry drift between two corpora (``posdiag diff A B``).

Both corpora are compared on their common supported positions ``0..n-1`` with
``n = min(n_eff(A), n_eff(B))``:

- cross-stress: the stress of A's rank-r MDS encoding against B's Gram ``B_H`` (and vice versa),
  next to B's own rank-r optimum (Eckart-Young), so the excess is the price of using A's encoding
  on B; it is 0 when the corpora are the same;
- geometry stress: ``stress(B_H(B), B_H(A))``, symmetric, 0 when the geometries are proportional;
- per-position Hellinger distance between A's and B's token distributions at each position;
- the standard encodings' stress on each corpus and the encodings whose ranking changes.

Token ids must mean the same token in both corpora. The built-in ``whitespace`` tokenizer numbers
words in order of first appearance, so :func:`count_pair` renumbers the ids of both sides (corpus
files or counts files, which store their vocabulary) onto one shared vocabulary
(:func:`posdiag.counts.core.align_vocabularies`).
"""

from __future__ import annotations

import math
import warnings
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
from ..geometry.core import MDS, _fix_signs, classical_mds, gram_from_vectors, reached_rank
from ..geometry.estimator import DEFAULT_ESTIMATOR, restrict
from .analysis import (
    DEFAULT_MIN_COUNT,
    CorpusGeometry,
    CorpusSummary,
    corpus_geometry,
    score_encodings,
)

__all__ = [
    "DEFAULT_TOLERANCE",
    "Drift",
    "RankChange",
    "corpus_drift",
    "count_pair",
    "fitted_stress",
    "no_drift_reference",
    "position_hellinger",
]

DEFAULT_TOLERANCE = 0.1
DEFAULT_DRAWS = 5
_SHARED = ("tokenizer", "view", "max_len")


def _widen(c: Counts, v: int) -> Counts:
    if c.vocab_size == v:
        return c
    m = sp.csr_matrix(c.matrix, copy=True)
    m.resize((m.shape[0], v))
    return Counts(m, {**c.meta, "vocab_size": v})


def _check_compatible(a: Counts, b: Counts) -> None:
    for key in _SHARED:
        va, vb = a.meta.get(key), b.meta.get(key)
        if va != vb:
            raise PosdiagError(
                f"cannot compare {a.meta.get('source', 'A')} and {b.meta.get('source', 'B')}: "
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
) -> tuple[Counts, Counts]:
    """Counts of two corpora whose token ids agree, on a common vocabulary width.

    Each side is counted as :func:`posdiag.counts.corpus.corpus_counts` would with ``reading``
    (default: every option at its default). A counts ``.npz`` fixes tokenizer, view and max_len for
    the
    other side; ``whitespace`` ids, which depend on the corpus they were counted from, are
    renumbered onto one vocabulary through the stored vocabularies. ``limit``, ``sample``,
    ``seed`` and ``data_dir`` apply to both sides, as in :func:`posdiag.corpus.sources.open_source`;
    token id files (``.npy``, ``.bin``) are counted with ``dtype`` and ``vocab_size`` in the
    packed view, as by :func:`posdiag.counts.corpus.corpus_counts`. ``column_b`` is B's text column
    when it differs from A's (``reading.column`` is then A's only).
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
    _check_compatible(ca, cb)
    # Per-run (whitespace) ids of separate runs are renumbered onto one vocabulary.
    ca, cb = align_vocabularies([ca, cb], [a, b])
    v = max(ca.vocab_size, cb.vocab_size)
    return _widen(ca, v), _widen(cb, v)


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
    # The difference form ||s_A - s_B|| / sqrt(2) is exactly 0 for identical rows, where
    # sqrt(1 - BC) would leave rounding noise of order 1e-8.
    diff = sp.csr_matrix(rows[0] - rows[1])
    sq = np.asarray(diff.multiply(diff).sum(axis=1)).ravel() / 2.0
    return np.sqrt(np.clip(sq, 0.0, 1.0))


def no_drift_reference(
    a: Counts, b: Counts, n: int, *, draws: int = DEFAULT_DRAWS, seed: int = 0
) -> np.ndarray:
    """Per-position Hellinger distance expected when A and B do NOT differ (permutation null).

    At each position the two corpora's sequences are pooled and re-split at random into groups
    of A's and B's sizes (a multivariate hypergeometric draw from the pooled counts); the
    Hellinger distance between the two groups, averaged over ``draws`` seeded draws, is what
    finite samples alone produce. A drift at or below it is not distinguishable from noise.

    Returns
    -------
    ndarray of shape (n,)
    """
    draws = check_int("draws", draws, 1)
    v = max(a.vocab_size, b.vocab_size)
    ma = sp.csr_matrix(_widen(a, v).matrix[:n])
    mb = sp.csr_matrix(_widen(b, v).matrix[:n])
    pooled = sp.csr_matrix(ma + mb)
    rng = np.random.default_rng(seed)
    out = np.zeros(n)
    # Rows read off indptr (getrow builds a sparse matrix per call, most of this loop's time).
    sup_a = np.asarray(ma.sum(axis=1)).ravel()
    ptr, data = pooled.indptr, pooled.data
    for i in range(n):
        colors = data[ptr[i] : ptr[i + 1]].astype(np.int64)  # tokens seen at i: O(nnz), not O(V)
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


def fitted_stress(b_h: np.ndarray, b_e: np.ndarray) -> float:
    """``min_{c>=0} ||B_H - c B_E||_F / ||B_H||_F`` from the residual itself.

    The same number as :func:`posdiag.geometry.core.stress` (docs/geometry.md section 4), computed
    so that it is exactly ~0 (not ~1e-8) when ``B_E`` is a multiple of ``B_H``, which a drift of a
    corpus against itself must show.
    """
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mds = classical_mds(d)
    return CorpusGeometry(summary, d, mds, tuple(str(w.message) for w in caught))


def _with_pairs(geo: CorpusGeometry, rank: int) -> CorpusGeometry:
    """``geo`` with at least ``rank`` eigenpairs: a partial spectrum's top pairs grown by the
    warm-started partial solver (the same Krylov space), a complete one unchanged."""
    mds = geo.mds
    if mds.total is None or mds.eigenvalues.size >= rank:
        return geo
    from ..geometry.spectral import (  # read when called, as mds_of_gram
        FULL_EIGH_MAX,
        partial_spectrum,
    )

    spec = partial_spectrum(
        mds.gram, (), min_rank=rank, max_rank=rank, start=mds.vectors, full_max=FULL_EIGH_MAX
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
        Rank of A's (B's) MDS encoding used for the cross-stress.
    tolerance : float
        Stress tolerance that chose the ranks when not given.
    a_on_b, b_optimum : float
        Stress of A's rank-``rank_a`` MDS encoding on B's geometry, and B's own optimum at
        that rank (``a_on_b >= b_optimum``, equal when the geometries agree).
    b_on_a, a_optimum : float
        The same with the roles swapped (rank ``rank_b``).
    geometry_stress : float
        ``stress(B_H(B), B_H(A))``, symmetric in A and B.
    position_hellinger : tuple of float, length n
        Hellinger distance between A's and B's distributions at each position.
    position_reference : tuple of float, length n
        The same distance expected without any drift (:func:`no_drift_reference`, seeded).
    rankings : tuple of RankChange
        In A's order, best first.
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

    @property
    def above_reference(self) -> tuple[int, ...]:
        """Positions whose drift exceeds the no-drift reference."""
        return tuple(
            i
            for i, (d, r) in enumerate(
                zip(self.position_hellinger, self.position_reference, strict=True)
            )
            if d > r
        )

    @property
    def changed(self) -> tuple[RankChange, ...]:
        return tuple(r for r in self.rankings if r.changed)


def _key(name: str, params: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted((k, repr(v)) for k, v in params.items()))


def _default_rank(mds: MDS | np.ndarray, tolerance: float) -> int:
    """Effective rank at ``tolerance``; below the cross-fit's stress floor (not reached), the
    signal rank: the eigenvalues above the magnitude of the most negative one.

    A partial spectrum (long contexts: the top ``k`` eigenvalues and ``||B_H||_F^2``) has exact
    stresses for ranks ``1..k``; when none reaches the tolerance, the signal rank among them if
    the smallest eigenvalue is known, else ``k`` (the lowest stress known). An array is a
    complete spectrum (descending eigenvalues).
    """
    lam = np.asarray(mds.eigenvalues if isinstance(mds, MDS) else mds)
    if not isinstance(mds, MDS) or mds.total is None:
        hit = reached_rank(lam, tolerance)
        low = float(lam[-1])
    else:
        hits = np.flatnonzero(mds.stress_by_rank() <= tolerance)
        hit = int(hits[0] + 1) if hits.size else None
        low = mds.min_eigenvalue
    if hit is not None:
        return hit
    top = min(lam.size, (mds.n if isinstance(mds, MDS) else lam.size) - 1)
    if math.isnan(low):
        return top
    signal = int(np.sum(lam > abs(min(0.0, low))))
    return max(1, min(signal, top))


def corpus_drift(
    a: Counts,
    b: Counts,
    *,
    min_count: int = DEFAULT_MIN_COUNT,
    rank: int | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    encodings: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    estimator: str = DEFAULT_ESTIMATOR,
) -> Drift:
    """Compare the positional geometry of two corpora counted with the same tokenizer.

    Parameters
    ----------
    a, b : Counts
        Same tokenizer, view and max_len (checked); vocabulary widths may differ.
    rank : int, optional
        Rank of both MDS encodings for the cross-stress; default each corpus's effective rank
        at ``tolerance`` on the common positions (its signal rank when the tolerance is below
        the stress floor of a cross-fitted geometry).
    encodings : sequence, optional
        Encodings to rank (default set when None).
    draws, seed : int
        Random re-splits behind the no-drift reference, and their seed (also of the
        cross-fit's splits).
    estimator : {"crossfit", "plugin"}
        Geometry estimator of both corpora (:func:`~posdiag.diagnostics.corpus_geometry`).
    """
    _check_compatible(a, b)
    tolerance = check_float("tolerance", tolerance, 0.0, 1.0)
    # plain=False: no figure of the drift is a plug-in one (one Gram product and one
    # eigensolve fewer per corpus).
    ga = corpus_geometry(a, min_count, estimator=estimator, seed=seed, plain=False)
    gb = corpus_geometry(b, min_count, estimator=estimator, seed=seed, plain=False)
    n = min(ga.n_eff, gb.n_eff)
    pa, pb = _prefix(ga, n), _prefix(gb, n)
    if rank is not None:
        rank = check_int("rank", rank, 1, n - 1, hi_label="n-1")
        # A partial spectrum (long contexts) holds the top pairs only: grow it to the rank asked
        # for, so its optimum and coordinates are exact rather than refused.
        pa, pb = _with_pairs(pa, rank), _with_pairs(pb, rank)
    ra = rank if rank is not None else _default_rank(pa.mds, tolerance)
    rb = rank if rank is not None else _default_rank(pb.mds, tolerance)
    a_on_b = fitted_stress(pb.mds.gram, gram_from_vectors(pa.mds.coordinates(ra)))
    b_on_a = fitted_stress(pa.mds.gram, gram_from_vectors(pb.mds.coordinates(rb)))
    sa = score_encodings(pa, encodings)
    sb = score_encodings(pb, encodings)
    rank_in_b = {_key(s.name, s.params): (i + 1, s.stress) for i, s in enumerate(sb)}
    rows = []
    for i, s in enumerate(sa):
        rk_b, st_b = rank_in_b[_key(s.name, s.params)]
        rows.append(RankChange(s.name, dict(s.params), s.stress, st_b, i + 1, rk_b))
    return Drift(
        a=ga.summary,
        b=gb.summary,
        n=n,
        rank_a=ra,
        rank_b=rb,
        tolerance=tolerance,
        a_on_b=a_on_b,
        # The MDS's own tail: exact for a partial spectrum too (from ||B_H||_F^2).
        b_optimum=float(pb.mds.stress_by_rank()[ra - 1]),
        b_on_a=b_on_a,
        a_optimum=float(pa.mds.stress_by_rank()[rb - 1]),
        geometry_stress=fitted_stress(pb.mds.gram, pa.mds.gram),
        position_hellinger=tuple(float(x) for x in position_hellinger(a, b, n)),
        rankings=tuple(rows),
        position_reference=tuple(
            float(x) for x in no_drift_reference(a, b, n, draws=draws, seed=seed)
        ),
        seed=seed,
        warnings=tuple(dict.fromkeys((*ga.warnings, *gb.warnings, *pa.warnings, *pb.warnings))),
    )
