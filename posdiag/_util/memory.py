"""Memory guard: estimate what a request needs before allocating it, refuse what cannot fit.

The budget is the smallest of ``MemAvailable``, the room under ``RLIMIT_AS`` and the cgroup's
room, unless ``--max-memory`` / :func:`set_max_memory` / ``$POSDIAG_MAX_MEMORY`` sets it.
"""

from __future__ import annotations

import os
import re
import resource
from pathlib import Path

from ..errors import PosdiagError

__all__ = ["available_memory", "format_bytes", "parse_size", "require", "set_max_memory"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_explicit: int | None = None


def parse_size(text: str, name: str = "max-memory") -> int:
    """Bytes of ``'512M'``, ``'2G'``, ``'1.5g'``, ``'1000000'`` (binary units, optional ``B``)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)(?:i?[bB])?\s*", str(text))
    if m is None or float(m.group(1)) <= 0:
        raise PosdiagError(
            f"'{name}' must be a positive size such as 512M, 2G or 1000000; got {text!r}"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def set_max_memory(limit: int | str | None) -> None:
    """Use ``limit`` bytes (or a size string) as the budget; None returns to the automatic one."""
    global _explicit
    _explicit = None if limit is None else (limit if isinstance(limit, int) else parse_size(limit))


def format_bytes(n: float) -> str:
    """``1.5 GiB``-style text of a byte count."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def _proc_bytes(path: str, field: str) -> int | None:
    """The ``field: N kB`` line of a ``/proc`` file, in bytes (None when absent)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def _cgroup_room() -> int | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None


def available_memory() -> tuple[int, str]:
    """Bytes this process may still allocate, and where the figure comes from."""
    if _explicit is not None:
        return _explicit, "allowed by --max-memory"
    env = os.environ.get("POSDIAG_MAX_MEMORY")
    if env:
        return parse_size(env, "POSDIAG_MAX_MEMORY"), "allowed by $POSDIAG_MAX_MEMORY"
    found: list[tuple[int, str]] = []
    avail = _proc_bytes("/proc/meminfo", "MemAvailable")
    if avail is not None:
        found.append((avail, "available on this machine"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        # What the process maps now counts against RLIMIT_AS.
        mapped = _proc_bytes("/proc/self/status", "VmSize") or 0
        found.append((max(0, soft - mapped), "left under the address-space limit"))

    room = _cgroup_room()
    if room is not None:
        found.append((max(0, room), "left in this cgroup"))
    return min(found, default=(1 << 62, "assumed available"))


def require(what: str, nbytes: float) -> None:
    """Refuse a request of about ``nbytes`` that does not fit in :func:`available_memory`;
    ``what`` names it and the input size behind it (``"stress: 1,000 replicates x 20 ..."``)."""
    budget, source = available_memory()
    if nbytes > budget:
        raise PosdiagError(
            f"{what} needs about {format_bytes(nbytes)} of memory; {format_bytes(budget)} "
            f"{source} (raise it with --max-memory if the estimate is too high)"
        )
