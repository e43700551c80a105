"""The optimum: the rank-r classical MDS encoding of the corpus itself (docs/geometry.md
section 3)."""

from __future__ import annotations

from .._util.validate import check_int
from ..errors import PosdiagError
from ._core import DEFAULT_DIM, Context, Encoding, register

__all__: list[str] = []


@register(
    "mds",
    params={
        "rank": (int, None, "MDS rank r, in [1, n_eff-1]"),
        "dim": (int, DEFAULT_DIM, "model dimension d the rank-r table is embedded in (>= rank)"),
    },
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
    return Encoding(f"mds-{rank}", {"rank": rank, "dim": dim}, rank * (n + dim), vectors=x)
