"""The documentation pages installed with the package (``docs/*.md`` as ``posdiag._docs``), for
``posdiag docs [TOPIC]``; output points to a page by :func:`doc_ref`, never a repository path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import PosdiagError

__all__ = ["Page", "doc_ref", "listing", "page", "pages"]


def doc_ref(topic: str, section: str | None = None) -> str:
    """How output points to a page: ``'posdiag docs geometry'`` (with ``, "Section"``)."""
    where = f"'posdiag docs {topic}'"
    return f'{where}, "{section}"' if section else where


@dataclass(frozen=True)
class Page:
    """One documentation page: its topic (the file's stem), title (first heading) and file."""

    topic: str
    title: str
    path: Path

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def json(self, text: bool = True) -> dict[str, str]:
        """``posdiag docs --json``: topic, title, path (and the page's text)."""
        out = {"topic": self.topic, "title": self.title, "path": str(self.path)}
        return {**out, "text": self.text()} if text else out


def listing(rows: list[Page]) -> str:
    """``posdiag docs``: one line per page, then where they are installed."""
    lines = [f"{p.topic:<14}{p.title}" for p in rows]
    folder = rows[0].path.parent if rows else "?"
    return "\n".join([*lines, f"(posdiag docs TOPIC prints one; installed in {folder})"])


def _folder() -> Path:
    """The installed pages (``posdiag/_docs``); in a source checkout or an editable install, the
    repository's docs/."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "_docs"
    return installed if any(installed.glob("*.md")) else package.parent / "docs"


def pages() -> list[Page]:
    """Every page, by topic name."""
    out = []
    for path in sorted(_folder().glob("*.md")):
        first = path.read_text(encoding="utf-8").lstrip().splitlines()[:1]
        title = first[0].lstrip("# ").strip() if first else path.stem
        out.append(Page(path.stem, title, path))
    if not out:
        raise PosdiagError(f"no documentation pages found in {_folder()}; reinstall posdiag")
    return out


def page(topic: str) -> Page:
    """The page of ``topic`` (``geometry``, ``geometry.md`` or ``docs/geometry.md``)."""
    from ..encodings._core import did_you_mean

    name = Path(topic).stem
    found = {p.topic: p for p in pages()}
    if name not in found:
        raise PosdiagError(
            f"'topic' {topic!r} is not a documentation page; {did_you_mean(name, found)}"
            f"topics: {', '.join(found)}"
        )
    return found[name]
