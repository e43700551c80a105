"""Absolute encodings added to the input: position vectors ``p_i``, ``delta = ||p_i - p_j||``.

docs/encodings.md section 1. ``nope`` (no positional signal) is the Necessity Theorem's baseline.
"""

from __future__ import annotations

import numpy as np

from .._util.validate import check_float, check_int
from ..errors import PosdiagError
from ._core import (
    DEFAULT_DIM,
    Context,
    Encoding,
    cosine_sum_distance,
    even,
    lag_profile,
    register,
)
from .checkpoint import read_position_table
from .rope import rope_frequencies

__all__: list[str] = []

_BASE = (float, 10000.0, "frequency base b: w_k = b^(-2k/d)")


@register("nope", params={}, summary="no positional signal (delta = 0)", n_params="0")
def _nope(n: int, ctx: Context) -> Encoding:
    return Encoding("nope", {}, 0, profile=np.zeros(n))


@register(
    "sinusoidal",
    params={"d": (int, DEFAULT_DIM, "model dimension (even)"), "base": _BASE},
    summary="Vaswani et al. 2017: p_i[2k] = sin(i w_k), p_i[2k+1] = cos(i w_k), w_k = base^(-2k/d)",
    n_params="0",
)
def _sinusoidal(n: int, ctx: Context, *, d: int, base: float) -> Encoding:
    d = even("d", d)
    base = check_float("base", base, 1.0, lo_open=True)
    w = rope_frequencies(d, base)  # w_k = base^(-2k/d)
    ang = np.outer(np.arange(n), w)
    p = np.empty((n, d))
    p[:, 0::2], p[:, 1::2] = np.sin(ang), np.cos(ang)
    g = lag_profile(cosine_sum_distance(w, 2.0), n)
    return Encoding("sinusoidal", {"d": d, "base": base}, 0, vectors=p, profile=g)


@register(
    "scaled-sinusoidal",
    params={
        "d": (int, DEFAULT_DIM, "model dimension (even)"),
        "base": _BASE,
        "scale": (float, 0.0, "the learned scalar s; 0 = its initialisation d^-1/2"),
    },
    summary="x-transformers ScaledSinusoidalEmbedding: s * [sin | cos](i w_k), one learned scalar",
    n_params="1",
)
def _scaled_sinusoidal(n: int, ctx: Context, *, d: int, base: float, scale: float) -> Encoding:
    d = even("d", d)
    base = check_float("base", base, 1.0, lo_open=True)
    scale = check_float("scale", scale, 0.0)
    s = scale if scale > 0 else d**-0.5
    w = rope_frequencies(d, base)
    ang = np.outer(np.arange(n), w)
    # Concatenated [sin | cos] layout: a coordinate permutation of the interleaved one.
    p = s * np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
    g = s * lag_profile(cosine_sum_distance(w, 2.0), n)
    params = {"d": d, "base": base, "scale": s}
    return Encoding("scaled-sinusoidal", params, 1, vectors=p, profile=g)


@register(
    "learned-random",
    params={
        "d": (int, DEFAULT_DIM, "model dimension"),
        "std": (float, 0.02, "standard deviation of the N(0, std^2) entries"),
        "seed": (int, 0, "random seed"),
    },
    summary="untrained learned table: N(0, std^2) entries (BERT/GPT-2 initialisation)",
    n_params="n*d",
)
def _learned_random(n: int, ctx: Context, *, d: int, std: float, seed: int) -> Encoding:
    d = check_int("d", d, 1)
    std = check_float("std", std, 0.0, lo_open=True)
    seed = check_int("seed", seed, 0)
    p = np.random.default_rng(seed).normal(0.0, std, size=(n, d))
    return Encoding("learned-random", {"d": d, "std": std, "seed": seed}, n * d, vectors=p)


@register(
    "learned",
    params={
        "path": (str, None, ".npy, .safetensors, *.safetensors.index.json or checkpoint dir"),
        "tensor": (str, "", "tensor name; empty = found by the common names (BERT, GPT-2, OPT...)"),
        "offset": (int, -1, "row of position 0; -1 = auto (2 for OPT/BART/RoBERTa, else 0)"),
    },
    summary="a learned table from a file or a real checkpoint (rows offset..offset+n-1)",
    n_params="n*d",
)
def _learned(n: int, ctx: Context, *, path: str, tensor: str, offset: int) -> Encoding:
    table = read_position_table(path, tensor, offset)
    rows, off = table.rows.shape[0], table.offset
    if rows - off < n:
        what = f"table {table.tensor!r}" if table.tensor else "table"
        after = f" ({rows - off} positions after offset {off})" if off else ""
        raise PosdiagError(
            f"learned: {path}: {what} has {rows} rows{after}; the corpus needs n_eff={n}"
        )
    p = table.rows[off : off + n]
    params: dict[str, object] = {"path": path}
    if table.tensor:
        params["tensor"] = table.tensor
    params["offset"] = off
    return Encoding("learned", params, n * p.shape[1], vectors=p)
