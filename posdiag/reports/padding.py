"""Padding in the model view: which positions hold mostly the pad token (padding, not language,
would shape their geometry), and the warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # analysis imports this module
    from .analysis import CorpusSummary

__all__ = ["NEARLY_PAD_SHARE", "mostly_padding", "padding_warnings", "ranges"]

# A position whose real-token share is below this is "nearly pad-only".
NEARLY_PAD_SHARE = 0.05


def ranges(positions: Sequence[int]) -> str:
    """``0-3, 7, 9-12`` for sorted positions (``none`` when empty)."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive positions
    for p in positions:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def mostly_padding(
    summary: CorpusSummary, share: float = NEARLY_PAD_SHARE
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(pad_only, nearly)``: positions of ``0..max_len-1`` holding only padding, and analysed
    positions (``0..n_eff-1``) whose real-token share is below ``share`` but above 0."""
    if not summary.real_supports:
        return (), ()
    real, seqs = summary.real_supports, summary.supports
    pad_only = tuple(i for i, (r, s) in enumerate(zip(real, seqs, strict=True)) if s and r == 0)
    nearly = tuple(i for i in range(summary.n_eff) if seqs[i] and 0 < real[i] < share * seqs[i])
    return pad_only, nearly


def padding_warnings(summary: CorpusSummary) -> list[str]:
    """One warning naming the pad-only and nearly pad-only positions, or none."""
    pad_only, nearly = mostly_padding(summary)
    if not pad_only and not nearly:
        return []
    parts = []
    if pad_only:
        parts.append(
            f"positions {ranges(pad_only)} hold only padding in every sequence (not analysed: "
            "min_count counts real tokens in the model view)"
        )
    if nearly:
        parts.append(
            f"positions {ranges(nearly)} are analysed but over "
            f"{1 - NEARLY_PAD_SHARE:.0%} padding, so the pad token shapes their geometry"
        )
    first = min((*pad_only, *nearly))
    return [
        f"{summary.source}: {'; '.join(parts)}; use --max-len {max(first, 2)} or a higher "
        "--min-count to analyse real tokens only"
    ]
