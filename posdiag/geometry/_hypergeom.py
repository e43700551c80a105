"""Half of every position's tokens, drawn for all positions at once (multivariate hypergeometric).

The noise floor's draw (posdiag.uncertainty.bootstrap.noise_floor, from
:data:`VECTORISED_FLOOR_FROM` positions); the geometry's own half-draw is
:func:`posdiag.geometry._thinning.draw_half`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

# From this many positions the noise floor draws all rows at once (same law, another random
# stream): the per-row loop's Python call per row dominates at long contexts.
VECTORISED_FLOOR_FROM = 1024


def _half_draw(
    c: sp.csr_matrix, rows: np.ndarray, totals: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """For every row in ``rows``: a multivariate hypergeometric draw of ``floor(N_i/2)`` of its
    ``N_i`` tokens, as counts aligned with ``c.data`` (0 outside ``rows``).

    Drawn as the chain of conditional hypergeometrics (entry t gets
    ``Hypergeometric(c_t, rest_t - c_t, still needed)``), which is exactly the multivariate law,
    vectorised across rows: one numpy call per entry index instead of one Python call per row.
    """
    lengths = np.diff(c.indptr)[rows]
    order = np.argsort(-lengths, kind="stable")
    srows, slen = rows[order], lengths[order]
    start = c.indptr[srows]
    need = (totals[order] // 2).astype(np.int64)
    rest = totals[order].astype(np.int64)
    out = np.zeros(c.data.size, dtype=np.int64)
    data = c.data.astype(np.int64)
    for t in range(int(slen[0]) if slen.size else 0):
        # Rows sorted by length, descending: those longer than t are a prefix.
        active = int(np.searchsorted(-slen, -t, side="left"))
        idx = start[:active] + t
        good = data[idx]
        left = rest[:active]
        want = need[:active]
        draw = np.zeros(active, dtype=np.int64)
        live = want > 0
        if live.any():
            draw[live] = rng.hypergeometric(good[live], left[live] - good[live], want[live])
        out[idx] = draw
        need[:active] -= draw
        rest[:active] -= good
    return out
