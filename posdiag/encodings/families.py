"""One taxonomy of encodings, the same in every output (stress reading, ``diagnose``, plot
legend, ``posdiag encodings``, ``--json``): the five families of :data:`FAMILY_LEGEND`. The two
``relative`` families depend on ``i - j`` only: the ones a shift-equivariant corpus favours.
"""

from __future__ import annotations

from ._core import REGISTRY

__all__ = ["FAMILIES", "FAMILY_LEGEND", "NONE", "family", "is_relative"]

NONE = "none"
# The registry's kind of an encoding -> its family; ``nope`` is ``none`` whatever its kind.
_OF_KIND = {
    "absolute": "absolute",
    "relative": "relative: rotary",
    "bias": "relative: attention bias",
    "optimal": "optimal: MDS",
}
# Every family, in the order outputs list them.
FAMILIES = (*_OF_KIND.values(), NONE)
FAMILY_LEGEND = (
    "families: absolute = a vector added per position (sinusoidal, learned); relative: rotary = "
    "rotations by position (rope, xpos); relative: attention bias = a bias on attention by i-j "
    "(alibi, t5, kerple, shaw); optimal: MDS = the corpus's own geometry (mds-r); none = nope"
)


def family(name: str) -> str:
    """The family of encoding ``name`` (a registry name, or ``mds-r``); ``other`` if unknown."""
    if name == "nope":
        return NONE
    spec = REGISTRY.get("mds" if name.startswith("mds-") else name)
    return _OF_KIND.get(spec.kind, "other") if spec is not None else "other"


def is_relative(name: str) -> bool:
    """Whether ``name``'s stress depends on ``i - j`` only (rotary and attention-bias families)."""
    return family(name).startswith("relative")
