"""How a corpus is analysed: one frozen :class:`Analysis` instead of six loose keyword arguments.

The reports take it as is (:func:`posdiag.reports.stress.stress_report`,
:func:`posdiag.reports.diagnosis.diagnose`, :func:`posdiag.reports.gate.run_gate`,
:func:`posdiag.reports.drift.corpus_drift`); the CLI
builds one from its options, as it builds a :class:`~posdiag.corpus.reading.Reading`. A progress
callback is not an option of the analysis: every report takes it as ``progress``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._util.defaults import DEFAULT_ESTIMATOR, DEFAULT_LEVEL, DEFAULT_MIN_COUNT
from .._util.validate import check_choice, check_int
from ..geometry.estimator import DEFAULT_SPLITS, ESTIMATORS
from ..uncertainty.bootstrap import check_level

__all__ = ["Analysis"]


@dataclass(frozen=True)
class Analysis:
    """The parameters of one analysis, checked when it is made (one message format:
    :mod:`posdiag._util.validate`).

    Attributes
    ----------
    min_count : int or None
        Positions with fewer sampling units (docs/geometry.md 2b) are dropped; >= 1. None:
        100 (:func:`posdiag.reports.gate.measure`: the config file's ``min-count``, else 100).
    estimator : {"crossfit", "plugin"}
        Geometry estimator (docs/geometry.md).
    seed : int
        Seed of the cross-fit's splits, the shards' bootstrap and the noise floor.
    level : float or None
        Coverage of the bootstrap intervals, in (0, 1); None: 0.95, and
        :func:`~posdiag.reports.stress.stress_report` on counts without shards skips the
        intervals altogether.
    replicates : int or None
        Bootstrap replicates (>= 2); None: the default for the corpus's length
        (:func:`posdiag.uncertainty.bootstrap.default_replicates`).
    splits : int
        Random splits of the cross-fit (>= 1).
    """

    min_count: int | None = None
    estimator: str = DEFAULT_ESTIMATOR
    seed: int = 0
    level: float | None = None
    replicates: int | None = None
    splits: int = DEFAULT_SPLITS

    def __post_init__(self) -> None:
        # The interval options first: the order the CLI has always checked them in.
        if self.level is not None:
            check_level(self.level)
        if self.replicates is not None:
            check_int("replicates", self.replicates, 2)
        if self.min_count is not None:
            check_int("min_count", self.min_count, 1)
        check_choice("estimator", self.estimator, ESTIMATORS)
        check_int("splits", self.splits, 1)

    @property
    def positions_from(self) -> int:
        """:attr:`min_count`, 100 when not given."""
        return DEFAULT_MIN_COUNT if self.min_count is None else self.min_count

    @property
    def coverage(self) -> float:
        """:attr:`level`, 0.95 when not given."""
        return DEFAULT_LEVEL if self.level is None else self.level
