"""How an encoding file was built (its metadata: tokenizer, view, ``max_len``, ...), and reading
a corpus the same way for ``posdiag inspect``: options override the file, conflicts are stated.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..corpus.reading import Reading

__all__ = ["BUILT_WITH", "InspectReading", "inspect_reading", "read_encoding_meta", "row_notes"]

# Metadata keys that say how the corpus was read, in the order they are reported.
BUILT_WITH = ("tokenizer", "view", "max_len", "min_count", "group_by", "group_prefix", "dedup")


def read_encoding_meta(path: str | Path) -> dict[str, str]:
    """posdiag's metadata of an encoding file; empty for other files (e.g. a checkpoint) and
    unreadable metadata (the table reader reports unreadable files)."""
    p = Path(path)
    meta: Any = None
    try:
        if p.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(p), framework="np") as fh:
                meta = fh.metadata()
        elif p.suffix == ".npy" and p.with_suffix(".json").is_file():
            meta = json.loads(p.with_suffix(".json").read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - no metadata is not an error here
        return {}
    if not isinstance(meta, Mapping) or "posdiag_version" not in meta:
        return {}
    # Older sidecars hold strings, newer ones numbers and lists (JSON text again here).
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}


def _typed(key: str, value: str) -> Any:
    if key == "dedup":
        return value == "true"
    return int(value) if key in ("max_len", "min_count", "group_prefix") else value


@dataclass(frozen=True)
class InspectReading:
    """The reading ``inspect`` uses, and what it says about it.

    Attributes
    ----------
    reading : Reading
        The options given, with the file's tokenizer, view and max_len where none was given.
    min_count : int
        ``--min-count``, else the file's, else the default.
    from_file : tuple of str
        Keys taken from the file's metadata.
    notes : tuple of str
        One line per option that overrides a different value in the file.
    """

    reading: Reading
    min_count: int
    from_file: tuple[str, ...]
    notes: tuple[str, ...]


def inspect_reading(
    path: str,
    meta: Mapping[str, str],
    reading: Reading,
    min_count: int | None,
    default_min_count: int,
    *,
    counts_file: bool = False,
) -> InspectReading:
    """Fill ``reading`` from the metadata of the encoding file ``path``; options win. With
    ``counts_file`` (a counts ``.npz``) only ``min_count`` is taken from the file."""
    given: dict[str, Any] = {**dataclasses.asdict(reading), "min_count": min_count}
    fill: dict[str, Any] = {}
    notes: list[str] = []
    for key in BUILT_WITH:
        if key not in meta:
            continue
        built = _typed(key, meta[key])
        asked = given[key]
        if asked is None:
            if key == "min_count" or not counts_file:
                fill[key] = built
        elif asked != built:
            flag = "--" + key.replace("_", "-")
            notes.append(
                f"{path} was built with {key}={built}; {flag} {asked} overrides it, so the "
                "table is compared with a geometry it was not built from"
            )
    mc = fill.pop("min_count", None)
    used_min = min_count if min_count is not None else mc if mc is not None else default_min_count
    return InspectReading(
        dataclasses.replace(reading, **fill),
        int(used_min),
        tuple(k for k in BUILT_WITH if k in fill or (k == "min_count" and mc is not None)),
        tuple(notes),
    )


def row_notes(
    path: str, rows: int, meta: Mapping[str, str], summary: Any, *, counts_file: str | None = None
) -> tuple[str, ...]:
    """Warnings when the counts file ``counts_file`` was not counted as the encoding file was
    built, or when the table's ``rows`` and the corpus's ``n_eff`` differ; ``summary`` is the
    corpus's :class:`~posdiag.reports.analysis.CorpusSummary`."""
    out = []
    units = summary.units
    read = {
        "tokenizer": summary.tokenizer,
        "view": summary.view,
        "max_len": summary.max_len,
        "min_count": summary.min_count,
        "group_by": None if units is None else units.group_by,
        "group_prefix": None if units is None else units.prefix,
        "dedup": None if units is None else units.dedup,
    }
    differ = [
        f"{k}={_typed(k, meta[k])} vs {read[k]}"
        for k in BUILT_WITH
        if k in meta and _typed(k, meta[k]) != read[k]
    ]
    if differ and counts_file is not None:
        out.append(
            f"{path} was built with another reading than the counts {counts_file} "
            f"({'; '.join(differ)}): count the corpus again as the file was built"
        )
    n_eff = summary.n_eff
    if rows != n_eff:
        built = f" (built on n={meta['n']} positions)" if "n" in meta else ""
        out.append(
            f"{path} has {rows} rows{built} but the corpus gives n_eff={n_eff} positions: "
            f"only positions 0..{min(rows, n_eff) - 1} are compared, so the stress describes "
            f"{'a prefix of the table' if rows > n_eff else 'a prefix of the corpus'}"
        )
    return tuple(out)


def fitted_rank(meta: Mapping[str, str], summary: Any) -> int | None:
    """The rank of a posdiag MDS file built from the corpus ``summary`` (a ``CorpusSummary``)
    describes (same source and positions), whose stress there is in-sample; else None."""
    try:
        rank, n = int(meta["r"]), int(meta["n"])
    except (KeyError, ValueError):
        return None
    same = meta.get("corpus") == summary.source and n == summary.n_eff
    return rank if same else None
