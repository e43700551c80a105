"""Tables that fit the terminal without cutting what users type.

rich shrinks every column of a table wider than the terminal and cuts cells with an ellipsis
(``scaled-sinuso…``, ``learne…``): a name shown that way cannot be copied into ``-e``. Here the
name columns never shrink below their longest cell, parameter lists wrap between parameters
only, and when the table still does not fit, the least important columns are left out (and
named below the table) instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["Column", "print_fitted"]


@dataclass(frozen=True)
class Column:
    """One column: header, cells (plain text, escaped here), and how it may give way.

    ``keep`` orders the columns for leaving out (lowest first; ``None``: never left out);
    ``wrap`` lets the cells break at spaces (never inside a word); ``prose`` lets them also break
    inside long words (descriptions, and parameter lists whose one long ``key=value`` must not
    cost the whole column), so it takes what width is left.
    """

    header: str
    cells: Sequence[str]
    justify: Any = "left"  # rich's JustifyMethod
    keep: int | None = None
    wrap: bool = False
    prose: bool = False

    @property
    def min_width(self) -> int:
        """Narrowest width that cuts nothing: the longest cell, or its longest word."""
        texts = [self.header, *self.cells]
        if self.prose:
            return min(16, max(len(t) for t in texts))
        if self.wrap:
            return max(len(w) for t in texts for w in (t.split() or [""]))
        return max(len(t) for t in texts)


def print_fitted(title: str, columns: Sequence[Column], console: Console, indent: str = "") -> None:
    """Print a table of ``columns`` that fits ``console.width``, then name the columns left out
    (on a line starting with ``indent``). ``title`` is rich markup; headers and cells plain text.
    """
    cols = list(columns)
    dropped: list[str] = []
    # rich's default box: one border per column plus one, one space of padding on each side.
    while sum(c.min_width for c in cols) + 3 * len(cols) + 1 > console.width:
        optional = [c for c in cols if c.keep is not None]
        if not optional:
            break  # only uncuttable columns left: let the terminal wrap the lines
        least = min(optional, key=lambda c: c.keep or 0)
        cols.remove(least)
        dropped.append(least.header)
    t = Table(title=title, title_justify="left")
    for c in cols:
        # Prose folds inside words; parameter lists wrap between words; names never break.
        how: dict[str, Any] = (
            {"overflow": "fold"} if c.prose else {} if c.wrap else {"no_wrap": True}
        )
        t.add_column(escape(c.header), justify=c.justify, min_width=c.min_width, **how)
    n = len(cols[0].cells) if cols else 0
    for i in range(n):
        t.add_row(*(escape(c.cells[i]) for c in cols))
    console.print(t)
    if dropped:
        console.print(f"{indent}(not shown at this width: {', '.join(dropped)}; see --json)")
