"""Finding and reading posdiag's config file (``posdiag.toml``, or ``[tool.posdiag]`` in
``pyproject.toml``) from the working directory up to the repository root. One that cannot be read
is an error: skipping it would let the gate pass without its rules.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import PosdiagError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

__all__ = ["CONFIG_FILES", "find_config", "read_toml", "search_dirs"]

CONFIG_FILES = ("posdiag.toml", "pyproject.toml")

# tomllib reports positions only in its message: "Cannot overwrite a value (at line 3, column 4)".
_WHERE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_END = re.compile(r"\s*\(at end of document\)\s*$")


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; errors name the file, line and column (1-based)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PosdiagError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise PosdiagError(f"{path}: cannot read the config file ({exc.strerror})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, col, reason = _position(str(exc), text)
        raise PosdiagError(f"{path}:{line}:{col}: not valid TOML ({reason})") from None


def _position(message: str, text: str) -> tuple[int, int, str]:
    m = _WHERE.search(message)
    if m:
        return int(m.group(1)), int(m.group(2)), message[: m.start()]
    m = _END.search(message)
    reason = message[: m.start()] if m else message
    lines = text.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1, reason


def search_dirs(start: str | Path = ".") -> list[Path]:
    """``start`` and its parents up to the repository root (the first folder holding ``.git``
    or ``.hg``), or up to the file-system root outside a repository; nearest first."""
    here = Path(start).resolve()
    out = []
    for d in (here, *here.parents):
        out.append(d)
        if (d / ".git").exists() or (d / ".hg").exists():
            break
    return out


def _shown(path: Path, start: Path) -> Path:
    """``path`` relative to ``start`` when ``start`` is relative (``./x`` reads as ``x``)."""
    return path if start.is_absolute() else Path(os.path.relpath(path, Path.cwd()))


def find_config(start: str | Path = ".") -> Path | None:
    """The config file that applies in ``start``: the nearest ``posdiag.toml``, or
    ``pyproject.toml`` with a ``[tool.posdiag]`` table, up to the repository root; None when
    there is none. Raises on a broken one (a pyproject.toml: if it mentions posdiag)."""
    start_p = Path(start)
    for d in search_dirs(start_p):
        own = d / "posdiag.toml"
        if own.is_file():
            return _shown(own, start_p)
        py = d / "pyproject.toml"
        if not py.is_file():
            continue
        try:
            data = read_toml(_shown(py, start_p))
        except PosdiagError:
            try:  # a broken pyproject.toml is ours to refuse only if it mentions posdiag
                mentions = "posdiag" in py.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                mentions = True
            if mentions:
                raise
            continue
        tool = data.get("tool")
        if isinstance(tool, dict) and "posdiag" in tool:
            return _shown(py, start_p)
    return None
