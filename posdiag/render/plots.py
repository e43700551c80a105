"""PNG plots of a corpus geometry, its spectrum, the stress table and a drift (``posdiag[plot]``).

matplotlib is an optional extra: it is imported only inside these functions, with the headless
``Agg`` backend, so the core works without it. Every figure is ``FIGSIZE`` inches at ``DPI``,
i.e. exactly :data:`PIXELS` pixels (no tight bounding box, which would change the size). Colours:
the Okabe-Ito palette for categories and ``viridis`` for continuous scales, both readable with
the common colour-vision deficiencies.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._util.atomic import atomic_outputs, check_output
from ..encodings.families import family
from ..errors import PosdiagError
from ..reports.analysis import EFFECTIVE_RANK_TOLERANCES, CorpusGeometry, CorpusSummary
from ..reports.analysis import spectrum as spectrum_of
from ..reports.stress import StressReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..reports.drift import Drift

__all__ = [
    "DPI",
    "FIGSIZE",
    "PIXELS",
    "CORPUS_PLOTS",
    "DRIFT_PLOTS",
    "PLOT_NAMES",
    "PlotFiles",
    "check_plot_dir",
    "figures",
    "plot_drift_positions",
    "plot_drift_stress",
    "plot_hellinger",
    "plot_spectrum",
    "plot_stress",
    "plot_support",
    "plot_trajectory",
    "png_bytes",
    "write_plots",
]

FIGSIZE = (8.0, 6.0)
DPI = 100
PIXELS = (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))

# Okabe & Ito (2008), "Color Universal Design": distinguishable with every common deficiency.
# Blue, orange, bluish green, reddish purple, sky blue, vermillion, yellow, black.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
CMAP = "viridis"
# One colour per encoding family, in legend order, whatever order the encodings come in.
FAMILY_COLOURS = {
    "absolute": OKABE_ITO[0],
    "relative: rotary": OKABE_ITO[1],
    "relative: attention bias": OKABE_ITO[2],
    "optimal: MDS": OKABE_ITO[3],
    "none": OKABE_ITO[4],
    "other": OKABE_ITO[7],
}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PosdiagError(
            "plots need matplotlib, which is not installed: pip install 'posdiag[plot]'"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _figure() -> Any:
    return _pyplot().figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")


def _title(fig: Any, what: str, c: CorpusSummary) -> None:
    fig.suptitle(
        f"{what}\ncorpus {c.source} · view {c.view} · tokenizer {c.tokenizer} · "
        f"n_eff {c.n_eff} of {c.max_len}",
        fontsize=10,
    )


def plot_hellinger(geometry: CorpusGeometry) -> Figure:
    """Heatmap of the Hellinger distances ``D_H`` between positions ``0..n_eff-1``."""
    fig = _figure()
    ax = fig.add_subplot()
    n = geometry.n_eff
    im = ax.imshow(
        geometry.distances,
        cmap=CMAP,
        vmin=0.0,
        vmax=1.0,
        origin="upper",
        extent=(-0.5, n - 0.5, n - 0.5, -0.5),
        interpolation="nearest",
    )
    ax.set(xlabel="position j", ylabel="position i")
    fig.colorbar(im, ax=ax, label="Hellinger distance d_H(i, j)")
    _title(fig, "Hellinger distance between positional token distributions", geometry.summary)
    return fig


def plot_spectrum(
    geometry: CorpusGeometry,
    tolerances: Sequence[float] = EFFECTIVE_RANK_TOLERANCES,
    *,
    max_rank: int = 40,
) -> Figure:
    """MDS eigenvalues (left) and the stress of the rank-r MDS encoding against r (right).

    At least ``max_rank`` ranks are drawn, and always every effective rank the legend cites.
    """
    lam = np.asarray(geometry.mds.eigenvalues)
    by_rank = geometry.mds.stress_by_rank()
    sp = spectrum_of(geometry, tolerances)
    cited = max((r for r in sp.effective_rank.values() if r is not None), default=0)
    shown = min(max(max_rank, cited), len(by_rank))
    fig = _figure()
    left, right = fig.subplots(1, 2)
    ranks = np.arange(1, len(lam) + 1)[:shown]
    left.bar(ranks, lam[:shown], color=OKABE_ITO[0])
    left.axhline(0.0, color="0.3", linewidth=0.8)
    left.set(xlabel="component k", ylabel="eigenvalue l_k of B_H")
    left.set_title("MDS eigen spectrum", fontsize=10)
    right.plot(ranks, by_rank[:shown], marker="o", markersize=3, color=OKABE_ITO[0])
    for k, (eps, r) in enumerate(sp.effective_rank.items()):
        colour = OKABE_ITO[(k + 1) % len(OKABE_ITO)]
        label = f"stress {eps:g}: " + (f"rank {r}" if r is not None else "not reached")
        right.axhline(eps, color=colour, linestyle="--", linewidth=1, label=label)
        if r is not None and r <= shown:
            right.axvline(r, color=colour, linestyle=":", linewidth=1)
    right.set(ylim=(0.0, 1.02), xlabel="rank r", ylabel="in-sample stress of rank r")
    right.set_title("Stress of the rank-r MDS encoding", fontsize=10)
    right.legend(fontsize=8)
    _title(fig, "MDS spectrum and stress by rank", geometry.summary)
    return fig


def plot_trajectory(geometry: CorpusGeometry, dims: int = 2) -> Figure:
    """Positions in the first ``dims`` (2 or 3) MDS coordinates, coloured by position."""
    if dims not in (2, 3):
        raise PosdiagError(f"'dims' must be one of 2, 3; got {dims!r}")
    n = geometry.n_eff
    if n - 1 < dims:
        raise PosdiagError(f"a {dims}-D trajectory needs n_eff >= {dims + 1}; got n_eff={n}")
    x = geometry.mds.coordinates(dims)
    pos = np.arange(n)
    fig = _figure()
    if dims == 2:
        ax = fig.add_subplot()
        ax.plot(x[:, 0], x[:, 1], color="0.6", linewidth=0.8, zorder=1)
        sc = ax.scatter(x[:, 0], x[:, 1], c=pos, cmap=CMAP, s=18, zorder=2)
        ax.set_aspect("equal", adjustable="datalim")
    else:
        ax = fig.add_subplot(projection="3d")
        ax.plot(x[:, 0], x[:, 1], x[:, 2], color="0.6", linewidth=0.8)
        sc = ax.scatter(x[:, 0], x[:, 1], x[:, 2], c=pos, cmap=CMAP, s=18, depthshade=False)
        ax.set_zlabel("MDS coordinate 3")
    for i in (0, n - 1):
        ax.text(*x[i, :dims], f" {i}", fontsize=8)
    ax.set(xlabel="MDS coordinate 1", ylabel="MDS coordinate 2")
    fig.colorbar(sc, ax=ax, label="position i", shrink=0.8)
    _title(fig, f"MDS trajectory of positions ({dims}-D)", geometry.summary)
    return fig


def plot_stress(report: StressReport) -> Figure:
    """Horizontal bars of each encoding's stress, best on top, with confidence intervals
    where they were computed (``ci_low``/``ci_high`` on the scores)."""
    scores = list(report.encodings)
    names = [s.label for s in scores]
    values = np.array([s.stress for s in scores])
    lo_hi = np.array([(s.ci_low, s.ci_high) for s in scores]).reshape(len(scores), 2)
    has_ci = np.isfinite(lo_hi).all(axis=1)
    kinds = [k if (k := family(s.name)) in FAMILY_COLOURS else "other" for s in scores]
    palette = {k: c for k, c in FAMILY_COLOURS.items() if k in kinds}
    fig = _figure()
    ax = fig.add_subplot()
    y = np.arange(len(scores))
    ax.barh(y, values, color=[palette[k] for k in kinds])
    if has_ci.any():
        err = np.vstack(
            [values[has_ci] - lo_hi[has_ci, 0], lo_hi[has_ci, 1] - values[has_ci]]
        ).clip(0.0)
        ax.errorbar(values[has_ci], y[has_ci], xerr=err, fmt="none", ecolor="black", capsize=3)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("stress (0 = corpus geometry reproduced, 1 = no positional information)")
    ax.set_ylabel("encoding")
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=k) for k, c in palette.items()]
    ax.legend(
        handles=handles, title="family", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    note = (
        "bars: stress; whiskers: confidence interval"
        if has_ci.any()
        else ("no confidence intervals were computed (--shards 0)")
    )
    unc = report.uncertainty
    if unc is not None and unc.unstable:
        # The caution the terminal prints under the table belongs on the chart too.
        note += (
            f"\ncaution: {len(unc.unstable)} of {report.corpus.n_eff} positions are mostly "
            "sampling noise"
        )
    ax.set_title(note, fontsize=9)
    _title(fig, "Stress per encoding", report.corpus)
    return fig


def plot_support(summary: CorpusSummary) -> Figure:
    """Support ``N_i`` of every counted position, ``min_count`` and the analysed prefix.

    In the model view every sequence is padded to every position, so ``N_i`` is flat; the real
    (non-pad) tokens, which ``min_count`` counts there, are drawn too, with their share of the
    sequences on a second axis.
    """
    sup = np.asarray(summary.supports, dtype=np.float64)
    fig = _figure()
    ax = fig.add_subplot()
    pos = np.arange(len(sup))
    ax.step(pos, np.where(sup > 0, sup, np.nan), where="mid", color=OKABE_ITO[0], label="N_i")
    if summary.real_supports:
        real = np.asarray(summary.real_supports, dtype=np.float64)
        ax.step(
            pos,
            np.where(real > 0, real, np.nan),
            where="mid",
            color=OKABE_ITO[2],
            label="real (non-pad) tokens",
        )
        share = ax.twinx()
        share.plot(
            pos,
            100.0 * np.asarray(summary.real_share),
            color=OKABE_ITO[3],
            linestyle=":",
            label="real-token share (right axis)",
        )
        share.set(ylim=(0.0, 102.0), ylabel="real (non-pad) tokens, % of sequences")
        share.legend(fontsize=8, loc="lower left")
    ax.axhline(
        summary.min_count,
        color=OKABE_ITO[5],
        linestyle="--",
        label=f"min_count {summary.min_count} ({summary.support_unit})",
    )
    ax.axvspan(
        -0.5, summary.n_eff - 0.5, color=OKABE_ITO[4], alpha=0.2, label="analysed 0..n_eff-1"
    )
    if np.any(sup > 0):
        ax.set_yscale("log")
    ax.set_xlim(-0.5, len(sup) - 0.5)
    ax.set_xlabel("position i")
    ax.set_ylabel("support N_i (sequences reaching position i)")
    ax.legend(fontsize=8, loc="upper right")
    _title(fig, "Per-position support", summary)
    return fig


def plot_drift_positions(drift: Drift) -> Figure:
    """Per-position Hellinger distance between the two corpora's distributions."""
    d = np.asarray(drift.position_hellinger)
    fig = _figure()
    ax = fig.add_subplot()
    pos = np.arange(len(d))
    ax.plot(pos, d, marker="o", markersize=3, color=OKABE_ITO[0], label="A vs B")
    ax.plot(
        pos,
        drift.position_reference,
        linestyle="--",
        color=OKABE_ITO[1],
        label="expected without drift (random re-splits of A+B)",
    )
    ax.legend(fontsize=8)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("position i")
    ax.set_ylabel("Hellinger distance between A and B at position i")
    return _drift_title(fig, "Per-position drift between corpora", drift)


def plot_drift_stress(drift: Drift) -> Figure:
    """Each encoding's stress on A and on B (common positions), grouped bars."""
    rows = drift.rankings
    fig = _figure()
    ax = fig.add_subplot()
    y = np.arange(len(rows))
    h = 0.4
    ax.barh(y - h / 2, [r.stress_a for r in rows], height=h, color=OKABE_ITO[0], label="A")
    ax.barh(y + h / 2, [r.stress_b for r in rows], height=h, color=OKABE_ITO[1], label="B")
    ax.set_yticks(y, [f"{r.name} ({r.rank_a}→{r.rank_b})" for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("stress on positions 0..n-1 (common n)")
    ax.set_ylabel("encoding (rank in A → rank in B)")
    ax.legend(fontsize=8)
    return _drift_title(fig, "Stress per encoding on A and B", drift)


def _drift_title(fig: Figure, what: str, drift: Drift) -> Figure:
    a, b = drift.a, drift.b
    fig.suptitle(
        f"{what}\nA {a.source} · B {b.source} · view {a.view} · tokenizer {a.tokenizer} · "
        f"common n_eff {drift.n}",
        fontsize=10,
    )
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (``PIXELS`` in size), closing it."""
    plt = _pyplot()
    buf = io.BytesIO()
    try:
        # No metadata: the same input gives the same bytes whatever the matplotlib version.
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    finally:
        plt.close(fig)
    return buf.getvalue()


FigureMaker = Callable[[], "Figure"]


def figures(
    geometry: CorpusGeometry | None = None,
    report: StressReport | None = None,
    drift: Drift | None = None,
) -> dict[str, FigureMaker]:
    """File name -> figure maker for every plot the given objects support (made lazily)."""
    out: dict[str, FigureMaker] = {}
    summary = report.corpus if report is not None else None
    if geometry is not None:
        summary = geometry.summary
        out["hellinger.png"] = partial(plot_hellinger, geometry)
        out["spectrum.png"] = partial(plot_spectrum, geometry)
        if geometry.n_eff >= 3:
            out["trajectory_2d.png"] = partial(plot_trajectory, geometry, 2)
        if geometry.n_eff >= 4:
            out["trajectory_3d.png"] = partial(plot_trajectory, geometry, 3)
    if report is not None:
        out["stress.png"] = partial(plot_stress, report)
    if summary is not None:
        out["support.png"] = partial(plot_support, summary)
    if drift is not None:
        out["drift_hellinger.png"] = partial(plot_drift_positions, drift)
        out["drift_stress.png"] = partial(plot_drift_stress, drift)
    return out


@dataclass(frozen=True)
class PlotFiles:
    """The PNG files written, in order, and their pixel size."""

    directory: str
    files: tuple[str, ...]
    pixels: tuple[int, int] = PIXELS


CORPUS_PLOTS = (
    "hellinger.png",
    "spectrum.png",
    "trajectory_2d.png",
    "trajectory_3d.png",
    "stress.png",
    "support.png",
)
DRIFT_PLOTS = ("drift_hellinger.png", "drift_stress.png")
PLOT_NAMES = CORPUS_PLOTS + DRIFT_PLOTS


def check_plot_dir(directory: str | Path, force: bool, names: Sequence[str] = PLOT_NAMES) -> Path:
    """Refuse, before any work, a plot folder that cannot be written: matplotlib missing, parent
    folder missing, a file in the way, or a plot file that exists without ``force``."""
    _pyplot()
    d = Path(directory)
    parent = d.parent if str(d.parent) else Path(".")
    if not parent.is_dir():
        raise PosdiagError(f"{directory}: folder {str(parent)!r} does not exist")
    if d.exists() and not d.is_dir():
        raise PosdiagError(f"{directory}: is a file; expected a folder for the plots")
    if d.is_dir():
        for name in names:
            check_output(d / name, force)
    return d


def write_plots(
    directory: str | Path,
    geometry: CorpusGeometry | None = None,
    report: StressReport | None = None,
    drift: Drift | None = None,
    *,
    force: bool = False,
) -> PlotFiles:
    """Write every plot the given objects support as PNGs into ``directory``.

    The folder is created if its parent exists. Every target is checked before anything is
    written, and files appear only when all were rendered (no partial set).
    """
    makers = figures(geometry, report, drift)
    if not makers:
        raise PosdiagError("nothing to plot: give a corpus geometry, a stress report or a drift")
    d = check_plot_dir(directory, force, list(makers))
    targets = [d / name for name in makers]
    rendered: Mapping[str, bytes] = {name: png_bytes(make()) for name, make in makers.items()}
    d.mkdir(exist_ok=True)
    with atomic_outputs(targets, force) as temps:
        for tmp, name in zip(temps, makers, strict=True):
            tmp.write_bytes(rendered[name])
    return PlotFiles(str(d), tuple(str(t) for t in targets))
