"""How a corpus is read: one frozen :class:`Reading` instead of loose options; the counting entry
points take its :meth:`Reading.kwargs`. ``None`` means "the default", so a Reading records only
what was asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["READING_FIELDS", "Reading"]


@dataclass(frozen=True)
class Reading:
    """Which part of a corpus is read and how: each field is the command-line option of the
    same name (docs/cli.md); None means its default."""

    column: str | None = None
    tokenizer: str | None = None
    view: str | None = None
    max_len: int | None = None
    pad_token: str | None = None
    limit: int | None = None
    sample: float | None = None
    data_dir: str | None = None
    dtype: str | None = None
    vocab_size: int | None = None
    engine: str | None = None
    scheduler: str | None = None
    workers: int | None = None
    group_by: str | None = None
    group_prefix: int | None = None
    dedup: bool | None = None

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`posdiag.counts.corpus.corpus_counts` (``view`` is
        ``view_name`` there)."""
        out = dataclasses.asdict(self)
        out["view_name"] = out.pop("view")
        return out

    def merged(self, overrides: Mapping[str, Any]) -> Reading:
        """This reading with every non-None value of ``overrides`` whose key is a field (others,
        e.g. a config file's ``min_count``, are ignored)."""
        given = {k: v for k, v in overrides.items() if k in READING_FIELDS and v is not None}
        return dataclasses.replace(self, **given)


READING_FIELDS = tuple(f.name for f in dataclasses.fields(Reading))
