"""Positional encodings as position geometries: a name -> factory registry (GEOMETRY.md section 5).

Each factory turns ``n`` positions and keyword parameters into an :class:`Encoding` holding the
dissimilarity ``delta_E`` the encoding induces between positions. Definitions and sources:
``docs/encodings.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.distance import pdist, squareform

from ._validate import check_float, check_int
from .errors import PosdiagError
from .geometry import MDS, gram_from_distances

__all__ = [
    "DEFAULT_SET",
    "Encoding",
    "EncodingSpec",
    "REGISTRY",
    "alibi_slopes",
    "make_encoding",
    "parse_encoding",
    "t5_bucket",
]


@dataclass(frozen=True)
class Encoding:
    """One encoding evaluated on ``n`` positions.

    Attributes
    ----------
    name : str
        Display name (``mds-3`` for ``mds`` at rank 3).
    params : mapping
        Every parameter with its value, defaults included.
    n_params : int
        Trainable parameters the encoding costs at this ``n``.
    delta : ndarray of shape (n, n)
        Induced dissimilarity between positions; symmetric, zero diagonal.
    vectors : ndarray of shape (n, d) or None
        Position vectors for additive encodings.
    """

    name: str
    params: Mapping[str, Any]
    n_params: int
    delta: np.ndarray
    vectors: np.ndarray | None = None

    def gram(self) -> np.ndarray:
        """``B_E = -1/2 J (delta o delta) J``, of shape (n, n)."""
        return gram_from_distances(self.delta)


@dataclass(frozen=True)
class Context:
    """Corpus facts some encodings need (``mds`` needs the corpus MDS)."""

    mds: MDS | None = None


Factory = Callable[..., Encoding]


@dataclass(frozen=True)
class EncodingSpec:
    """A registered encoding: its parameters with defaults (``None`` = required) and its maker."""

    name: str
    factory: Factory
    defaults: Mapping[str, Any]
    types: Mapping[str, type]
    summary: str
    n_params_formula: str
    kind: str = "absolute"
    extra: Mapping[str, Any] = field(default_factory=dict)


REGISTRY: dict[str, EncodingSpec] = {}

DEFAULT_SET: tuple[str, ...] = (
    "nope",
    "sinusoidal",
    "learned-random",
    "rope",
    "alibi",
    "alibi-kernel",
    "t5",
    "mds-1",
    "mds-2",
    "mds-3",
)


def register(
    name: str,
    *,
    params: Mapping[str, tuple[type, Any]],
    summary: str,
    n_params: str,
    kind: str = "absolute",
) -> Callable[[Factory], Factory]:
    def deco(fn: Factory) -> Factory:
        REGISTRY[name] = EncodingSpec(
            name=name,
            factory=fn,
            defaults={k: v[1] for k, v in params.items()},
            types={k: v[0] for k, v in params.items()},
            summary=summary,
            n_params_formula=n_params,
            kind=kind,
        )
        return fn

    return deco


def _toeplitz(f: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """Symmetric matrix ``M[i, j] = f(|i - j|)``."""
    lag = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    return np.asarray(f(np.arange(n, dtype=np.float64)))[lag]


def _distances(p: np.ndarray) -> np.ndarray:
    if p.shape[0] < 2:
        return np.zeros((p.shape[0], p.shape[0]))
    return squareform(pdist(np.asarray(p, dtype=np.float64)))


def _cosine_sum_distance(freqs: np.ndarray, c: float) -> Callable[[np.ndarray], np.ndarray]:
    """``delta(D) = sqrt(c * sum_k (1 - cos(D w_k)))``, via ``1 - cos x = 2 sin^2(x/2)``."""

    def f(lag: np.ndarray) -> np.ndarray:
        s = np.sin(np.outer(lag, freqs) / 2.0)
        return np.sqrt(2.0 * c * np.sum(s * s, axis=1))

    return f


def _even(name: str, value: Any) -> int:
    v = check_int(name, value, 2)
    if v % 2:
        raise PosdiagError(f"'{name}' must be an even int >= 2; got {v}")
    return v


@register("nope", params={}, summary="no positional signal (delta = 0)", n_params="0")
def _nope(n: int, ctx: Context) -> Encoding:
    return Encoding("nope", {}, 0, np.zeros((n, n)))


@register(
    "sinusoidal",
    params={"d": (int, 512), "base": (float, 10000.0)},
    summary="Vaswani et al. 2017: p_i[2k] = sin(i w_k), p_i[2k+1] = cos(i w_k), w_k = base^(-2k/d)",
    n_params="0",
)
def _sinusoidal(n: int, ctx: Context, *, d: int, base: float) -> Encoding:
    d = _even("d", d)
    base = check_float("base", base, 1.0, lo_open=True)
    w = base ** (-2.0 * np.arange(d // 2) / d)
    ang = np.outer(np.arange(n), w)
    p = np.empty((n, d))
    p[:, 0::2], p[:, 1::2] = np.sin(ang), np.cos(ang)
    delta = _toeplitz(_cosine_sum_distance(w, 2.0), n)
    return Encoding("sinusoidal", {"d": d, "base": base}, 0, delta, p)


@register(
    "learned-random",
    params={"d": (int, 768), "std": (float, 0.02), "seed": (int, 0)},
    summary="untrained learned table: N(0, std^2) entries (BERT/GPT-2 initialisation)",
    n_params="n*d",
)
def _learned_random(n: int, ctx: Context, *, d: int, std: float, seed: int) -> Encoding:
    d = check_int("d", d, 1)
    std = check_float("std", std, 0.0, lo_open=True)
    seed = check_int("seed", seed, 0)
    p = np.random.default_rng(seed).normal(0.0, std, size=(n, d))
    return Encoding("learned-random", {"d": d, "std": std, "seed": seed}, n * d, _distances(p), p)


# Names under which checkpoints store absolute position tables, most specific first.
POSITION_TENSOR_NAMES = (
    "bert.embeddings.position_embeddings.weight",
    "roberta.embeddings.position_embeddings.weight",
    "embeddings.position_embeddings.weight",
    "transformer.wpe.weight",
    "wpe.weight",
    "model.decoder.embed_positions.weight",
    "position_embeddings.weight",
    "position_embeddings",
)


def _list_names(names: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def load_table(path: str, tensor: str = "") -> np.ndarray:
    """Read a learned position table from ``.npy`` or a ``.safetensors`` tensor.

    Returns
    -------
    ndarray of shape (rows, d), float64
    """
    p = Path(path)
    if not p.is_file():
        raise PosdiagError(f"learned: path {path!r}: no such file")
    if p.suffix == ".npy":
        if tensor:
            raise PosdiagError(
                f"learned: tensor={tensor!r} applies to .safetensors files, not {path}"
            )
        try:
            table = np.load(p, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise PosdiagError(f"learned: {path}: not a readable .npy file ({exc})") from None
    elif p.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(p), framework="np") as fh:
                names = list(fh.keys())
                if tensor:
                    if tensor not in names:
                        raise PosdiagError(
                            f"learned: {path}: no tensor {tensor!r}; tensors: {_list_names(names)}"
                        )
                    chosen = tensor
                else:
                    known = [t for t in POSITION_TENSOR_NAMES if t in names]
                    if not known:
                        raise PosdiagError(
                            f"learned: {path}: no position-embedding tensor under a known name; "
                            f"pass tensor=NAME; tensors: {_list_names(names)}"
                        )
                    chosen = known[0]
                table = fh.get_tensor(chosen)
        except PosdiagError:
            raise
        except Exception as exc:  # safetensors raises its own error types
            raise PosdiagError(
                f"learned: {path}: not a readable .safetensors file ({exc})"
            ) from None
    else:
        raise PosdiagError(f"learned: path must end with .npy or .safetensors; got {path!r}")
    if table.ndim != 2:
        raise PosdiagError(
            f"learned: {path}: table must be 2-D (positions x d); got shape {tuple(table.shape)}"
        )
    table = np.asarray(table, dtype=np.float64)
    bad = ~np.isfinite(table)
    if bad.any():
        row, col = (int(x) for x in np.argwhere(bad)[0])
        raise PosdiagError(
            f"learned: {path}: table must be finite; got {table[row, col]} at row {row}, "
            f"column {col} ({int(bad.sum())} non-finite values)"
        )
    return table


@register(
    "learned",
    params={"path": (str, None), "tensor": (str, "")},
    summary="a learned table from .npy or a .safetensors tensor (rows 0..n-1)",
    n_params="n*d",
)
def _learned(n: int, ctx: Context, *, path: str, tensor: str) -> Encoding:
    table = load_table(path, tensor)
    if table.shape[0] < n:
        raise PosdiagError(
            f"learned: {path}: table has {table.shape[0]} rows; the corpus needs n_eff={n}"
        )
    p = table[:n]
    params = {"path": path, "tensor": tensor} if tensor else {"path": path}
    return Encoding("learned", params, n * p.shape[1], _distances(p), p)


@register(
    "rope",
    params={"head_dim": (int, 64), "base": (float, 10000.0)},
    summary="Su et al. 2021: rotations R_i, theta_k = base^(-2k/head_dim); delta = ||R_i - R_j||_F",
    n_params="0",
    kind="relative",
)
def _rope(n: int, ctx: Context, *, head_dim: int, base: float) -> Encoding:
    head_dim = _even("head_dim", head_dim)
    base = check_float("base", base, 1.0, lo_open=True)
    theta = base ** (-2.0 * np.arange(head_dim // 2) / head_dim)
    delta = _toeplitz(_cosine_sum_distance(theta, 4.0), n)
    return Encoding("rope", {"head_dim": head_dim, "base": base}, 0, delta)


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi head slopes (Press et al. 2022), for any number of heads, of shape (heads,)."""
    heads = check_int("heads", heads, 1)
    p = 1 << (heads.bit_length() - 1)
    slopes = 2.0 ** (-8.0 * np.arange(1, p + 1) / p)
    if p == heads:
        return slopes
    extra = 2.0 ** (-4.0 * (2 * np.arange(1, heads - p + 1) - 1) / p)
    return np.concatenate([slopes, extra])


@register(
    "alibi",
    params={"heads": (int, 8)},
    summary="Press et al. 2022, line reading: every head is -m_h|i-j|, so delta = |i-j| (rank 1)",
    n_params="0",
    kind="bias",
)
def _alibi(n: int, ctx: Context, *, heads: int) -> Encoding:
    alibi_slopes(heads)
    return Encoding("alibi", {"heads": heads}, 0, _toeplitz(lambda lag: lag, n))


@register(
    "alibi-kernel",
    params={"heads": (int, 8)},
    summary="ALiBi, kernel reading: -m|i-j| is conditionally neg. definite: delta = sqrt(|i-j|)",
    n_params="0",
    kind="bias",
)
def _alibi_kernel(n: int, ctx: Context, *, heads: int) -> Encoding:
    alibi_slopes(heads)
    return Encoding("alibi-kernel", {"heads": heads}, 0, _toeplitz(np.sqrt, n))


def t5_bucket(
    relative: np.ndarray, buckets: int = 32, max_distance: int = 128, bidirectional: bool = True
) -> np.ndarray:
    """T5's relative-position bucket of ``relative = j - i`` (HF ``_relative_position_bucket``)."""
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
    with np.errstate(divide="ignore"):
        large = max_exact + (
            np.log(np.maximum(r, 1) / max_exact)
            / np.log(max_distance / max_exact)
            * (n_b - max_exact)
        ).astype(np.int64)
    large = np.minimum(large, n_b - 1)
    return out + np.where(r < max_exact, r, large)


@register(
    "t5",
    params={
        "buckets": (int, 32),
        "max_distance": (int, 128),
        "bidirectional": (bool, True),
        "heads": (int, 8),
    },
    summary="Raffel et al. 2020 relative buckets: delta(i,j) = bucket of r = -|i-j| (log-spaced)",
    n_params="buckets*heads",
    kind="bias",
)
def _t5(
    n: int, ctx: Context, *, buckets: int, max_distance: int, bidirectional: bool, heads: int
) -> Encoding:
    buckets = check_int("buckets", buckets, 4 if bidirectional else 2)
    if bidirectional and buckets % 2:
        raise PosdiagError(f"'buckets' must be an even int >= 4 when bidirectional; got {buckets}")
    half = buckets // 2 if bidirectional else buckets
    max_distance = check_int("max_distance", max_distance, half // 2 + 1)
    heads = check_int("heads", heads, 1)
    delta = _toeplitz(
        lambda lag: t5_bucket(-lag.astype(np.int64), buckets, max_distance, bidirectional), n
    )
    params = {
        "buckets": buckets,
        "max_distance": max_distance,
        "bidirectional": bidirectional,
        "heads": heads,
    }
    return Encoding("t5", params, buckets * heads, delta.astype(np.float64))


@register(
    "mds",
    params={"rank": (int, None), "dim": (int, 512)},
    summary="the rank-r classical MDS encoding of the corpus (optimal at rank r); also 'mds-R'",
    n_params="rank*(n+dim)",
    kind="optimal",
)
def _mds(n: int, ctx: Context, *, rank: int, dim: int) -> Encoding:
    if ctx.mds is None:
        raise PosdiagError("encoding 'mds' needs a corpus geometry")
    rank = check_int("rank", rank, 1, n - 1, hi_label="n_eff-1")
    dim = check_int("dim", dim, rank, lo_label="rank")
    x = ctx.mds.coordinates(rank)
    return Encoding(f"mds-{rank}", {"rank": rank, "dim": dim}, rank * (n + dim), _distances(x), x)


_MDS_ALIAS = re.compile(r"^mds-(\d+)$")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _coerce(enc: str, key: str, kind: type, raw: str) -> Any:
    try:
        if kind is bool:
            low = raw.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        return raw
    except ValueError:
        raise PosdiagError(
            f"encoding {enc!r}: parameter {key!r} must be a {kind.__name__}; got {raw!r}"
        ) from None


def parse_encoding(text: str) -> tuple[str, dict[str, Any]]:
    """Parse ``NAME[:key=value,...]`` (``mds-R`` is ``mds:rank=R``) into a name and typed params."""
    name, _, rest = text.strip().partition(":")
    params: dict[str, Any] = {}
    alias = _MDS_ALIAS.match(name)
    if alias:
        name, params["rank"] = "mds", int(alias.group(1))
    spec = REGISTRY.get(name)
    if spec is None:
        raise PosdiagError(f"unknown encoding {name!r}; encodings: {', '.join(REGISTRY)}")
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise PosdiagError(f"encoding {name!r}: parameter {item!r} must look like key=value")
        if key not in spec.defaults:
            known = ", ".join(spec.defaults) or "(none)"
            raise PosdiagError(f"encoding {name!r}: unknown parameter {key!r}; parameters: {known}")
        params[key] = _coerce(name, key, spec.types[key], raw.strip())
    return name, params


def make_encoding(
    name: str, n: int, params: Mapping[str, Any] | None = None, *, mds: MDS | None = None
) -> Encoding:
    """Build a registered encoding on ``n`` positions.

    Parameters
    ----------
    name : str
        A key of :data:`REGISTRY`.
    n : int
        Number of positions (``n_eff``).
    params : mapping, optional
        Overrides of the encoding's defaults.
    mds : MDS, optional
        The corpus MDS, needed by ``mds``.
    """
    spec = REGISTRY.get(name)
    if spec is None:
        raise PosdiagError(f"unknown encoding {name!r}; encodings: {', '.join(REGISTRY)}")
    given = dict(params or {})
    unknown = sorted(set(given) - set(spec.defaults))
    if unknown:
        known = ", ".join(spec.defaults) or "(none)"
        raise PosdiagError(
            f"encoding {name!r}: unknown parameter {unknown[0]!r}; parameters: {known}"
        )
    full = {**spec.defaults, **given}
    missing = [k for k, v in full.items() if v is None]
    if missing:
        raise PosdiagError(f"encoding {name!r}: parameter {missing[0]!r} is required")
    check_int("n", n, 1)
    return spec.factory(n, Context(mds=mds), **full)
