"""Attention-bias encodings ``logit_h(i, j) += b_h(i, j)``, each scored by the dissimilarity
docs/encodings.md section 3 gives it (``sqrt(-b)`` where ``-b`` is CND, else the step function
of ``|i-j|``). Factories are registered by a call: mutmut skips decorated functions.
"""

from __future__ import annotations

import numpy as np

from .._util.validate import check_float, check_int
from ..errors import PosdiagError
from ._core import Context, Encoding, lag_profile, positive, register

__all__ = ["alibi_slopes", "t5_bucket"]

_HEADS = (int, 8, "attention heads")


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi head slopes (Press et al. 2022, ``get_slopes``), for any head count, of shape (heads,).

    A power of two h gets ``2^(-8t/h)``, t = 1..h; otherwise, with ``p = 2^floor(log2 h)``, the
    p slopes ``2^(-8t/p)`` and then ``2^(-4(2u-1)/p)``, u = 1..h-p (every other slope of 2p heads).
    """
    heads = check_int("heads", heads, 1)
    p = 1 << (heads.bit_length() - 1)
    slopes = 2.0 ** (-8.0 * np.arange(1, p + 1) / p)
    if p == heads:
        return slopes
    extra = 2.0 ** (-4.0 * (2 * np.arange(1, heads - p + 1) - 1) / p)
    return np.concatenate([slopes, extra])


def _alibi(n: int, ctx: Context, *, heads: int) -> Encoding:
    alibi_slopes(heads)
    return Encoding("alibi", {"heads": heads}, 0, profile=lag_profile(lambda lag: lag, n))


register(
    "alibi",
    params={"heads": _HEADS},
    summary="Press et al. 2022, line reading: every head is -m_h|i-j|, so delta = |i-j| (rank 1)",
    n_params="0",
    kind="bias",
)(_alibi)


def _alibi_kernel(n: int, ctx: Context, *, heads: int) -> Encoding:
    # Each head's distance is sqrt(m_h |i-j|), all heads together sqrt(sum_h m_h |i-j|): a scale
    # the headline stress ignores, so sqrt(|i-j|) is scored (raw stress assumes m = 1).
    alibi_slopes(heads)
    return Encoding("alibi-kernel", {"heads": heads}, 0, profile=lag_profile(np.sqrt, n))


register(
    "alibi-kernel",
    params={"heads": _HEADS},
    summary="ALiBi, kernel reading: -m|i-j| is CND, so delta = sqrt(|i-j|) (Schoenberg, high rank)",
    n_params="0",
    kind="bias",
)(_alibi_kernel)


def t5_bucket(
    relative: np.ndarray, buckets: int = 32, max_distance: int = 128, bidirectional: bool = True
) -> np.ndarray:
    """T5's relative-position bucket of ``relative = j - i`` (HF ``_relative_position_bucket``).

    Returns an int array of the shape of ``relative``.
    """
    r = np.asarray(relative, dtype=np.int64)
    n_b = buckets
    out = np.zeros_like(r)
    if bidirectional:
        n_b //= 2
        out += (r > 0) * n_b
        r = np.abs(r)
    else:
        r = np.maximum(-r, 0)
    max_exact = n_b // 2
    large = max_exact + (
        np.log(np.maximum(r, 1) / max_exact) / np.log(max_distance / max_exact) * (n_b - max_exact)
    ).astype(np.int64)
    large = np.minimum(large, n_b - 1)
    return out + np.where(r < max_exact, r, large)


def _t5(
    n: int, ctx: Context, *, buckets: int, max_distance: int, bidirectional: bool, heads: int
) -> Encoding:
    buckets = check_int("buckets", buckets, 4 if bidirectional else 2)
    if bidirectional and buckets % 2:
        raise PosdiagError(f"'buckets' must be an even int >= 4 when bidirectional; got {buckets}")
    half = buckets // 2 if bidirectional else buckets
    max_distance = check_int("max_distance", max_distance, half // 2 + 1)
    heads = check_int("heads", heads, 1)
    # r = -|i-j| is the "looking back" side, where both modes count |r| from 0 (no +N offset):
    # the bucket index is then a monotone, log-compressed |i-j| that saturates at max_distance.
    delta = lag_profile(
        lambda lag: t5_bucket(-lag.astype(np.int64), buckets, max_distance, bidirectional), n
    )
    params = {
        "buckets": buckets,
        "max_distance": max_distance,
        "bidirectional": bidirectional,
        "heads": heads,
    }
    return Encoding("t5", params, buckets * heads, profile=delta)


register(
    "t5",
    params={
        "buckets": (int, 32, "number of buckets (HF relative_attention_num_buckets)"),
        "max_distance": (
            int,
            128,
            "distance of the last bucket (HF relative_attention_max_distance)",
        ),
        "bidirectional": (bool, True, "encoder (true) or causal decoder (false) buckets"),
        "heads": _HEADS,
    },
    summary="Raffel et al. 2020 log-spaced buckets: delta(i,j) = bucket of r = -|i-j|",
    n_params="buckets*heads",
    kind="bias",
)(_t5)


def _kerple_log(n: int, ctx: Context, *, a: float, p: float, heads: int) -> Encoding:
    a, p = positive("a", a), positive("p", p)
    heads = check_int("heads", heads, 1)
    delta = lag_profile(lambda lag: np.sqrt(p * np.log1p(a * lag)), n)
    return Encoding("kerple-log", {"a": a, "p": p, "heads": heads}, 2 * heads, profile=delta)


register(
    "kerple-log",
    params={
        "a": (float, 1.0, "a > 0 (KERPLE r2)"),
        "p": (float, 1.0, "p > 0 (KERPLE r1)"),
        "heads": _HEADS,
    },
    summary="Chi et al. 2022: b = -p ln(1 + a|i-j|) is CND, so delta = sqrt(p ln(1 + a|i-j|))",
    n_params="2*heads",
    kind="bias",
)(_kerple_log)


def _kerple_power(n: int, ctx: Context, *, a: float, p: float, heads: int) -> Encoding:
    a = positive("a", a)
    p = check_float("p", p, 0.0, 2.0, lo_open=True)
    heads = check_int("heads", heads, 1)
    delta = lag_profile(lambda lag: np.sqrt(a * lag**p), n)
    return Encoding("kerple-power", {"a": a, "p": p, "heads": heads}, 2 * heads, profile=delta)


register(
    "kerple-power",
    params={
        "a": (float, 1.0, "a > 0 (KERPLE r1)"),
        "p": (float, 1.0, "exponent in (0, 2] (KERPLE r2); p=1 is ALiBi's shape"),
        "heads": _HEADS,
    },
    summary="Chi et al. 2022: b = -a|i-j|^p, CND for p in (0,2], so delta = sqrt(a)|i-j|^(p/2)",
    n_params="2*heads",
    kind="bias",
)(_kerple_power)


def _shaw(n: int, ctx: Context, *, k: int, d_head: int) -> Encoding:
    k = check_int("k", k, 1)
    d_head = check_int("d_head", d_head, 1)
    delta = lag_profile(lambda lag: np.minimum(lag, k), n)
    # Shaw et al. learn a key vector and a value vector for each of the 2k+1 clipped offsets.
    return Encoding("shaw", {"k": k, "d_head": d_head}, 2 * (2 * k + 1) * d_head, profile=delta)


register(
    "shaw",
    params={
        "k": (int, 16, "clipping distance: relative positions clip(j-i, -k, k)"),
        "d_head": (int, 64, "head dimension (for the parameter count)"),
    },
    summary="Shaw et al. 2018 clipped relative positions: delta = min(|i-j|, k)",
    n_params="2*(2k+1)*d_head",
    kind="bias",
)(_shaw)
