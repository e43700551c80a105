"""``posdiag encodings`` as rich tables and JSON: the registry, one encoding, the model presets."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..encodings import MODEL_PRESETS
from ..encodings.families import FAMILY_LEGEND
from ._fit import Column, print_fitted

__all__ = ["presets_json", "print_encoding_detail", "print_encodings", "print_presets"]


def _shown(v: Any) -> str:
    return "(required)" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def presets_json() -> list[dict[str, Any]]:
    """The ``--json`` document of ``posdiag encodings --presets``."""
    return [
        {
            "name": p.name,
            "description": p.description,
            "encodings": [{"name": e, "params": dict(ps)} for e, ps in p.encodings],
        }
        for p in MODEL_PRESETS.values()
    ]


def print_presets(rows: list[dict[str, Any]], console: Console) -> None:
    """One row per model preset: its encodings with parameters, and the model."""
    t = Table(title="Model presets (use as --model-preset NAME)", title_justify="left")
    t.add_column("preset")
    t.add_column("encodings", overflow="fold")
    t.add_column("model")
    for r in rows:
        encs = "; ".join(
            e["name"] + ":" + ",".join(f"{k}={_shown(v)}" for k, v in e["params"].items())
            for e in r["encodings"]
        )
        t.add_row(r["name"], encs, r["description"])
    console.print(t)


def print_encoding_detail(r: dict[str, Any], console: Console) -> None:
    """One encoding (a row of :func:`posdiag.encodings.describe`): each parameter explained."""
    console.print(f"[bold]{r['name']}[/bold] ({r['family']}): {escape(r['summary'])}")
    console.print(f"trainable parameters: {r['n_params']}")
    ps = r["params"]
    print_fitted(
        "",
        [
            Column("parameter", list(ps)),
            Column("type", [r["types"][k] for k in ps], keep=10),
            Column("default", [_shown(v) for v in ps.values()]),
            Column("meaning", [r["docs"][k] for k in ps], keep=20, prose=True),
        ],
        console,
    )


def print_encodings(rows: list[dict[str, Any]], console: Console) -> None:
    """Every encoding with its parameters and defaults, then where to read more."""
    print_fitted(
        "Encodings (use as --encoding NAME\\[:key=value,...])",
        [
            Column("name", [r["name"] for r in rows]),
            Column("family", [r["family"] for r in rows], keep=20),
            Column(
                "parameters [defaults]",
                [
                    ", ".join(f"{k}={_shown(v)}" for k, v in r["params"].items()) or "-"
                    for r in rows
                ],
                keep=60,
                wrap=True,
            ),
            Column("params", [r["n_params"] for r in rows], keep=30, wrap=True),
            Column("definition", [r["summary"] for r in rows], keep=40, prose=True),
        ],
        console,
    )
    console.print(FAMILY_LEGEND)
    console.print(
        "One encoding's parameters: posdiag encodings NAME; "
        f"model presets ({', '.join(MODEL_PRESETS)}): posdiag encodings --presets"
    )
