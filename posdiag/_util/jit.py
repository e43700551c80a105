"""numba, imported where a kernel is first needed, and the one thing posdiag listens to in it.

posdiag's long-context kernels are compiled by numba on their first call after an install and
cached on disk (``cache=True``): that run takes tens of seconds more (docs/performance.md),
and a terminal user would see the progress bar's "geometry" stage stand still. numba
announces each real compilation (a cache load is not one) as a ``numba:compile`` event;
:func:`load_numba` registers one listener for them, and :func:`watch` lets the progress bar say
"compiling" while they run. The bundled corpus never calls a kernel, so it never imports numba.
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
