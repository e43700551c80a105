"""The Dask client of a run: a running scheduler or a quiet ``LocalCluster``, whose workers drop
the harmless heartbeat-race traceback of Dask's shutdown (dask/distributed#7192).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

from ..errors import PosdiagError

if TYPE_CHECKING:
    from .distributed import Engine

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


@contextlib.contextmanager
def _client(engine: Engine) -> Iterator[Any]:
    try:
        from distributed import Client
    except ImportError:
        raise PosdiagError(
            "--engine dask needs dask.distributed: pip install 'posdiag[dask]'"
        ) from None
    if engine.scheduler is not None:
        try:
            client = Client(engine.scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise PosdiagError(f"--scheduler {engine.scheduler}: cannot connect ({exc})") from None
        with client:
            yield client
        return
    with local_cluster(engine.workers or os.cpu_count() or 1) as cluster, Client(cluster) as client:
        yield client


@contextlib.contextmanager
def local_cluster(workers: int) -> Iterator[Any]:
    """A ``LocalCluster`` of ``workers`` single-threaded processes, closed without noise."""
    from distributed import LocalCluster

    # One single-threaded process per worker: counting holds the GIL (np.add.at, tokenizing
    # in Python), so threads in one process would not count in parallel.
    with LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",  # any free port: 8787 may be taken
        silence_logs=logging.ERROR,
        # One thread per worker includes the tokenizers library's own thread pool.
        env={"TOKENIZERS_PARALLELISM": "false"},
        plugins={QuietShutdown()},
    ) as cluster:
        yield cluster


def _direct(client: Any) -> bool | None:
    """Fetch results straight from the workers (not twice over the network, through the
    scheduler) when the scheduler is on this machine; else Dask's ``direct-to-workers``."""

    import dask
    from distributed.comm import get_address_host

    setting = dask.config.get("distributed.client.direct-to-workers", None)
    if setting is not None:
        return bool(setting)
    try:
        host = get_address_host(client.scheduler.address)
    except (AttributeError, ValueError):
        return None
    return True if host in ("127.0.0.1", "localhost", "::1") else None
