"""Parameter checks at public entry points, with one message format everywhere.

``'rank' must be an int in [1, n_eff-1=41]; got 0`` -- the parameter, the rule, the value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import PosdiagError

__all__ = ["check_int", "check_float", "check_choice"]


def _bound(value: float | None, label: str | None) -> str:
    if value is None:
        return "inf"
    return f"{label}={value}" if label else str(value)


def check_int(
    name: str,
    value: Any,
    lo: int | None = None,
    hi: int | None = None,
    *,
    lo_label: str | None = None,
    hi_label: str | None = None,
) -> int:
    """Return ``value`` as an int if it is an integer in ``[lo, hi]``, else raise."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and isinstance(value, float):
        ok = math.isfinite(value) and value.is_integer()
    if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise PosdiagError(
            f"'{name}' must be an int in [{_bound(lo, lo_label)}, {_bound(hi, hi_label)}]; "
            f"got {value!r}"
        )
    return int(value)


def check_float(
    name: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float:
    """Return ``value`` as a finite float in ``[lo, hi]`` (or ``(lo, hi]``), else raise."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    below = ok and lo is not None and (value < lo or (lo_open and value == lo))
    if not ok or below or (hi is not None and value > hi):
        left = "(" if lo_open else "["
        lo_s = "-inf" if lo is None else f"{lo:g}"
        hi_s = "inf" if hi is None else f"{hi:g}"
        raise PosdiagError(f"'{name}' must be a float in {left}{lo_s}, {hi_s}]; got {value!r}")
    return float(value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise listing them."""
    if value not in choices:
        raise PosdiagError(f"'{name}' must be one of {', '.join(choices)}; got {value!r}")
    return str(value)
