"""Inspect an encoding file: separation, norms, effective rank, and, with a corpus, its stress and
monotonicity against the corpus geometry next to a random initialisation of the same shape
(docs/geometry.md section 8; the paper's comparison of a trained BERT table with its
initialisation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._util.memory import require
from .._util.validate import check_float, check_int
from ..encodings import read_position_table
from ..errors import PosdiagError
from ..geometry.core import (
    Separation,
    effective_rank,
    gram_from_distances,
    gram_from_vectors,
    pairwise_distances,
    separation,
    stress,
    violation_rate,
)
from .analysis import CorpusGeometry, CorpusSummary

__all__ = [
    "BASELINE_STD",
    "CorpusFit",
    "Inspection",
    "TableFigures",
    "inspect_table",
    "read_encoding_file",
]

# BERT / GPT-2 initialise position tables with N(0, 0.02^2); every figure here is scale-free,
# so the value only matters for the norms shown.
BASELINE_STD = 0.02
INSPECT_TOLERANCES = (0.1, 0.05, 0.01)


def read_encoding_file(path: str | Path, tensor: str = "") -> tuple[np.ndarray, str]:
    """The table of an encoding file and the tensor it came from.

    ``.npy``: the array. ``.safetensors``: ``tensor`` if given, else ``encoding`` (files from
    ``posdiag build-encoding``), else a known position-embedding name of a checkpoint.

    Returns
    -------
    (ndarray of shape (rows, d), str)
    """
    p = Path(path)
    if p.suffix == ".safetensors" and not tensor and p.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(p), framework="np") as fh:
                if "encoding" in fh.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    tensor = "encoding"
        except Exception:  # noqa: BLE001 - read_position_table below reports the file's problem
            pass
    read = read_position_table(str(p), tensor)
    table = read.rows
    if table.shape[0] < 2:
        raise PosdiagError(f"{path}: an encoding table needs >= 2 rows; got {table.shape[0]}")
    # Distances, Gram matrix and the MDS of the table and of its random baseline: n x n each.
    rows = int(table.shape[0])
    require(f"{path}: inspecting {rows:,} positions", 8 * 8 * rows * rows)
    return table, read.tensor  # the name found (a checkpoint's known name), "" for .npy


@dataclass(frozen=True)
class TableFigures:
    """Shape-level figures of one table (rows = positions).

    ``norms`` are the row norms; ``effective_rank`` maps a stress tolerance to the smallest rank
    of the table's own MDS reaching it (the table's distances as the target geometry).
    """

    rows: int
    dim: int
    separation: Separation
    norm_min: float
    norm_mean: float
    norm_max: float
    effective_rank: dict[float, int]


@dataclass(frozen=True)
class CorpusFit:
    """A table against a corpus geometry on positions ``0..n-1``.

    ``violations`` is ``(1 - Kendall tau)/2`` of ``d_H`` vs the table's distances.
    ``fitted_rank``: the rank of a posdiag MDS table fitted to this very geometry (its stress
    is then in-sample), None otherwise; ``heldout`` is then that rank's held-out stress, the
    stress table's ``mds-r`` (NaN for the plug-in).
    """

    n: int
    stress: float
    violations: float
    baseline_stress: float
    baseline_violations: float
    fitted_rank: int | None = None
    heldout: float = float("nan")


@dataclass(frozen=True)
class Inspection:
    """Everything ``posdiag inspect`` prints; ``corpus``/``fit`` are None without a corpus.

    ``from_file`` holds the reading options taken from the encoding file's metadata (key ->
    value); ``warnings`` the conflicts and row-count mismatches to state loudly.
    """

    path: str
    tensor: str
    table: TableFigures
    baseline: TableFigures
    baseline_seed: int
    corpus: CorpusSummary | None = None
    fit: CorpusFit | None = None
    from_file: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _table_eigenvalues(p: np.ndarray) -> np.ndarray:
    """Eigenvalues of the table's Gram ``(JP)(JP)^T`` (n x n), descending.

    With ``d < n`` they are those of the ``d x d`` matrix ``(JP)^T (JP)`` followed by ``n - d``
    zeros (same non-zero spectrum): ``O(n d^2 + d^3)`` instead of an ``n x n`` eigensolve
    (4,096 positions: 64 times the work of 1,024).
    """
    n, d = p.shape
    if d >= n:
        return np.sort(np.linalg.eigvalsh(gram_from_vectors(p)))[::-1]
    jp = p - p.mean(axis=0, keepdims=True)
    small = np.linalg.eigvalsh(jp.T @ jp)
    return np.concatenate([np.sort(small)[::-1], np.zeros(n - d)])


def _figures(p: np.ndarray, tol: float) -> TableFigures:
    norms = np.linalg.norm(p, axis=1)
    lam = _table_eigenvalues(p)
    eff = {}
    if lam[0] > 0:
        eff = {t: effective_rank(lam, t) for t in INSPECT_TOLERANCES}
    return TableFigures(
        rows=int(p.shape[0]),
        dim=int(p.shape[1]),
        separation=separation(p, tol),
        norm_min=float(norms.min()),
        norm_mean=float(norms.mean()),
        norm_max=float(norms.max()),
        effective_rank=eff,
    )


def inspect_table(
    table: np.ndarray,
    geometry: CorpusGeometry | None = None,
    *,
    path: str = "<table>",
    tensor: str = "",
    collapse_tol: float = 0.01,
    seed: int = 0,
    from_file: Mapping[str, Any] | None = None,
    warnings: tuple[str, ...] = (),
    fitted_rank: int | None = None,
) -> Inspection:
    """Figures of ``table`` (rows, d), and its fit to ``geometry`` when given.

    ``fitted_rank``: the table is posdiag's rank-r MDS encoding of this geometry
    (:func:`posdiag.encodings.file_meta.fitted_rank`): its stress is in-sample, and the held-out one
    (the stress table's ``mds-r``) is computed beside it.

    The baseline is a ``N(0, 0.02^2)`` table of the same shape (seed ``seed``). With a corpus, the
    comparison uses positions ``0..min(rows, n_eff)-1``.
    """
    t = np.asarray(table, dtype=np.float64)
    if t.ndim != 2 or t.shape[0] < 2:
        raise PosdiagError(f"{path}: table must be 2-D with >= 2 rows; got shape {t.shape}")
    collapse_tol = check_float("collapse_tol", collapse_tol, 0.0)
    seed = check_int("seed", seed, 0)
    base = np.random.default_rng(seed).normal(0.0, BASELINE_STD, size=t.shape)
    figs, base_figs = _figures(t, collapse_tol), _figures(base, collapse_tol)
    told = dict(from_file or {})
    if geometry is None:
        return Inspection(path, tensor, figs, base_figs, seed, None, None, told, tuple(warnings))
    n = min(t.shape[0], geometry.n_eff)
    if n < 2:
        raise PosdiagError(f"{path}: fewer than 2 positions to compare with the corpus")
    d_h = geometry.distances[:n, :n]
    b_h = geometry.mds.gram if n == geometry.n_eff else gram_from_distances(d_h)

    def fit(p: np.ndarray) -> tuple[float, float]:
        return stress(b_h, gram_from_vectors(p[:n])), violation_rate(d_h, pairwise_distances(p[:n]))

    s, v = fit(t)
    bs, bv = fit(base)
    heldout = math.nan
    if fitted_rank is not None and n == geometry.n_eff and fitted_rank < n:
        heldout = geometry.heldout_stress([fitted_rank]).get(fitted_rank, math.nan)
    else:
        fitted_rank = None
    fitted = CorpusFit(n, s, v, bs, bv, fitted_rank, heldout)
    return Inspection(
        path, tensor, figs, base_figs, seed, geometry.summary, fitted, told, tuple(warnings)
    )
