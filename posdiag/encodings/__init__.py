"""Positional encodings as position geometries: a name -> factory registry.

Each factory turns ``n`` positions and keyword parameters into an :class:`Encoding` holding the
dissimilarity ``delta_E`` the encoding induces between positions. Families: ``absolute``
(sinusoidal, learned tables and checkpoints), ``rope`` (RoPE, its context extensions, xPos),
``bias`` (ALiBi, T5, KERPLE, Shaw), ``optimal`` (the corpus MDS); ``presets`` maps real models
to them. Definitions and sources: docs/geometry.md section 5 and docs/encodings.md.
"""

from __future__ import annotations

from typing import Any

from . import absolute, bias, optimal, rope  # noqa: F401  (they register their encodings)
from ._core import (
    DEFAULT_DIM,
    DEFAULT_SET,
    REGISTRY,
    Encoding,
    make_encoding,
    parse_encoding,
    unknown_encoding,
    with_dim,
)
from .checkpoint import read_position_table
from .families import family
from .presets import MODEL_PRESETS, preset_specs

# List by family (absolute, relative, bias, optimal), registration order within a family: the
# order `posdiag encodings` shows.
_FAMILIES = ("absolute", "relative", "bias", "optimal")
for _spec in sorted(REGISTRY.values(), key=lambda s: _FAMILIES.index(s.kind)):
    REGISTRY[_spec.name] = REGISTRY.pop(_spec.name)


def describe(name: str | None = None) -> list[dict[str, Any]]:
    """The registry as plain data (what ``posdiag encodings`` prints), one dict per encoding.

    Keys: ``name``, ``kind`` (the registry's), ``family`` (:mod:`posdiag.encodings.families`),
    ``summary``, ``n_params`` (formula), ``params`` (parameter -> default, ``None`` = required),
    ``types`` (parameter -> type name), ``docs`` (parameter -> one line).
    """
    if name is not None and name not in REGISTRY:
        raise unknown_encoding(name)
    specs = [REGISTRY[name]] if name is not None else list(REGISTRY.values())
    return [
        {
            "name": s.name,
            "kind": s.kind,
            "family": family(s.name),
            "summary": s.summary,
            "n_params": s.n_params_formula,
            "params": dict(s.defaults),
            "types": {k: t.__name__ for k, t in s.types.items()},
            "docs": {k: s.docs.get(k, "") for k in s.defaults},
        }
        for s in specs
    ]


__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_SET",
    "MODEL_PRESETS",
    "REGISTRY",
    "Encoding",
    "describe",
    "make_encoding",
    "parse_encoding",
    "preset_specs",
    "read_position_table",
    "with_dim",
]
