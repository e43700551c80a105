"""Atomic file output: a temporary file beside the target, renamed into place only when complete.

An interrupted run (error, Ctrl-C) leaves neither a partial file nor a stray temporary.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .errors import PosdiagError

__all__ = ["check_output", "atomic_outputs"]


def check_output(path: str | Path, force: bool) -> Path:
    """Refuse a target whose folder is missing, or that exists when ``force`` is false."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise PosdiagError(f"{path}: folder {str(parent)!r} does not exist")
    if p.is_dir():
        raise PosdiagError(f"{path}: is a directory; expected a file name")
    if p.exists() and not force:
        raise PosdiagError(f"{path}: already exists; pass --force to overwrite")
    return p


@contextmanager
def atomic_outputs(paths: Sequence[str | Path], force: bool) -> Iterator[list[Path]]:
    """Yield temporary paths to write; on success rename each onto its target.

    All targets are checked before anything is written, so a refusal writes nothing.
    """
    targets = [check_output(p, force) for p in paths]
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    temps = [t.with_name(f".{t.name}.{tag}.tmp") for t in targets]
    try:
        yield temps
        for tmp, target in zip(temps, targets, strict=True):
            os.replace(tmp, target)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
