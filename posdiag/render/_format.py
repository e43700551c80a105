"""The number and text formats every renderer shares (terminal, JSON, HTML, CI formats)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from ..reports.analysis import CorpusSummary, Spectrum, rank_text
from ..reports.padding import ranges
from ..reports.scores import EncodingScore

__all__ = [
    "SHOWN_RANKS",
    "score_json",
    "ci_text",
    "corpus_json",
    "effective_ranks",
    "fmt",
    "jsonable",
    "params",
    "ranges",
    "span",
    "spectrum_rows",
    "summary_rows",
]

# Ranks shown in the human spectrum tables; JSON carries all of them.
SHOWN_RANKS = 10


def jsonable(x: Any) -> Any:
    """Plain JSON values: NaN/inf become null, tuples lists, mapping keys strings."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    return x


def fmt(x: float, digits: int = 4) -> str:
    """``x`` with ``digits`` decimals, ``n/a`` for NaN (an undefined figure, e.g. spearman)."""
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def params(p: Mapping[str, Any]) -> str:
    """``key=value, ...`` with floats in ``%g``; not escaped (each output escapes its own way)."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in p.items())


def ci_text(lo: float, hi: float) -> str:
    """``[lo, hi]`` or ``n/a`` when no interval was computed."""
    return "n/a" if math.isnan(lo) else f"[{lo:.4f}, {hi:.4f}]"


def spectrum_rows(sp: Spectrum) -> list[tuple[str, str, str]]:
    """Rank, eigenvalue and in-sample stress of the first :data:`SHOWN_RANKS` ranks."""
    shown = range(1, min(SHOWN_RANKS, len(sp.stress_by_rank)) + 1)
    return [(str(r), f"{sp.eigenvalues[r - 1]:.4g}", fmt(sp.stress_by_rank[r - 1])) for r in shown]


def effective_ranks(sp: Spectrum, sep: str = " at stress <= ") -> str:
    """``3 at stress <= 0.1, ...`` ("not reached" below the stress floor)."""
    return ", ".join(
        f"{rank_text(r, sp.floor, sp.computed)}{sep}{eps:g}" for eps, r in sp.effective_rank.items()
    )


def span(positions: tuple[int, ...]) -> str:
    """``first..last (count)`` of sorted positions (``none`` when empty)."""
    return f"{positions[0]}..{positions[-1]} ({len(positions)})" if positions else "none"


def corpus_json(c: CorpusSummary) -> dict[str, Any]:
    """A corpus summary as JSON: its fields, and in the model view the real-token share per
    position (``real_supports / supports``)."""
    out = asdict(c)
    out["units"] = None if c.units is None else c.units.to_meta()
    if c.real_supports:
        out["real_share"] = list(c.real_share)
    return out


def score_json(e: EncodingScore) -> dict[str, Any]:
    """One row of a stress table as JSON: its fields and its family (posdiag.encodings.families)."""
    from ..encodings.families import family

    return {**asdict(e), "family": family(e.name)}


def summary_rows(c: CorpusSummary) -> list[tuple[str, str]]:
    """The corpus summary as (label, value) rows, shared by the terminal and HTML reports."""
    sup = c.supports
    return [
        ("source", c.source),
        ("tokenizer / view", f"{c.tokenizer} / {c.view}"),
        ("documents / sequences", f"{c.documents:,} / {c.sequences:,}"),
        ("tokens", f"{c.tokens:,}"),
        ("vocabulary seen / size", f"{c.vocab_seen:,} / {c.vocab_size:,}"),
        ("max_len n / n_eff", f"{c.max_len} / {c.n_eff}"),
        ("min_count", str(c.min_count)),
        ("support N_0 .. N_(n_eff-1)", f"{sup[0]:,} .. {sup[c.n_eff - 1]:,}"),
        *_real_rows(c),
        *_unit_rows(c),
        ("dropped positions", span(c.dropped) + (": support below min_count" if c.dropped else "")),
        *_unreached_rows(c),
    ]


def _unit_rows(c: CorpusSummary) -> list[tuple[str, str]]:
    """Duplicates and sampling units (docs/geometry.md section 2b)."""
    u = c.units
    if u is None:
        return []
    item = u.item
    dup = f"{u.duplicates:,} of {u.items:,} {item} ({u.share:.1%})"
    if u.dedup:
        dup += f"; --dedup dropped {u.dropped:,}"
    if u.prefix:
        shared = (
            f"{u.prefix_groups:,} {'group' if u.prefix_groups == 1 else 'groups'} of "
            f"{u.prefix_grouped:,} {item} (largest {u.largest_group:,}) share their first "
            f"{u.prefix} tokens"
        )
    else:
        shared = "not grouped (--group-prefix 0)"
    by = (
        f"--group-by {u.group_by}"
        if u.group_by
        else (f"content, first {u.prefix} tokens" if u.prefix else "content")
    )
    return [
        ("exact duplicates", dup),
        ("shared-prefix groups", shared),
        ("sampling units", f"{u.units:,} ({by}); min_count counts these"),
    ]


def _unreached_rows(c: CorpusSummary) -> list[tuple[str, str]]:
    """Positions up to max_len that no sequence reaches: neither analysed nor dropped, and
    otherwise invisible (the bundled corpus stops at 203 of 512)."""
    first = (c.dropped[-1] if c.dropped else c.n_eff - 1) + 1
    if first >= c.max_len:
        return []
    unit = "sequence reaches" if c.support_unit == "sequences" else "real token is at"
    return [("unreached positions", f"{span(tuple(range(first, c.max_len)))}: no {unit} them")]


def _real_rows(c: CorpusSummary) -> list[tuple[str, str]]:
    """The model view's real (non-pad) tokens: what min_count counted there."""
    if not c.real_supports:
        return []
    real, share, last = c.real_supports, c.real_share, c.n_eff - 1
    return [
        (
            "real (non-pad) tokens",
            f"{real[0]:,} ({share[0]:.1%}) .. {real[last]:,} ({share[last]:.1%}); "
            "min_count counts these",
        )
    ]
