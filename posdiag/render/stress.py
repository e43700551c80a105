"""The stress table: ``posdiag stress`` (and ``build-encoding``) as rich tables and JSON."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._util.userdocs import doc_ref
from ..reports.analysis import CorpusSummary, Spectrum
from ..reports.diagnosis import saving_phrase
from ..reports.export import LowRankEncoding, typed_meta
from ..reports.stress import StressReport
from ._fit import Column, print_fitted
from ._format import (
    ci_text,
    corpus_json,
    effective_ranks,
    fmt,
    jsonable,
    params,
    ranges,
    score_json,
    spectrum_rows,
    summary_rows,
)
from .takeaway import IN_SHORT, takeaway

__all__ = [
    "encoding_json",
    "print_encoding",
    "print_stress",
    "print_summary",
    "spectrum_json",
    "spectrum_line",
    "stress_json",
]


def spectrum_json(sp: Spectrum, by_rank_ci: Any = None) -> dict[str, Any]:
    """A spectrum's fields as JSON, the same keys in every command (``computed`` 0: every
    eigenvalue; k: only the top k, at long contexts); ``by_rank_ci`` (diagnose's rank intervals)
    follows ``stress_by_rank`` when given."""
    out = asdict(sp)
    if by_rank_ci is None:
        return out
    head = {k: out.pop(k) for k in ("eigenvalues", "stress_by_rank")}
    return {**head, "stress_by_rank_ci": by_rank_ci, **out}


def stress_json(report: StressReport) -> dict[str, Any]:
    """The ``--json`` document of ``posdiag stress``."""
    return jsonable(
        {
            "corpus": corpus_json(report.corpus),
            "spectrum": spectrum_json(report.spectrum),
            "encodings": [score_json(e) for e in report.encodings],
            "warnings": report.warnings,
            "uncertainty": asdict(report.uncertainty) if report.uncertainty else None,
        }
    )


def print_summary(c: CorpusSummary, console: Console) -> None:
    t = Table(title="Corpus", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for k, v in summary_rows(c):
        t.add_row(k, escape(v))  # a source such as 'shards/[ab]*.txt' is not rich markup
    console.print(t)


def stress_columns(report: StressReport, *, verbose: bool = False) -> list[Column]:
    """The stress table's columns, most important first in ``keep`` order.

    ``raw`` (unnormalised, e.g. 17023.966 beside stresses in [0, 1]), ``mds-r``'s in-sample
    stress and every encoding's plug-in stress only with ``verbose``; the JSON always has them.
    """
    es = report.encodings
    unc = report.uncertainty
    cols = [
        Column("encoding", [e.label for e in es]),
        Column("parameters", [params(e.params) for e in es], prose=True),
        Column("stress", [fmt(e.stress) for e in es], "right"),
    ]
    if unc and unc.shards:
        cols.append(Column("interval", [ci_text(e.ci_low, e.ci_high) for e in es], "right", 60))
    if verbose:
        cols += [
            Column("raw", [fmt(e.raw, 3) for e in es], "right", 10),
            Column(
                "in-sample",
                [fmt(e.in_sample) if e.name.startswith("mds") else "" for e in es],
                "right",
                15,
            ),
            Column("plug-in", [fmt(e.plain) for e in es], "right", 16),
        ]
    cols += [
        Column("kruskal", [fmt(e.kruskal) for e in es], "right", 20),
        Column("spearman", [fmt(e.spearman, 3) for e in es], "right", 30),
        Column("params", [f"{e.n_params:,}" for e in es], "right", 40),
    ]
    return cols


# A new reader meets these columns without the docs open; say what each is once.
COLUMNS_LEGEND = (
    "kruskal: Kruskal stress-1 of the distances; spearman: rank correlation of the distances "
    "(one value for every encoding whose distance only grows with |i-j|: they order the pairs "
    "alike; n/a where an encoding's distances are all equal, as nope's); params: trained "
    "parameters (0: a fixed formula; mds-r: r x (n_eff + d), the factors A and B of P = A B^T; "
    "every family's count: posdiag encodings)"
)
# The raw column (--verbose, the HTML report): a number far above 1 must not look like an error.
RAW_LEGEND = (
    "raw: ||B_H - B_E||_F / ||B_H||_F with no fit of the encoding's scale, so it follows the "
    "encoding's absolute size and can far exceed 1 (the paper's figures are of this kind); "
    "stress is the same with the best scale"
)
# The spectrum's tail is the in-sample fit of rank r, not the held-out mds-r of the table above.
SPECTRUM_STRESS = "in-sample stress"
SPECTRUM_LEGEND = (
    f"in-sample stress: the eigenvalue tail past rank r ({doc_ref('geometry')}); the mds-r rows of "
    "the table above are scored held-out, so they differ"
)


def print_stress(report: StressReport, console: Console, *, verbose: bool = False) -> None:
    """Corpus summary, stress table (best first), what it says, and the MDS spectrum."""
    print_summary(report.corpus, console)
    print_fitted(
        "Stress (0 = corpus geometry reproduced, 1 = no positional information)",
        stress_columns(report, verbose=verbose),
        console,
    )
    console.print(f"{RAW_LEGEND}; {COLUMNS_LEGEND}" if verbose else COLUMNS_LEGEND)
    if report.spectrum.estimator == "crossfit":
        # The implicit path (long contexts) shows mds-r in-sample: its rows carry no other figure.
        inside = any(
            e.name.startswith("mds-") and e.stress == e.in_sample for e in report.encodings
        )
        mds = "mds-r in-sample (long-context rule)" if inside else "mds-r scored held-out"
        console.print(
            f"geometry: cross-fitted (noise bias removed; {doc_ref('geometry')}); {mds}"
            + ("" if verbose or inside else "; --verbose adds the plug-in figures")
        )
    unc = report.uncertainty
    if unc is not None:
        line = unc.note or f"intervals: {unc.describe()}, centred on the estimate"
        if unc.unstable:
            n_bad = len(unc.unstable)
            line += f"; {n_bad} unstable positions (mostly noise): {ranges(unc.unstable)}"
        console.print(line)
    t = Table(title="MDS spectrum", title_justify="left")
    for col in ("rank", "eigenvalue", SPECTRUM_STRESS):
        t.add_column(col, justify="right")
    for row in spectrum_rows(report.spectrum):
        t.add_row(*row)
    console.print(t)
    console.print(SPECTRUM_LEGEND)
    console.print(spectrum_line(report.spectrum))
    for text in takeaway(report):
        console.print(escape(text), style="bold" if text.startswith(IN_SHORT) else None)


def spectrum_line(sp: Spectrum, sep: str = " at stress <= ") -> str:
    """Effective ranks ("not reached" below the stress floor) and the negative-eigenvalue note."""
    line = f"effective rank ({sp.estimator} geometry): {effective_ranks(sp, sep)}"
    if sp.negative:
        line += f"; {sp.negative}"
    return line


def encoding_json(enc: LowRankEncoding, files: list[str]) -> dict[str, Any]:
    """The ``--json`` document of ``posdiag build-encoding``."""
    return jsonable(
        {
            "files": files,
            "n": enc.n,
            "rank": enc.rank,
            "dim": enc.dim,
            # As in stress's rows: the held-out figure where one exists, and the in-sample one.
            "stress": enc.stress if math.isnan(enc.heldout) else enc.heldout,
            "in_sample": enc.stress,
            # Long contexts: the in-sample stress's standard error (||B_H|| sampled).
            **({} if math.isnan(enc.stress_se) else {"stress_se": enc.stress_se}),
            "n_params": enc.n_params,
            "dense_params": enc.dense_params,
            "saving": 1.0 - enc.n_params / enc.dense_params,
            "meta": typed_meta(enc.meta),
        }
    )


def print_encoding(enc: LowRankEncoding, files: list[str], console: Console) -> None:
    saving = 1.0 - enc.n_params / enc.dense_params
    console.print(
        f"wrote {', '.join(files)}: rank {enc.rank} MDS encoding of {enc.n} positions, "
        f"d={enc.dim}, {mds_stress_text(enc.rank, enc.heldout, enc.stress, enc.stress_se)}; "
        "parameters "
        f"r(n+d) = {enc.n_params:,} vs n*d = {enc.dense_params:,} ({saving_phrase(saving, 1)})"
    )


def mds_stress_text(rank: int, heldout: float, in_sample: float, se: float = float("nan")) -> str:
    """``mds-r``'s stress as the stress table shows it (held-out) beside its in-sample figure,
    each named, as they differ. ``se``: the in-sample figure's standard error at long contexts
    (the long-n rule, no held-out figure)."""
    inside = f"in-sample stress {in_sample:.4f} (the spectrum's tail at rank {rank})"
    if not math.isnan(se):
        inside = (
            f"in-sample stress {in_sample:.4f} +/- {se:.4f} (the spectrum's tail at rank {rank}; "
            "the long-n rule: no held-out split)"
        )
    if math.isnan(heldout):
        return inside
    return f"held-out stress {heldout:.4f} (the stress table's mds-{rank}), {inside}"
