"""``posdiag corpora`` as a rich table and JSON: the Hugging Face data set presets."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ..corpus.sources import PRESETS
from ._fit import Column, print_fitted

__all__ = ["corpora_json", "print_corpora"]


# A preset's JSON keys, in order.
_KEYS = ("name", "dataset", "config", "split", "splits", "column", "summary")


def corpora_json() -> list[dict[str, Any]]:
    """The ``--json`` document of ``posdiag corpora``: one object per preset."""
    rows = [{k: getattr(p, k) for k in _KEYS} for p in PRESETS.values()]
    return [{**r, "splits": list(r["splits"])} for r in rows]


def print_corpora(rows: list[dict[str, Any]], console: Console) -> None:
    print_fitted(
        # \\[ keeps rich from reading [SPLIT] as markup.
        "Presets (corpus NAME\\[@SPLIT]; any hub data set: hf:OWNER/NAME\\[:CONFIG]\\[@SPLIT])",
        # Names users type (preset, data set, config, column) are never cut.
        [
            Column("name", [r["name"] for r in rows]),
            Column("dataset", [r["dataset"] for r in rows]),
            Column("config", [r["config"] or "-" for r in rows], keep=30),
            Column("split", [r["split"] for r in rows], keep=20),
            Column("column", [r["column"] for r in rows], keep=40),
            Column("description", [r["summary"] for r in rows], keep=10, prose=True),
        ],
        console,
    )
