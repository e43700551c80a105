"""Real models' positional encodings with the values of their Hugging Face ``config.json``
(``--model-preset``); learned tables score their initialisation (real weights: ``learned``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import PosdiagError
from ._core import did_you_mean

__all__ = ["MODEL_PRESETS", "ModelPreset", "expand_preset", "preset_specs"]


@dataclass(frozen=True)
class ModelPreset:
    """A model and the encodings (name, params) it uses."""

    name: str
    description: str
    encodings: tuple[tuple[str, Mapping[str, Any]], ...]


def _p(name: str, description: str, *encodings: tuple[str, Mapping[str, Any]]) -> ModelPreset:
    return ModelPreset(name, description, tuple(encodings))


_LEARNED_768 = ("learned-random", {"d": 768, "std": 0.02, "seed": 0})
_LLAMA31 = {
    "head_dim": 128,
    "base": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
_YARN_64K = {"head_dim": 128, "base": 10000.0, "factor": 16.0}


def _rope(base: float, head_dim: int = 128, **more: float) -> tuple[str, Mapping[str, Any]]:
    return ("rope", {"head_dim": head_dim, "base": base, **more})


def _t5(heads: int) -> tuple[str, Mapping[str, Any]]:
    return ("t5", {"buckets": 32, "max_distance": 128, "bidirectional": True, "heads": heads})


def _alibi(name: str, description: str, heads: int) -> ModelPreset:
    """ALiBi in both readings (the additive bias and its kernel)."""
    return _p(name, description, ("alibi", {"heads": heads}), ("alibi-kernel", {"heads": heads}))


MODEL_PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        _p(
            "llama3-8b",
            "Llama-3.1-8B: RoPE head_dim 128, rope_theta 500000, llama3 scaling (factor 8, L 8192)",
            ("rope-llama3", _LLAMA31),
        ),
        _p(
            "llama3-8b-noscale",
            "Llama-3-8B (3.0): RoPE head_dim 128, rope_theta 500000, no rope_scaling",
            _rope(500000.0),
        ),
        _p("llama2-7b", "Llama-2-7B: RoPE head_dim 128, rope_theta 10000", _rope(10000.0)),
        _p(
            "yarn-llama2-7b-64k",
            "Yarn-Llama-2-7b-64k: YaRN factor 16 over L 4096, head_dim 128",
            ("rope-yarn", {**_YARN_64K, "original_max_position_embeddings": 4096}),
        ),
        _p("mistral-7b", "Mistral-7B-v0.1: RoPE head_dim 128, rope_theta 10000", _rope(10000.0)),
        _p(
            "mistral-7b-v0.3",
            "Mistral-7B-v0.3: RoPE head_dim 128, rope_theta 1000000",
            _rope(1000000.0),
        ),
        _p("qwen2-7b", "Qwen2-7B: RoPE head_dim 128, rope_theta 1000000", _rope(1000000.0)),
        _p(
            "gpt-neox-20b",
            "GPT-NeoX-20B: RoPE head_dim 96, rotary_pct 0.25 (24 rotated dims), base 10000",
            _rope(10000.0, 96, partial_rotary_factor=0.25),
        ),
        _p(
            "phi-2",
            "Phi-2: RoPE head_dim 80, partial_rotary_factor 0.4 (32 rotated dims), base 10000",
            _rope(10000.0, 80, partial_rotary_factor=0.4),
        ),
        _p(
            "bert-base",
            "BERT-base: learned 512 x 768 table (initialisation N(0, 0.02^2))",
            _LEARNED_768,
        ),
        _p("roberta-base", "RoBERTa-base: learned 514 x 768 table, offset 2 (init)", _LEARNED_768),
        _p(
            "gpt2",
            "GPT-2 (124M): learned 1024 x 768 table wpe (initialisation N(0, 0.02^2))",
            _LEARNED_768,
        ),
        _p("opt-125m", "OPT-125m: learned 2050 x 768 table, offset 2 (init)", _LEARNED_768),
        _p(
            "t5-base",
            "T5-base encoder: 32 bidirectional buckets, max_distance 128, 12 heads",
            _t5(12),
        ),
        _p(
            "t5-small",
            "T5-small encoder: 32 bidirectional buckets, max_distance 128, 8 heads",
            _t5(8),
        ),
        _alibi("bloom", "BLOOM (176B): ALiBi with 112 heads, both readings", 112),
        _alibi("bloom-560m", "BLOOM-560m: ALiBi with 16 heads, both readings", 16),
        _alibi("mpt-7b", "MPT-7B: ALiBi with 32 heads, both readings", 32),
    )
}


def expand_preset(name: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``(encoding, params)`` pairs of the model preset ``name``."""
    preset = MODEL_PRESETS.get(name)
    if preset is None:
        hint = did_you_mean(name, MODEL_PRESETS)
        raise PosdiagError(
            f"unknown model preset {name!r}; {hint}presets: {', '.join(MODEL_PRESETS)}"
        )
    return [(enc, dict(params)) for enc, params in preset.encodings]


def preset_specs(name: str) -> list[tuple[str, dict[str, Any], str]]:
    """``(encoding, params, preset)`` triples of the model preset ``name``: each stress row names
    its preset (gpt2 and bert-base both expand to ``learned-random``)."""
    return [(enc, params, name) for enc, params in expand_preset(name)]
