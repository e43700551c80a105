"""Inspect an encoding file: separation, norms, effective rank, and with a corpus its stress and
monotonicity next to a random initialisation of the same shape (docs/geometry.md section 8).
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

# BERT / GPT-2 initialise position tables with N(0, 0.02^2) (only the norms shown depend on it).
BASELINE_STD = 0.02
INSPECT_TOLERANCES = (0.1, 0.05, 0.01)


def read_encoding_file(path: str | Path, tensor: str = "") -> tuple[np.ndarray, str]:
    """The table (rows, d) of an encoding file and the tensor it came from (``.safetensors``:
    ``tensor`` if given, else ``encoding``, else a checkpoint's known position-embedding name)."""
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
    rows = int(table.shape[0])
    require(f"{path}: inspecting {rows:,} positions", 8 * 8 * rows * rows)
    return table, read.tensor  # the name found (a checkpoint's known name), "" for .npy


@dataclass(frozen=True)
class TableFigures:
    """Shape-level figures of one table (rows = positions); ``effective_rank``: tolerance ->
    smallest rank of the table's own MDS reaching it."""

    rows: int
    dim: int
    separation: Separation
    norm_min: float
    norm_mean: float
    norm_max: float
    effective_rank: dict[float, int]


@dataclass(frozen=True)
class CorpusFit:
    """A table against a corpus geometry on positions ``0..n-1``: ``violations`` is
    ``(1 - Kendall tau)/2`` of ``d_H`` vs the table's distances; ``fitted_rank``: the rank of a
    posdiag MDS table fitted to this geometry, whose held-out stress is ``heldout``."""

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
    ``from_file``: the reading options taken from the file's metadata."""

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
    """Eigenvalues (n,) of the table's Gram ``(JP)(JP)^T``, descending; with ``d < n`` from the
    ``d x d`` ``(JP)^T (JP)`` and ``n - d`` zeros."""
    n, d = p.shape
    if d >= n:
        return np.sort(np.linalg.eigvalsh(gram_from_vectors(p)))[::-1]
    jp = p - p.mean(axis=0, keepdims=True)
    small = np.linalg.eigvalsh(jp.T @ jp)
    return np.concatenate([np.sort(small)[::-1], np.zeros(n - d)])


def _figures(p: np.ndarray, tol: float) -> TableFigures:
    norms = np.linalg.norm(p, axis=1)
    lam = _table_eigenvalues(p)
    eff = {t: effective_rank(lam, t) for t in INSPECT_TOLERANCES} if lam[0] > 0 else {}
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
    """Figures of ``table`` (rows, d) and of a seeded ``N(0, 0.02^2)`` baseline of its shape, and
    their fit to ``geometry`` on positions ``0..min(rows, n_eff)-1`` when given.
    ``fitted_rank``: the table is posdiag's rank-r MDS encoding of this geometry (its held-out
    stress is computed beside it)."""
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
