"""A module imported on first attribute access.

``scipy.stats`` is slow to import (it pulls ``scipy.spatial`` and the distribution
tables) and only the rank correlations of ``compare`` and ``violation_rate`` need it; the
default ``stress`` run scores every built-in encoding through ``fastscore`` and never does.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name`` and imports it when an attribute is first read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


stats: Any = LazyModule("scipy.stats")
