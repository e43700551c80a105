"""Rotary encodings (RoPE), their context-extension variants, and xPos (docs/encodings.md
section 2): ``delta^2 = ||m R_i - m R_j||_F^2 = 4 m^2 sum_k (1 - cos((i-j) theta'_k))`` with the
variant's frequencies ``theta'_k`` and attention factor ``m``. Parameter names follow Hugging
Face ``rope_scaling``. Factories are registered by a call: mutmut skips decorated functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._util.validate import check_float, check_int
from ..errors import PosdiagError
from ._core import (
    Context,
    Encoding,
    cosine_sum_distance,
    even,
    lag_profile,
    positive,
    register,
)

__all__ = [
    "LongRopeConfig",
    "dynamic_ntk_base",
    "llama3_frequencies",
    "longrope_config",
    "rope_frequencies",
    "rotated_dim",
    "yarn_correction_range",
    "yarn_frequencies",
    "yarn_attention_factor",
    "yarn_mscale",
    "xpos_decay",
]


def rotated_dim(head_dim: int, partial_rotary_factor: float) -> int:
    """``int(head_dim * partial_rotary_factor)`` (HF), which must be >= 1; an odd ``d`` rotates
    ``ceil(d/2)`` pairs, as in Hugging Face."""
    head_dim = even("head_dim", head_dim)
    prf = check_float("partial_rotary_factor", partial_rotary_factor, 0.0, 1.0, lo_open=True)
    d = int(head_dim * prf)
    if d < 1:
        raise PosdiagError(
            f"'partial_rotary_factor' must leave a rotated dimension >= 1; "
            f"got head_dim={head_dim} * {prf:g} = {d}"
        )
    return d


def rope_frequencies(d: int, base: float) -> np.ndarray:
    """``theta_k = base^(-2k/d)``, k = 0..ceil(d/2)-1, of shape (ceil(d/2),)."""
    return np.asarray(base ** (-np.arange(0, d, 2, dtype=np.float64) / d), dtype=np.float64)


def dynamic_ntk_base(base: float, d: int, factor: float, max_positions: int, seq_len: int) -> float:
    """Dynamic NTK base ``b * (s l / L - (s - 1))^(d/(d-2))``, ``l = max(seq_len, L)`` (``b``
    for ``seq_len <= L``)."""
    length = max(seq_len, max_positions)
    return float(base * (factor * length / max_positions - (factor - 1.0)) ** (d / (d - 2)))


def yarn_correction_range(
    d: int,
    base: float,
    max_positions: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> tuple[float, float]:
    """YaRN's ramp ends ``(k_lo, k_hi)``, clamped to ``[0, d-1]``.

    ``k(rho) = d ln(L / (2 pi rho)) / (2 ln b)`` is the pair index whose wavelength fits ``rho``
    times in ``L``; ``k_lo = floor(k(beta_fast))``, ``k_hi = ceil(k(beta_slow))`` when
    ``truncate``.
    """

    def k(rho: float) -> float:
        return d * math.log(max_positions / (2.0 * math.pi * rho)) / (2.0 * math.log(base))

    lo, hi = k(beta_fast), k(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    return float(max(lo, 0)), float(min(hi, d - 1))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """``0.1 mscale ln s + 1`` (1 for ``s <= 1``): HF's ``get_mscale``."""
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_attention_factor(factor: float, mscale: float = 0.0, mscale_all_dim: float = 0.0) -> float:
    """YaRN's default attention factor ``m`` with Hugging Face semantics (0 = not given).

    With both ``mscale`` and ``mscale_all_dim`` it is ``get_mscale(s, mscale) /
    get_mscale(s, mscale_all_dim)`` (DeepSeek-style configs: 1 when they are equal); otherwise
    ``mscale`` is ignored and ``m = 0.1 ln s + 1``.
    """
    if mscale and mscale_all_dim:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    return yarn_mscale(factor)


def yarn_frequencies(
    d: int,
    base: float,
    factor: float,
    max_positions: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> np.ndarray:
    """``theta'_k = (1 - r_k) theta_k + r_k theta_k / s``, ``r_k`` the clamped linear ramp."""
    lo, hi = yarn_correction_range(d, base, max_positions, beta_fast, beta_slow, truncate)
    if hi == lo:
        hi += 0.001  # HF's guard against a zero-width ramp
    ramp = np.clip((np.arange(d // 2) - lo) / (hi - lo), 0.0, 1.0)
    theta = rope_frequencies(d, base)
    return np.asarray((1.0 - ramp) * theta + ramp * theta / factor, dtype=np.float64)


def llama3_frequencies(
    d: int,
    base: float,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    max_positions: int = 8192,
) -> np.ndarray:
    """Llama-3.1 frequencies by wavelength ``lam_k = 2 pi / theta_k``.

    ``lam < L/hf`` kept; ``lam > L/lf`` divided by ``s``; between, ``(1-g) theta/s + g theta`` with
    ``g = (L/lam - lf) / (hf - lf)``.
    """
    theta = rope_frequencies(d, base)
    lam = 2.0 * math.pi / theta
    g = (max_positions / lam - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smooth = (1.0 - g) * theta / factor + g * theta
    out = np.where(lam > max_positions / low_freq_factor, theta / factor, theta)
    medium = (lam >= max_positions / high_freq_factor) & (lam <= max_positions / low_freq_factor)
    return np.asarray(np.where(medium, smooth, out), dtype=np.float64)


@dataclass(frozen=True)
class LongRopeConfig:
    """What a LongRoPE JSON file (a Hugging Face ``config.json`` works as is) provides.

    Attributes
    ----------
    short_factor, long_factor : ndarray of shape (pairs,)
        Per-pair frequency divisors ``lambda_k``.
    max_position_embeddings, original_max_position_embeddings : int or None
        The extended and the pretrained context length ``L``, when the file has them.
    factor : float or None
        ``rope_scaling.factor``, when the file has it.
    """

    short_factor: np.ndarray
    long_factor: np.ndarray
    max_position_embeddings: int | None = None
    original_max_position_embeddings: int | None = None
    factor: float | None = None

    def scale(self) -> float | None:
        """``s`` as HF derives it: ``max / original`` with both lengths, else ``factor``."""
        if self.original_max_position_embeddings and self.max_position_embeddings:
            return self.max_position_embeddings / self.original_max_position_embeddings
        return self.factor

    def length(self) -> int | None:
        """``L`` as HF takes it: the original length, else ``max_position_embeddings``."""
        return self.original_max_position_embeddings or self.max_position_embeddings


def _positive_number(path: str, key: str, value: Any, kind: type) -> Any:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and kind is int:
        ok = float(value).is_integer() and value >= 1
    elif ok:
        ok = math.isfinite(value) and value > 0
    if not ok:
        rule = "an int >= 1" if kind is int else "a finite number > 0"
        raise PosdiagError(f"rope-longrope: factors {path}: {key} must be {rule}; got {value!r}")
    return kind(value)


def longrope_config(path: str, pairs: int) -> LongRopeConfig:
    """Read ``short_factor``/``long_factor`` (``pairs`` entries each) and the context lengths.

    The lists may be at the top level or under ``rope_scaling``; ``max_position_embeddings`` is
    read from the top level, ``original_max_position_embeddings`` from the top level (Phi-3)
    or ``rope_scaling``, ``factor`` from ``rope_scaling`` (or the top level).
    """
    p = Path(path)
    if not p.is_file():
        raise PosdiagError(f"rope-longrope: factors {path!r}: no such file")
    try:
        top = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PosdiagError(f"rope-longrope: factors {path}: not a JSON file ({exc})") from None
    if not isinstance(top, Mapping):
        top = {}
    doc = top["rope_scaling"] if isinstance(top.get("rope_scaling"), Mapping) else top
    out = []
    for key in ("short_factor", "long_factor"):
        vals = doc.get(key)
        if not isinstance(vals, list):
            raise PosdiagError(f"rope-longrope: factors {path}: needs a list {key!r}")
        try:
            arr = np.asarray(vals, dtype=np.float64)
        except (TypeError, ValueError):
            raise PosdiagError(f"rope-longrope: factors {path}: {key} must be numbers") from None
        if arr.shape != (pairs,):
            raise PosdiagError(
                f"rope-longrope: factors {path}: {key} must have ceil(rotated_dim/2)={pairs} "
                f"entries; got {arr.size}"
            )
        if not (np.isfinite(arr).all() and (arr > 0).all()):
            raise PosdiagError(f"rope-longrope: factors {path}: {key} must be finite and > 0")
        out.append(arr)
    found: dict[str, Any] = {}
    for key, kind, places in (
        ("max_position_embeddings", int, (top,)),
        ("original_max_position_embeddings", int, (top, doc)),
        ("factor", float, (doc, top)),
    ):
        value = next((d[key] for d in places if d.get(key) is not None), None)
        found[key] = None if value is None else _positive_number(path, key, value, kind)
    return LongRopeConfig(out[0], out[1], **found)


_HEAD = (int, 64, "head dimension (even)")
_BASE = (float, 10000.0, "rotary base b (HF rope_theta): theta_k = b^(-2k/d)")
_PRF = (float, 1.0, "fraction of head_dim rotated (HF partial_rotary_factor)")
_FACTOR = (float, 4.0, "context-extension factor s (HF factor; HF has no default, 4 is ours)")
_ORIG = (int, 4096, "original context length L (HF original_max_position_embeddings)")
_SEQ = (int, 0, "current sequence length l; 0 = n, the positions scored")


@dataclass(frozen=True)
class _Rotary:
    """What a rotary variant is given: ``n`` positions, the rotated dimension ``d``, the checked
    ``base``, and ``head_dim`` and ``prf`` (partial_rotary_factor) as given."""

    n: int
    d: int
    base: float
    head_dim: int
    prf: float


# A variant's result: frequencies theta' (pairs,), attention factor m, params after head_dim, base.
_Variant = tuple[np.ndarray, float, dict[str, Any]]


def _rotary(name: str, variant: Callable[..., _Variant], n: int, kw: dict[str, Any]) -> Encoding:
    """Rotations by the variant's ``theta'`` scaled by its attention factor ``m``; ``kw``: the
    encoding's parameters."""
    head_dim, base, prf = (kw.pop(k) for k in ("head_dim", "base", "partial_rotary_factor"))
    d, base = _common(head_dim, base, prf)
    theta, m, params = variant(_Rotary(n, d, base, head_dim, prf), **kw)
    g = m * lag_profile(cosine_sum_distance(theta, 4.0), n)
    return Encoding(name, {"head_dim": head_dim, "base": base, **params}, 0, profile=g)


def _register(
    name: str, variant: Callable[..., _Variant], summary: str, **params: tuple[Any, ...]
) -> None:
    """Register a rotary encoding: no trained parameters, relative; head_dim, base and
    partial_rotary_factor first (``params`` may override their defaults)."""
    common = {"head_dim": _HEAD, "base": _BASE, "partial_rotary_factor": _PRF}
    register(name, params={**common, **params}, summary=summary, n_params="0", kind="relative")(
        lambda n, ctx, **kw: _rotary(name, variant, n, kw)
    )


def _common(head_dim: int, base: float, prf: float) -> tuple[int, float]:
    d = rotated_dim(head_dim, prf)
    return d, check_float("base", base, 1.0, lo_open=True)


def _factor(factor: float) -> float:
    return check_float("factor", factor, 1.0)


def _base_rescaled(r: _Rotary) -> None:
    # b' = b * (...)^(d/(d-2)) needs d > 2 (HF computes it for any such d, odd included).
    if r.d < 3:
        raise PosdiagError(
            f"base rescaling needs a rotated dimension >= 3; got {r.d} "
            f"(head_dim * partial_rotary_factor={r.prf:g})"
        )


def _rope(r: _Rotary, *, attention_factor: float) -> _Variant:
    m = positive("attention_factor", attention_factor)
    params: dict[str, Any] = {}
    if r.prf != 1.0:
        params["partial_rotary_factor"] = r.prf
    if m != 1.0:
        params["attention_factor"] = m
    return rope_frequencies(r.d, r.base), m, params


_register(
    "rope",
    _rope,
    "Su et al. 2021: rotations R_i, theta_k = base^(-2k/d); delta = ||R_i - R_j||_F",
    attention_factor=(float, 1.0, "m, multiplies cos and sin"),
)


def _rope_linear(r: _Rotary, *, factor: float) -> _Variant:
    s = _factor(factor)
    return rope_frequencies(r.d, r.base) / s, 1.0, {"factor": s}


_register(
    "rope-linear",
    _rope_linear,
    "position interpolation (Chen et al. 2023): theta_k / s, i.e. position i -> i/s",
    factor=_FACTOR,
)


def _rope_ntk(r: _Rotary, *, factor: float) -> _Variant:
    _base_rescaled(r)
    s = _factor(factor)
    new_base = r.base * s ** (r.d / (r.d - 2))
    return rope_frequencies(r.d, new_base), 1.0, {"factor": s, "scaled_base": new_base}


_register(
    "rope-ntk",
    _rope_ntk,
    "static NTK-aware scaling (bloc97 2023): base b' = b s^(d/(d-2))",
    factor=_FACTOR,
)


def _rope_dynamic(
    r: _Rotary, *, factor: float, max_position_embeddings: int, seq_len: int
) -> _Variant:
    _base_rescaled(r)
    s = _factor(factor)
    big_l = check_int("max_position_embeddings", max_position_embeddings, 1)
    seq = check_int("seq_len", seq_len, 0) or r.n
    new_base = dynamic_ntk_base(r.base, r.d, s, big_l, seq)
    params = {
        "factor": s,
        "max_position_embeddings": big_l,
        "seq_len": seq,
        "scaled_base": new_base,
    }
    return rope_frequencies(r.d, new_base), 1.0, params


_register(
    "rope-dynamic",
    _rope_dynamic,
    "dynamic NTK: b' = b (s l/L - (s-1))^(d/(d-2)), l = max(seq_len, L); = rope if l <= L",
    factor=_FACTOR,
    max_position_embeddings=(int, 4096, "L, the trained length (HF max_position_embeddings)"),
    seq_len=_SEQ,
)


def _rope_yarn(
    r: _Rotary,
    *,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float,
    beta_slow: float,
    attention_factor: float,
    mscale: float,
    mscale_all_dim: float,
    truncate: bool,
) -> _Variant:
    if r.d % 2:
        # HF's YaRN ramp has d//2 entries against ceil(d/2) frequencies and fails on odd d.
        raise PosdiagError(
            f"rope-yarn needs an even rotated dimension (Hugging Face's ramp has d//2 entries); "
            f"got head_dim={r.head_dim} * {r.prf:g} = {r.d}"
        )
    s = _factor(factor)
    big_l = check_int("original_max_position_embeddings", original_max_position_embeddings, 1)
    fast = positive("beta_fast", beta_fast)
    slow = check_float("beta_slow", beta_slow, 0.0, fast, lo_open=True)
    m = check_float("attention_factor", attention_factor, 0.0) or yarn_attention_factor(
        s, check_float("mscale", mscale, 0.0), check_float("mscale_all_dim", mscale_all_dim, 0.0)
    )
    theta = yarn_frequencies(r.d, r.base, s, big_l, fast, slow, truncate)
    params = {
        "factor": s,
        "original_max_position_embeddings": big_l,
        "beta_fast": fast,
        "beta_slow": slow,
        "attention_factor": m,
    }
    return theta, m, params


_register(
    "rope-yarn",
    _rope_yarn,
    "YaRN (Peng et al. 2023): ramp from theta_k to theta_k/s between k_lo and k_hi, "
    "rotations scaled by m",
    factor=_FACTOR,
    original_max_position_embeddings=_ORIG,
    beta_fast=(float, 32.0, "rotations fitting in L above which pairs are kept"),
    beta_slow=(float, 1.0, "rotations fitting in L below which pairs are divided by s"),
    attention_factor=(
        float,
        0.0,
        "m; 0 = (0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1) if both are given, "
        "else 0.1 ln s + 1 (HF)",
    ),
    mscale=(float, 0.0, "HF mscale; 0 = not given (used only with mscale_all_dim)"),
    mscale_all_dim=(float, 0.0, "HF mscale_all_dim (DeepSeek); 0 = not given"),
    truncate=(bool, True, "round the ramp ends to integers (HF truncate)"),
)


def _rope_llama3(
    r: _Rotary,
    *,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_position_embeddings: int,
) -> _Variant:
    s = _factor(factor)
    lf = positive("low_freq_factor", low_freq_factor)
    hf = check_float("high_freq_factor", high_freq_factor, lf, lo_open=True)
    big_l = check_int("original_max_position_embeddings", original_max_position_embeddings, 1)
    theta = llama3_frequencies(r.d, r.base, s, lf, hf, big_l)
    params = {
        "factor": s,
        "low_freq_factor": lf,
        "high_freq_factor": hf,
        "original_max_position_embeddings": big_l,
    }
    return theta, 1.0, params


_register(
    "rope-llama3",
    _rope_llama3,
    "Llama-3.1 scaling by wavelength: keep short, divide long by s, smooth between",
    head_dim=(int, 128, "head dimension (even); Llama-3.1's default"),
    base=(float, 500000.0, "rotary base (HF rope_theta); Llama-3.1's default"),
    factor=(float, 8.0, "s, the divisor of low frequencies"),
    low_freq_factor=(float, 1.0, "lf: wavelengths above L/lf are divided by s"),
    high_freq_factor=(float, 4.0, "hf: wavelengths below L/hf are kept"),
    original_max_position_embeddings=(int, 8192, "L, the original context length"),
)


def _rope_longrope(
    r: _Rotary,
    *,
    factors: str,
    factor: float,
    original_max_position_embeddings: int,
    attention_factor: float,
    seq_len: int,
) -> _Variant:
    pairs = (r.d + 1) // 2
    if factors:
        cfg = longrope_config(factors, pairs)
    else:
        cfg = LongRopeConfig(np.ones(pairs), np.ones(pairs))
    # An explicit parameter wins; else the file decides as HF does (Phi-3-mini-128k:
    # 131072 / 4096 = 32); else the defaults.
    factor = check_float("factor", factor, 0.0)
    s = _factor(factor) if factor else (cfg.scale() or 1.0)
    big_l = check_int(
        "original_max_position_embeddings",
        original_max_position_embeddings or cfg.length() or 4096,
        2,
    )
    short, long = cfg.short_factor, cfg.long_factor
    seq = check_int("seq_len", seq_len, 0) or r.n
    use_long = seq > big_l
    lam = long if use_long else short
    m = check_float("attention_factor", attention_factor, 0.0) or (
        1.0 if s <= 1.0 else math.sqrt(1.0 + math.log(s) / math.log(big_l))
    )
    theta = rope_frequencies(r.d, r.base) / lam
    params: dict[str, Any] = {"factors": factors} if factors else {}
    params.update(
        factor=s,
        original_max_position_embeddings=big_l,
        attention_factor=m,
        seq_len=seq,
        lists="long" if use_long else "short",
    )
    return theta, m, params


_register(
    "rope-longrope",
    _rope_longrope,
    "LongRoPE / Phi-3: theta_k / lambda_k, long_factor if seq_len > L else short_factor",
    factors=(
        str,
        "",
        "JSON (a model's config.json) with short_factor/long_factor lists, one per rotated "
        "pair, and the context lengths; empty = 1s",
    ),
    factor=(
        float,
        0.0,
        "s; 0 = max_position_embeddings / original_max_position_embeddings of the factors "
        "file (HF), else its rope_scaling.factor, else 1",
    ),
    original_max_position_embeddings=(
        int,
        0,
        "L; 0 = the factors file's original_max_position_embeddings (else its "
        "max_position_embeddings), else 4096",
    ),
    attention_factor=(float, 0.0, "m; 0 = sqrt(1 + ln s / ln L) (1 if s <= 1)"),
    seq_len=_SEQ,
)


def xpos_decay(d: int) -> np.ndarray:
    """xPos per-pair decay ``z_k = (2k + 0.4 d) / (1.4 d)``, of shape (d/2,)."""
    return np.asarray((2.0 * np.arange(d // 2) + 0.4 * d) / (1.4 * d), dtype=np.float64)


def _xpos(n: int, ctx: Context, *, head_dim: int, base: float, scale_base: int) -> Encoding:
    d, base = _common(head_dim, base, 1.0)
    big_b = check_int("scale_base", scale_base, 1)
    theta, z = rope_frequencies(d, base), xpos_decay(d)
    # torchscale's XPOS: min_pos = -(n + offset) // 2, which Python reads as floor(-n/2), so the
    # exponents run from -ceil(n/2): the centre is ceil(n/2) (one past n//2 when n is odd).
    c = (n + 1) // 2
    pos = np.arange(n, dtype=np.float64)
    ang = np.outer(pos, theta)
    expo = np.outer((pos - c) / big_b, np.ones(d // 2))
    # Position i acts on queries by Q_i = Z^((i-c)/B) R_i and on keys by K_i = Z^(-(i-c)/B) R_i.
    # A 2x2 block a R(alpha) has Frobenius coordinates sqrt(2) a (cos alpha, sin alpha), so these
    # vectors reproduce ||Q_i - Q_j||_F^2 + ||K_i - K_j||_F^2 exactly.
    parts = []
    for sign in (1.0, -1.0):
        a = np.sqrt(2.0) * z[None, :] ** (sign * expo)
        parts += [a * np.cos(ang), a * np.sin(ang)]
    p = np.concatenate(parts, axis=1)
    params = {"head_dim": head_dim, "base": base, "scale_base": big_b, "center": c}
    return Encoding("xpos", params, 0, vectors=p)


register(
    "xpos",
    params={
        "head_dim": _HEAD,
        "base": _BASE,
        "scale_base": (
            int,
            512,
            "B: pair k of q_i is scaled by z_k^((i-c)/B), of k_j by the inverse",
        ),
    },
    summary="Sun et al. 2023: RoPE with per-pair decay z_k^(+-(i-c)/B), c = ceil(n/2); "
    "not Toeplitz",
    n_params="0",
    kind="relative",
)(_xpos)
