"""The low-rank MDS encoding ``P = A B^T`` and its files (docs/geometry.md section 7): ``A = X_r``
(n, r) the MDS coordinates, ``B`` (d, r) orthonormal, so ``P`` (n, d) keeps ``X_r``'s distances.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .._util.atomic import atomic_outputs
from .._util.memory import require
from .._util.validate import check_int
from ..errors import PosdiagError
from .analysis import CorpusGeometry, CorpusSummary

__all__ = [
    "FILE_SUFFIXES",
    "LowRankEncoding",
    "check_dims",
    "eigenpair_encoding",
    "low_rank_encoding",
    "write_encoding",
]

FILE_SUFFIXES = (".safetensors", ".npy")
# How many leading eigenvalues the file's metadata records.
N_LEADING = 10


@dataclass(frozen=True)
class LowRankEncoding:
    """The rank-r MDS encoding in its minimal parametrisation.

    Attributes
    ----------
    A : ndarray of shape (n, r)
    B : ndarray of shape (d, r), orthonormal columns
    stress : float
        In-sample stress of the rank-r MDS encoding.
    meta : mapping
        String-valued metadata written into the file.
    heldout : float
        Held-out stress (the stress table's ``mds-r``); NaN for the plug-in.
    stress_se : float
        Standard error of ``stress`` when sampled (long contexts); NaN when exact.
    warnings : tuple of str
    """

    A: np.ndarray
    B: np.ndarray
    stress: float
    meta: Mapping[str, Any] = field(default_factory=dict)
    heldout: float = float("nan")
    stress_se: float = float("nan")
    warnings: tuple[str, ...] = ()

    @property
    def encoding(self) -> np.ndarray:
        """``P = A B^T``, of shape (n, d)."""
        return self.A @ self.B.T

    @property
    def n(self) -> int:
        return int(self.A.shape[0])

    @property
    def rank(self) -> int:
        return int(self.A.shape[1])

    @property
    def dim(self) -> int:
        return int(self.B.shape[0])

    @property
    def n_params(self) -> int:
        return self.rank * (self.n + self.dim)

    @property
    def dense_params(self) -> int:
        return self.n * self.dim


def _orthonormal(d: int, r: int, seed: int) -> np.ndarray:
    """A seeded (d, r) matrix with orthonormal columns and deterministic signs."""
    q, rr = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, r)))
    return q * np.where(np.diag(rr) < 0, -1.0, 1.0)[None, :]


def low_rank_encoding(
    geometry: CorpusGeometry, rank: int, dim: int, *, seed: int = 0
) -> LowRankEncoding:
    """Build ``P = A B^T`` from the corpus MDS.

    Parameters
    ----------
    rank : int
        In [1, n_eff-1].
    dim : int
        Model dimension ``d``, at least ``rank``.
    seed : int
        Seed of the orthonormal ``B``; the same seed gives the same file.
    """
    rank = check_int("rank", rank, 1, geometry.n_eff - 1, hi_label="n_eff-1")
    check_dims(geometry.n_eff, rank, dim, seed)
    stress = float(geometry.mds.stress_by_rank()[rank - 1])
    heldout = geometry.heldout_stress([rank]).get(rank, float("nan"))
    return eigenpair_encoding(
        geometry.summary,
        geometry.mds.eigenvalues,
        geometry.mds.coordinates(rank),
        dim,
        seed=seed,
        stress=stress,
        heldout=heldout,
        warnings=tuple(geometry.warnings),
    )


def check_dims(n_eff: int, rank: int, dim: int, seed: int) -> tuple[int, int]:
    """``(dim, seed)`` checked, and an ``n_eff x dim`` encoding that cannot fit refused."""
    dim = check_int("dim", dim, rank, lo_label="rank")
    seed = check_int("seed", seed, 0)
    # B (d x r) with its QR workspace, the n x d table and its float32 copy when written.
    require(f"an encoding of dimension {dim:,} (--dim)", 8 * dim * (4 * rank + 2 * n_eff))
    return dim, seed


def eigenpair_encoding(
    summary: CorpusSummary,
    eigenvalues: np.ndarray,
    coordinates: np.ndarray,
    dim: int,
    *,
    seed: int = 0,
    stress: float,
    heldout: float = float("nan"),
    stress_se: float = float("nan"),
    warnings: tuple[str, ...] = (),
) -> LowRankEncoding:
    """``P = A B^T`` with ``A`` the MDS ``coordinates`` (n, r) of the top eigenpairs (dense or
    Lanczos); the leading ``eigenvalues`` (descending) and ``stress_se`` when given go to the
    metadata."""
    n_eff, rank = coordinates.shape
    dim, seed = check_dims(n_eff, rank, dim, seed)
    s = summary
    meta = {
        "corpus": s.source,
        "tokenizer": s.tokenizer,
        "view": s.view,
        "max_len": str(s.max_len),
        "min_count": str(s.min_count),
        "n": str(n_eff),
        "r": str(rank),
        "d": str(dim),
        "seed": str(seed),
        "stress": repr(stress),
        "stress_heldout": repr(heldout),
        "eigenvalues": json.dumps([float(x) for x in eigenvalues[:N_LEADING]]),
        "posdiag_version": __version__,
    }
    if not math.isnan(stress_se):
        meta["stress_se"] = repr(stress_se)
    if s.units is not None:
        meta["group_prefix"] = str(s.units.prefix)
        meta["dedup"] = "true" if s.units.dedup else "false"
        if s.units.group_by is not None:
            meta["group_by"] = s.units.group_by
    return LowRankEncoding(
        coordinates, _orthonormal(dim, rank, seed), stress, meta, heldout, stress_se, warnings
    )


# Metadata keys whose string (safetensors metadata holds strings only) is a JSON number or list.
TYPED_META = ("max_len", "min_count", "n", "r", "d", "seed", "stress", "stress_se", "eigenvalues")


def typed_meta(meta: Mapping[str, str]) -> dict[str, Any]:
    """``meta`` with numbers and the eigenvalue list as JSON values, not strings."""
    return {k: json.loads(v) if k in TYPED_META else v for k, v in meta.items()}


def write_encoding(enc: LowRankEncoding, path: str | Path, *, force: bool = False) -> list[Path]:
    """Write ``enc`` atomically as ``.safetensors`` or ``.npy`` (+ ``.json`` metadata beside it);
    returns the files written."""
    p = Path(path)
    if p.suffix not in FILE_SUFFIXES:
        raise PosdiagError(
            f"'output' must end with {' or '.join(FILE_SUFFIXES)}; got {str(path)!r}"
        )
    if p.suffix == ".safetensors":
        from safetensors.numpy import save

        blob = save(
            {
                "encoding": np.ascontiguousarray(enc.encoding, dtype=np.float32),
                "A": np.ascontiguousarray(enc.A, dtype=np.float32),
                "B": np.ascontiguousarray(enc.B, dtype=np.float32),
            },
            metadata=dict(enc.meta),
        )
        with atomic_outputs([p], force) as (tmp,):
            tmp.write_bytes(blob)
        return [p]
    side = p.with_suffix(".json")
    with atomic_outputs([p, side], force) as (tmp, tmp_side):
        with open(tmp, "wb") as fh:
            np.save(fh, enc.encoding.astype(np.float32))
        tmp_side.write_text(json.dumps(typed_meta(enc.meta), indent=2, sort_keys=True) + "\n")
    return [p, side]
