"""Positional encodings as position geometries: a name -> factory registry.

Definitions: docs/geometry.md section 5 and docs/encodings.md.

Each factory turns ``n`` positions and keyword parameters into an :class:`Encoding` holding the
dissimilarity ``delta_E`` the encoding induces between positions. Families: ``absolute``
(sinusoidal, learned tables and checkpoints), ``rope`` (RoPE, its context-extension variants,
xPos), ``bias`` (ALiBi, T5, KERPLE, Shaw), ``optimal`` (the corpus MDS); ``presets`` maps real
models to them. Definitions, sources and the dissimilarity each is scored by:
``docs/encodings.md``.
"""

from __future__ import annotations

from . import absolute, bias, optimal, rope  # noqa: F401  (they register their encodings)
from ._core import (
    DEFAULT_DIM,
    DEFAULT_SET,
    DIM_PARAMS,
    REGISTRY,
    Context,
    Encoding,
    EncodingSpec,
    describe,
    make_encoding,
    parse_encoding,
    with_dim,
)
from .bias import alibi_slopes, t5_bucket
from .checkpoint import POSITION_TENSOR_NAMES, PositionTable, load_table, read_position_table
from .presets import MODEL_PRESETS, ModelPreset, expand_preset, preset_specs

# List by family (absolute, relative, bias, optimal), registration order within a family: the
# order `posdiag encodings` shows.
_FAMILIES = ("absolute", "relative", "bias", "optimal")
for _spec in sorted(REGISTRY.values(), key=lambda s: _FAMILIES.index(s.kind)):
    REGISTRY[_spec.name] = REGISTRY.pop(_spec.name)

__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_SET",
    "DIM_PARAMS",
    "MODEL_PRESETS",
    "POSITION_TENSOR_NAMES",
    "REGISTRY",
    "Context",
    "Encoding",
    "EncodingSpec",
    "ModelPreset",
    "PositionTable",
    "alibi_slopes",
    "describe",
    "expand_preset",
    "load_table",
    "make_encoding",
    "parse_encoding",
    "preset_specs",
    "read_position_table",
    "t5_bucket",
    "with_dim",
]
