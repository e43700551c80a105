"""The encoding registry: specs, factories, parsing of ``NAME[:key=value,...]``.

Contract: docs/geometry.md section 5. The family modules (``absolute``, ``rope``, ``bias``,
``optimal``) register their factories here on import.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from scipy.spatial.distance import pdist, squareform

from .._util.defaults import DEFAULT_DIM  # why one d: see there
from .._util.memory import require
from .._util.validate import check_float, check_int
from ..errors import PosdiagError
from ..geometry.core import MDS, gram_from_distances

__all__ = [
    "Context",
    "DEFAULT_DIM",
    "DEFAULT_SET",
    "DIM_PARAMS",
    "Encoding",
    "EncodingSpec",
    "REGISTRY",
    "did_you_mean",
    "lag_profile",
    "make_encoding",
    "parse_encoding",
    "register",
    "with_dim",
]

# The parameter holding the model dimension d, per encoding (``--dim`` sets it). Per-head sizes
# (rope's head_dim, shaw's d_head) are not the model dimension and are left alone.
DIM_PARAMS: dict[str, str] = {
    "sinusoidal": "d",
    "scaled-sinusoidal": "d",
    "learned-random": "d",
    "mds": "dim",
}


@dataclass(frozen=True)
class Encoding:
    """One encoding evaluated on ``n`` positions; :attr:`delta` builds the ``n x n`` matrix
    from the cheapest exact form given on first use only.

    Attributes
    ----------
    name : str
        Display name (``mds-3`` for ``mds`` at rank 3).
    params : mapping
        Every parameter with its value, defaults included.
    n_params : int
        Trainable parameters the encoding costs at this ``n``.
    matrix : ndarray of shape (n, n) or None
        An explicit dissimilarity, when neither ``profile`` nor ``vectors`` defines it.
    vectors : ndarray of shape (n, d) or None
        Position vectors for additive encodings.
    profile : ndarray of shape (n,) or None
        ``delta(i, j) = profile[|i - j|]`` for Toeplitz encodings (``profile[0] = 0``); takes
        precedence over ``vectors`` for ``delta`` (it is the exact closed form).
    """

    name: str
    params: Mapping[str, Any]
    n_params: int
    matrix: np.ndarray | None = None
    vectors: np.ndarray | None = None
    profile: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.matrix is None and self.vectors is None and self.profile is None:
            raise ValueError("an Encoding needs a matrix, vectors or a profile")

    @property
    def n(self) -> int:
        """Number of positions."""
        return int(
            next(a for a in (self.profile, self.vectors, self.matrix) if a is not None).shape[0]
        )

    @cached_property  # a frozen dataclass may still cache on its instance dict (not a field)
    def delta(self) -> np.ndarray:
        """Induced dissimilarity between positions, (n, n), symmetric, zero diagonal."""
        if self.matrix is not None:
            return np.asarray(self.matrix)
        if self.profile is not None:
            g = np.asarray(self.profile, dtype=np.float64)
            return g[np.abs(np.subtract.outer(np.arange(g.size), np.arange(g.size)))]
        assert self.vectors is not None
        return distances(self.vectors)

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
    """A registered encoding: its parameters with defaults (``None`` = required), their types
    and one-line ``docs`` (shown by ``posdiag encodings``), and its maker."""

    name: str
    factory: Factory
    defaults: Mapping[str, Any]
    types: Mapping[str, type]
    summary: str
    n_params_formula: str
    kind: str = "absolute"
    docs: Mapping[str, str] = field(default_factory=dict)


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
    params: Mapping[str, tuple[Any, ...]],
    summary: str,
    n_params: str,
    kind: str = "absolute",
) -> Callable[[Factory], Factory]:
    """Register ``fn`` under ``name``; ``params`` maps a name to ``(type, default[, doc])``."""

    def deco(fn: Factory) -> Factory:
        REGISTRY[name] = EncodingSpec(
            name=name,
            factory=fn,
            defaults={k: v[1] for k, v in params.items()},
            types={k: v[0] for k, v in params.items()},
            summary=summary,
            n_params_formula=n_params,
            kind=kind,
            docs={k: v[2] for k, v in params.items() if len(v) > 2},
        )
        return fn

    return deco


def lag_profile(f: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """``g[lag] = f(lag)`` for lag = 0..n-1, of shape (n,): a Toeplitz encoding's whole delta."""
    return np.asarray(f(np.arange(n, dtype=np.float64)), dtype=np.float64)


def distances(p: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``p`` (n, d), of shape (n, n)."""
    if p.shape[0] < 2:
        return np.zeros((p.shape[0], p.shape[0]))
    return squareform(pdist(np.asarray(p, dtype=np.float64)))


def cosine_sum_distance(freqs: np.ndarray, c: float) -> Callable[[np.ndarray], np.ndarray]:
    """``delta(D) = sqrt(c * sum_k (1 - cos(D w_k)))``, via ``1 - cos x = 2 sin^2(x/2)``.

    The half-angle form keeps small lags accurate (``1 - cos`` cancels catastrophically).
    """

    def f(lag: np.ndarray) -> np.ndarray:
        s = np.sin(np.outer(lag, freqs) / 2.0)
        return np.sqrt(2.0 * c * np.sum(s * s, axis=1))

    return f


def even(name: str, value: Any) -> int:
    v = check_int(name, value, 2)
    if v % 2:
        raise PosdiagError(f"'{name}' must be an even int >= 2; got {v}")
    return v


def positive(name: str, value: Any) -> float:
    return check_float(name, value, 0.0, lo_open=True)


_MDS_ALIAS = re.compile(r"^mds-(\d+)$")
_BOOLS = {"true": True, "1": True, "yes": True, "on": True}
_BOOLS |= {"false": False, "0": False, "no": False, "off": False}


def _coerce(enc: str, key: str, kind: type, raw: str) -> Any:
    """``raw`` as the parameter's type: int, float, str, or bool from :data:`_BOOLS`."""
    try:
        return _BOOLS[raw.lower()] if kind is bool else kind(raw)
    except (KeyError, ValueError):
        article = "an" if kind is int else "a"  # "an int", "a float", "a bool"
        raise PosdiagError(
            f"encoding {enc!r}: parameter {key!r} must be {article} {kind.__name__}; got {raw!r}"
        ) from None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the closest of ``choices`` (case-insensitive), else ``""``."""
    lower = {c.lower(): c for c in choices}
    if word.lower() in lower:
        return f"did you mean {lower[word.lower()]!r}? "
    close = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.75)
    if not close:
        # A unique completion: 'bert' -> 'bert-base'.
        close = [c for c in lower if c.startswith(word.lower())][:2]
        close = close if len(close) == 1 else []
    return f"did you mean {lower[close[0]]!r}? " if close else ""


def unknown_encoding(name: str) -> PosdiagError:
    hint = did_you_mean(name, [*REGISTRY, *(f"mds-{r}" for r in (1, 2, 3))])
    return PosdiagError(f"unknown encoding {name!r}; {hint}encodings: {', '.join(REGISTRY)}")


def parse_encoding(text: str) -> tuple[str, dict[str, Any]]:
    """Parse ``NAME[:key=value,...]`` (``mds-R`` is ``mds:rank=R``) into a name and typed params."""
    name, _, rest = text.strip().partition(":")
    params: dict[str, Any] = {}
    alias = _MDS_ALIAS.match(name)
    if alias:
        name, params["rank"] = "mds", int(alias.group(1))
    spec = REGISTRY.get(name)
    if spec is None:
        raise unknown_encoding(name)
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise PosdiagError(f"encoding {name!r}: parameter {item!r} must look like key=value")
        if key not in spec.defaults:
            raise _unknown_parameter(spec, key)
        params[key] = _coerce(name, key, spec.types[key], raw.strip())
    return name, params


def _unknown_parameter(spec: EncodingSpec, key: str) -> PosdiagError:
    known = ", ".join(spec.defaults) or "(none)"
    return PosdiagError(f"encoding {spec.name!r}: unknown parameter {key!r}; parameters: {known}")


def with_dim(name: str, params: Mapping[str, Any], dim: int | None) -> dict[str, Any]:
    """``params`` with the model dimension set to ``dim`` when ``name`` has one and ``params``
    does not give it explicitly (an explicit ``d=`` wins); unchanged when ``dim`` is None."""
    out = dict(params)
    key = DIM_PARAMS.get(name)
    if dim is not None and key is not None and key not in out:
        out[key] = check_int("dim", dim, 1)
    return out


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
        alias = _MDS_ALIAS.match(name) if isinstance(name, str) else None
        if alias:
            # The CLI spelling, not a registry key: the generic hint would suggest the very name.
            raise PosdiagError(
                f"unknown encoding {name!r}: 'mds-R' is a spec for parse_encoding; "
                f"make_encoding takes 'mds' with params {{'rank': {int(alias.group(1))}}}"
            )
        raise unknown_encoding(name)
    given = dict(params or {})
    unknown = sorted(set(given) - set(spec.defaults))
    if unknown:
        raise _unknown_parameter(spec, unknown[0])
    full = {**spec.defaults, **given}
    missing = [k for k, v in full.items() if v is None]
    if missing:
        raise PosdiagError(f"encoding {name!r}: parameter {missing[0]!r} is required")
    check_int("n", n, 1)
    _require_memory(name, n, full)
    return spec.factory(n, Context(mds=mds), **full)


# Integer parameters that size an encoding's arrays (a table n x width, or one n x n per head).
_WIDTHS = ("d", "head_dim", "d_head", "dim", "buckets", "k")
# Up to this n a score may build an encoding's dense delta and gram (the bootstrap's scorer: one
# vdot a replicate); beyond it encodings are scored from their lag profile or vectors only.
DENSE_MATRICES_MAX = 2048


def _require_memory(name: str, n: int, params: Mapping[str, Any]) -> None:
    """Refuse parameters whose arrays cannot fit (``sinusoidal:d=1000000000``) before building."""
    ints = {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}
    width = max([abs(ints[k]) for k in _WIDTHS if k in ints] or [1])
    heads = abs(ints.get("heads", 1))
    # A few n x width tables (angles, sin, cos, the table), head slopes, and the dense delta and
    # gram a short input's scores build lazily (no factory builds an n x n matrix per head).
    dense = 2 * n * n if n <= DENSE_MATRICES_MAX else 0
    need = 8 * (4 * n * width + 4 * heads + dense)
    shown = ", ".join(f"{k}={v:,}" for k, v in ints.items() if k in (*_WIDTHS, "heads"))
    require(f"encoding {name!r} on {n:,} positions ({shown})", need)
