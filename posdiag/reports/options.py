"""How a corpus is analysed: one frozen :class:`Analysis` every report takes (the CLI builds it
from its options, as it builds a :class:`~posdiag.corpus.reading.Reading`).
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
    """The parameters of one analysis, checked when it is made.

    Attributes
    ----------
    min_count : int or None
        Positions with fewer sampling units are dropped; None: 100 (``check``: the config
        file's ``min-count`` first).
    estimator : {"crossfit", "plugin"}
    seed : int
        Seed of the cross-fit's splits, the shards' bootstrap and the noise floor.
    level : float or None
        Coverage of the bootstrap intervals; None: 0.95 (and no intervals for counts without
        shards that say nothing of them).
    replicates : int or None
        Bootstrap replicates; None: :func:`posdiag.uncertainty.bootstrap.default_replicates`.
    splits : int
        Random splits of the cross-fit.
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
