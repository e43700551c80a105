"""Atomic, exclusive file output: all targets appear complete, or none does (docs/cli.md).

Outputs are written into a private temporary folder beside their targets, then each is linked
to its name (exclusive: of two runs exactly one wins) or, with ``force``, replaces a regular
file. A failure or signal while placing a set removes what was placed and restores what it
replaced; the clean-up runs inside :func:`posdiag._util.signals.deferred_signals`.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..errors import PosdiagError

__all__ = ["atomic_outputs", "check_output", "completed_outputs", "forget_outputs"]

# Outputs this command placed whole (reset per command by the CLI, posdiag.cli.app._Group).
_completed: list[str] = []


def completed_outputs() -> tuple[str, ...]:
    """The outputs placed whole since :func:`forget_outputs`, in order."""
    return tuple(_completed)


def forget_outputs() -> None:
    _completed.clear()


_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large (file system or ulimit -f)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
}


def _reason(exc: OSError) -> str:
    return _REASONS.get(exc.errno or -1) or exc.strerror or type(exc).__name__


def _check_replaceable(p: Path, path: str | Path) -> None:
    """Refuse to replace anything but a regular file or a symbolic link."""
    mode = os.lstat(p).st_mode
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(p).st_mode  # what the link points at, when it points anywhere
        except OSError:
            return
    if stat.S_ISREG(mode):
        return
    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
    raise PosdiagError(f"{path}: is {kind} (e.g. a device); refusing to replace it")


def check_output(path: str | Path, force: bool) -> Path:
    """Refuse a target whose folder is missing, that exists (a dangling link too) without
    ``force``, or that is not a regular file or a link."""

    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise PosdiagError(f"{path}: folder {str(parent)!r} does not exist")
    if p.is_dir():
        raise PosdiagError(f"{path}: is a directory; expected a file name")
    if os.path.lexists(p):
        if not force:
            raise PosdiagError(f"{path}: already exists; pass --force to overwrite")
        _check_replaceable(p, path)
    return p


def _place_exclusive(tmp: Path, target: Path) -> None:
    """Give ``tmp``'s file the name ``target``, failing if the name exists (atomic)."""
    try:
        os.link(tmp, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # A file system without hard links: claim the name with O_EXCL, then move onto it.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        os.replace(tmp, target)


@contextmanager
def atomic_outputs(paths: Sequence[str | Path], force: bool) -> Iterator[list[Path]]:
    """Yield temporary paths to write; on success move each onto its target, all or none.

    All targets are checked before anything is written, so a refusal writes nothing.

    Raises
    ------
    PosdiagError
        A target exists (without ``force``; also when another process created it meanwhile),
        is not a regular file (with ``force``), or cannot be written (full disk, permissions).
    """
    from .signals import deferred_signals

    targets = [check_output(p, force) for p in paths]
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    folders: dict[Path, Path] = {}
    temps: list[Path] = []
    placed: list[Path] = []  # targets this call created or replaced
    backups: dict[Path, Path] = {}  # target -> the file it replaced (with force)
    done = False
    try:
        for t in targets:
            parent = t.parent
            if parent not in folders:
                folder = parent / f".posdiag-{tag}.tmp"
                folders[parent] = folder  # registered for removal before it exists
                try:
                    folder.mkdir(mode=0o700)
                except OSError as exc:
                    del folders[parent]  # not ours (it was not made)
                    raise PosdiagError(f"{t}: cannot write ({_reason(exc)})") from None
            temps.append(folders[parent] / t.name)
        try:
            yield temps
        except OSError as exc:
            if exc.filename is not None and Path(str(exc.filename)) in temps:
                target = targets[temps.index(Path(str(exc.filename)))]
                raise PosdiagError(f"{target}: cannot write ({_reason(exc)})") from None
            if exc.filename is None:
                raise PosdiagError(
                    f"{', '.join(map(str, targets))}: cannot write ({_reason(exc)})"
                ) from None
            raise
        for tmp, target, given in zip(temps, targets, paths, strict=True):
            try:
                if force and os.path.lexists(target):
                    _check_replaceable(target, given)  # it may have changed while we wrote
                    backup = folders[target.parent] / f"{target.name}.previous"
                    os.link(target, backup, follow_symlinks=False)
                    backups[target] = backup
                    placed.append(target)  # from here on the backup is restored on failure
                    os.replace(tmp, target)
                else:
                    # A signal right after the link: the finally finds it by its inode.
                    _place_exclusive(tmp, target)
                    placed.append(target)
            except FileExistsError:
                raise PosdiagError(
                    f"{given}: already exists (created by another process meanwhile); "
                    "pass --force to overwrite"
                ) from None
            except OSError as exc:
                raise PosdiagError(f"{given}: cannot write ({_reason(exc)})") from None
        with deferred_signals():  # complete and recorded as such, or neither
            _completed.extend(str(p) for p in paths)
            placed.clear()  # complete: nothing to undo
            done = True
    finally:
        with deferred_signals():  # no signal cuts the clean-up short
            for tmp, target in zip(temps, targets, strict=False):
                if not done and target not in placed and _same_file(tmp, target):
                    placed.append(target)  # linked, and a signal came before it was recorded
            for target in reversed(placed):  # an incomplete set: undo what was moved
                try:
                    if target in backups:
                        os.replace(backups[target], target)
                    else:
                        target.unlink(missing_ok=True)
                except OSError:
                    pass
            for folder in folders.values():
                shutil.rmtree(folder, ignore_errors=True)


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``b`` is a link to the file ``a`` (False when either is missing)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
