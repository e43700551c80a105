"""numba, imported where a kernel is first needed, and its ``numba:compile`` events, which let
the progress bar say "compiling" during a first run's compilations (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

__all__ = ["load_numba", "watch"]

_WATCHERS: list[Callable[[bool], None]] = []
# Whether the listener is registered, and how deep the compilations in progress are nested
# (compiling a kernel compiles the helpers it calls inside it).
_STATE = {"registered": 0, "depth": 0}


def load_numba() -> ModuleType:
    """``import numba``, with the compile listener registered on the first call."""
    import numba

    if not _STATE["registered"]:
        from numba.core import event

        event.register("numba:compile", _listener(event))
        _STATE["registered"] = 1
    return numba


def _listener(event: Any) -> Any:
    class Compiles(event.Listener):
        def on_start(self, _: object) -> None:
            _STATE["depth"] += 1
            if _STATE["depth"] == 1:
                _tell(True)

        def on_end(self, _: object) -> None:
            _STATE["depth"] = max(0, _STATE["depth"] - 1)
            if _STATE["depth"] == 0:
                _tell(False)

    return Compiles()


def _tell(compiling: bool) -> None:
    for callback in tuple(_WATCHERS):
        callback(compiling)


@contextmanager
def watch(callback: Callable[[bool], None]) -> Iterator[None]:
    """Inside the ``with`` block, ``callback(True)`` when numba starts compiling and
    ``callback(False)`` when it has finished (nested compilations count once)."""
    _WATCHERS.append(callback)
    try:
        yield
    finally:
        _WATCHERS.remove(callback)
