"""How every command's ``--help`` names its parameters: one convention, set in one place.

typer shows ``<list[str]>`` and ``<int>`` as value placeholders and ``{corpus}`` for a required
argument; the wide placeholders also squeeze the option-name column until rich cuts a name such
as ``--max-rank-for-stress`` at 80 columns. Here every value is ``INT``, ``FLOAT``, ``TEXT`` or
``PATH``, an argument is its name in capitals (``CORPUS``; ``[NAME]`` when optional), and a flag
shows no value at all.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["METAVARS", "tidy_params"]

# typer's bare type name -> the placeholder the help shows for a value of that type.
METAVARS = {"int": "INT", "float": "FLOAT", "str": "TEXT", "Path": "PATH", "bool": ""}


def _metavar(param: Any) -> str:
    bare = str(param.bare_type())
    inner = re.fullmatch(r"list\[(.+)\]", bare)  # a repeatable option: one value's placeholder
    return METAVARS.get(inner.group(1) if inner else bare, "VALUE")


def tidy_params(params: list[Any]) -> list[Any]:
    """Give each of ``params`` (typer's parameters of one command) its help placeholder.

    Idempotent: a parameter that already has a metavar (or was tidied before) keeps it.
    """
    for p in params:
        if getattr(p, "_posdiag_tidy", False):
            continue
        p._posdiag_tidy = True
        if getattr(p, "is_flag", False):
            p.metavar = p.metavar or ""
        elif p.param_type_name == "argument":
            kind = _metavar(p)
            name = p.metavar = p.metavar or p.name.upper()
            usage = name if p.required else f"[{name}]"
            if p.nargs != 1:
                usage += "..."
            # Instance attributes: typer's argument class offers no setting for these two.
            p._usage_display_name = lambda usage=usage: usage
            p.display_type_rich = lambda ctx, kind=kind: kind
        elif p.metavar is None and hasattr(p, "bare_type"):
            p.metavar = _metavar(p)
    return params
