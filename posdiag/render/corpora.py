"""``posdiag corpora`` as a rich table and JSON: the Hugging Face data set presets."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..sources import PRESETS

__all__ = ["corpora_json", "print_corpora"]


def corpora_json() -> list[dict[str, Any]]:
    """The ``--json`` document of ``posdiag corpora``: one object per preset."""
    return [
        {
            "name": p.name,
            "dataset": p.dataset,
            "config": p.config,
            "split": p.split,
            "column": p.column,
            "summary": p.summary,
        }
        for p in PRESETS.values()
    ]


def print_corpora(rows: list[dict[str, Any]], console: Console) -> None:
    t = Table(
        # \\[ keeps rich from reading [SPLIT] as markup.
        title="Presets (corpus NAME\\[@SPLIT]; "
        "any hub data set: hf:OWNER/NAME\\[:CONFIG]\\[@SPLIT])",
        title_justify="left",
    )
    for col in ("name", "dataset", "config", "split", "column", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"], r["dataset"], r["config"] or "-", r["split"], r["column"], r["summary"]
        )
    console.print(t)
