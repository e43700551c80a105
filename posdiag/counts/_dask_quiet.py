"""A worker plugin that keeps one race of Dask's shutdown off stderr (imported with dask only).

A worker whose heartbeat meets a scheduler that has just removed it logs a ``CommClosedError``
traceback (dask/distributed#7192) after a run that succeeded. Losing a heartbeat is harmless: a
worker that is really lost is rerun by Dask, and a failing piece reaches the client as its
exception. Only that record is dropped.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

HEARTBEAT_RACE = "Failed to communicate with scheduler during heartbeat"


class ShutdownNoise(logging.Filter):
    """Drops the heartbeat-race record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(HEARTBEAT_RACE)


class QuietShutdown(WorkerPlugin):
    """Installs :class:`ShutdownNoise` on the worker's logger (also after a restart)."""

    name = "posdiag-quiet-shutdown"

    def setup(self, worker: Any) -> None:
        log = logging.getLogger("distributed.worker")
        if not any(isinstance(f, ShutdownNoise) for f in log.filters):
            log.addFilter(ShutdownNoise())
