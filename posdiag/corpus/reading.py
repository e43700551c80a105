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
    """Which part of a corpus is read, and how it is tokenized and cut into sequences.

    Attributes
    ----------
    column : str or None
        Text column of tabular files and data sets (default ``text``; presets: their own).
    tokenizer : str or None
        ``whitespace``, ``bytes``, a tokenizer.json or a hub name (default ``whitespace``).
    view : str or None
        ``text``, ``model`` or ``packed`` (default ``text``).
    max_len : int or None
        Positions counted, ``n`` (default 512).
    pad_token : str or None
        Pad token of the ``model`` view when the tokenizer has none.
    limit : int or None
        Only the first ``limit`` documents (token id files: windows).
    sample : float or None
        A seeded random fraction in (0, 1] of the documents (the seed is the command's).
    data_dir : str or None
        Folder with local copies of presets and hub data sets.
    dtype : str or None
        Id type of a raw ``.bin`` token file, ``uint16`` or ``uint32``.
    vocab_size : int or None
        Vocabulary size of a token id file (default the tokenizer's).
    engine : str or None
        Where to count: ``local`` (default) or ``dask`` (docs/scale.md).
    scheduler : str or None
        ``dask``: address of a running scheduler (default: start a ``LocalCluster``).
    workers : int or None
        ``dask`` without ``scheduler``: the ``LocalCluster``'s worker processes (default: the
        CPU count).
    group_by : str or None
        Field naming each record's sampling unit (a document, book or source id).
    group_prefix : int or None
        Sequences sharing their first this many tokens are one sampling unit (default 6; 0:
        exact copies only).
    dedup : bool or None
        Drop exact duplicate sequences (packed view: documents) before counting.
    """

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
        """This reading with every non-None value of ``overrides`` whose key is a field.

        Other keys (e.g. a config file's ``min_count``) are ignored.
        """
        given = {k: v for k, v in overrides.items() if k in READING_FIELDS and v is not None}
        return dataclasses.replace(self, **given)


READING_FIELDS = tuple(f.name for f in dataclasses.fields(Reading))
