"""``posdiag encodings`` as rich tables and JSON: the registry, one encoding, the model presets."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..encodings import MODEL_PRESETS

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
    console.print(f"[bold]{r['name']}[/bold] ({r['kind']}): {escape(r['summary'])}")
    console.print(f"trainable parameters: {r['n_params']}")
    t = Table(title_justify="left")
    for col in ("parameter", "type", "default", "meaning"):
        t.add_column(col)
    for k, v in r["params"].items():
        t.add_row(k, r["types"][k], _shown(v), escape(r["docs"][k]))
    console.print(t)


def print_encodings(rows: list[dict[str, Any]], console: Console) -> None:
    """Every encoding with its parameters and defaults, then where to read more."""
    t = Table(title="Encodings (use as --encoding NAME[:key=value,...])", title_justify="left")
    for col in ("name", "kind", escape("parameters [defaults]"), "params", "definition"):
        t.add_column(col)
    for r in rows:
        ps = ", ".join(f"{k}={_shown(v)}" for k, v in r["params"].items())
        t.add_row(r["name"], r["kind"], ps or "-", r["n_params"], escape(r["summary"]))
    console.print(t)
    console.print(
        "One encoding's parameters: posdiag encodings NAME; "
        f"model presets ({', '.join(MODEL_PRESETS)}): posdiag encodings --presets"
    )
