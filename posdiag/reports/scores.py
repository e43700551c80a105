"""Every encoding scored against a corpus geometry, best first (docs/geometry.md section 4)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._util.threads import small_blas
from ..encodings import DEFAULT_SET, Encoding, make_encoding, parse_encoding, with_dim
from ..scoring.scores import (
    GramScorer,
    corpus_side,
    diagonal_sums,
    score_encoding,
    score_vectors_many,
)
from ..uncertainty.bootstrap import _mds_rank
from .analysis import CorpusGeometry

__all__ = ["EncodingRequest", "EncodingScore", "score_encodings"]


@dataclass(frozen=True)
class EncodingScore:
    """One row of the stress table (docs/geometry.md section 4); ``spearman`` may be NaN.

    ``ci_low``/``ci_high``: the shard bootstrap's interval (NaN: none); ``plain``: the stress
    against the plug-in geometry; ``in_sample``: for ``mds-r`` scored held-out, the in-sample
    eigenvalue tail (NaN otherwise).
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

    @property
    def ci_brief(self) -> str:
        """`` [lo, hi]`` at 3 decimals, as the readings quote it; "" without an interval."""
        return "" if math.isnan(self.ci_low) else f" [{self.ci_low:.3f}, {self.ci_high:.3f}]"

    def overlaps(self, other: EncodingScore) -> bool:
        """Whether both rows have intervals and the two overlap."""
        return (
            not math.isnan(self.ci_high)
            and other.ci_low <= self.ci_high
            and self.ci_low <= other.ci_high
        )


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
    """Every encoding scored, best first; ``noise``: the noise diagnostics' split-half sums
    are made in the same pass as the held-out ones."""
    with small_blas(geometry.n_eff):  # posdiag._util.threads: small dense work, one BLAS thread
        encs = [
            (make_encoding(nm, geometry.n_eff, p, mds=geometry.mds), preset)
            for nm, p, preset in _resolve(specs, geometry.n_eff, dim)
        ]
        b_h = geometry.mds.gram
        plain = geometry.plain
        ranks = [r for e, _ in encs if (r := _mds_rank(e)) is not None]
        heldout = geometry.heldout_stress(ranks, noise=noise)
        side = corpus_side(geometry.distances, b_h)  # the corpus side of every score, once
        # The mds-r tables are the leading columns of one another: scored together, in one pass.
        mds_r = [e for e, _ in encs if _mds_rank(e) and e.profile is None and e.vectors is not None]
        many = score_vectors_many(side, b_h, [e.vectors for e in mds_r if e.vectors is not None])
        batched = {id(e): m for e, m in zip(mds_r, many, strict=True)}
        plain_lags = None
        out = []
        for enc, preset in encs:
            if id(enc) in batched:
                m = batched[id(enc)]
            else:
                m = score_encoding(side, geometry.distances, b_h, enc)
            headline, in_sample = m.stress, float("nan")
            rank = _mds_rank(enc)
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
