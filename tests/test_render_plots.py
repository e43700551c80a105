"""Plots: every PNG written, non-empty, of the size set; lazy matplotlib; intervals drawn."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import Result

from posdiag.analysis import corpus_geometry, stress_report
from posdiag.counts import corpus_counts
from posdiag.errors import PosdiagError
from posdiag.render.plots import (
    CORPUS_PLOTS,
    PIXELS,
    check_plot_dir,
    plot_stress,
    plot_trajectory,
    png_bytes,
    write_plots,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which must come first (PNG spec 5.2, 11.2.2)."""
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    w, h = struct.unpack(">II", data[16:24])
    return int(w), int(h)


def test_pixels_are_figsize_times_dpi() -> None:
    from posdiag.render.plots import DPI, FIGSIZE

    assert PIXELS == (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI)) == (800, 600)


def test_plot_command_writes_every_png_of_the_expected_size(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "plots"
    res = cli(["plot", str(synth_corpus), "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(CORPUS_PLOTS)
    for name in CORPUS_PLOTS:
        data = (out / name).read_bytes()
        assert len(data) > 1000
        assert png_size(data) == PIXELS, name
        assert f"  {out / name}" in res.stdout
    # Existing plots are not overwritten without --force, and nothing else is written.
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    res = cli(["plot", str(synth_corpus), "-o", str(out)])
    assert res.exit_code == 2
    assert (
        res.stderr.strip()
        == f"Error: {out / 'hellinger.png'}: already exists; pass --force to overwrite"
    )
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert cli(["plot", str(synth_corpus), "-o", str(out), "-f"]).exit_code == 0


def test_stress_plot_option(cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "p"
    res = cli(["stress", str(synth_corpus), "--plot", str(out), "-e", "rope"])
    assert res.exit_code == 0, res.stderr
    assert "wrote 6 plots" in res.stderr
    assert all(png_size((out / n).read_bytes()) == PIXELS for n in CORPUS_PLOTS)


def test_diagnose_plot_option(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "d"
    args = ["diagnose", str(synth_corpus), "--replicates", "10", "--plot", str(out), "-e", "rope"]
    res = cli(args)
    assert res.exit_code == 0, res.stderr
    assert "wrote 6 plots" in res.stderr
    assert all(png_size((out / n).read_bytes()) == PIXELS for n in CORPUS_PLOTS)
    again = cli(args)
    assert again.exit_code == 2 and "pass --force to overwrite" in again.stderr


def test_plot_dir_whose_parent_is_missing(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "no" / "plots"
    res = cli(["stress", str(synth_corpus), "--plot", str(out)])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"Error: {out}: folder {str(out.parent)!r} does not exist"
    assert res.stdout == ""  # refused before the analysis


def test_small_geometry_skips_the_3d_trajectory(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\nb a c\n" * 60)
    geo = corpus_geometry(corpus_counts(str(corpus)), 50)
    assert geo.n_eff == 3
    written = write_plots(tmp_path / "out", geometry=geo)
    names = [Path(f).name for f in written.files]
    assert "trajectory_2d.png" in names and "trajectory_3d.png" not in names
    with pytest.raises(PosdiagError, match=r"a 3-D trajectory needs n_eff >= 4; got n_eff=3"):
        plot_trajectory(geo, 3)


def test_stress_bars_draw_intervals_only_when_they_exist(synth_corpus: Path) -> None:
    from matplotlib.container import ErrorbarContainer

    report = stress_report(corpus_counts(str(synth_corpus)), ["rope", "sinusoidal", "nope"])
    fig = plot_stress(report)
    ax = fig.axes[0]
    assert not any(isinstance(c, ErrorbarContainer) for c in ax.containers)
    assert ax.get_title() == "no confidence intervals were computed (--shards 0)"
    png_bytes(fig)
    with_ci = [
        replace(
            s,
            ci_low=s.stress - 0.01,
            ci_high=min(1.0, s.stress + 0.02),
        )
        for s in report.encodings[:2]
    ] + list(report.encodings[2:])
    fig = plot_stress(replace(report, encodings=tuple(with_ci)))
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1
    segments = bars[0].lines[2][0].get_segments()
    assert len(segments) == 2  # two encodings have intervals
    for seg, s in zip(segments, with_ci[:2], strict=True):
        assert seg[0][0] == pytest.approx(s.ci_low) and seg[1][0] == pytest.approx(s.ci_high)
    png_bytes(fig)


def test_rendering_is_deterministic(synth_corpus: Path) -> None:
    from posdiag.render.plots import plot_hellinger

    geo = corpus_geometry(corpus_counts(str(synth_corpus)))
    assert png_bytes(plot_hellinger(geo)) == png_bytes(plot_hellinger(geo))


def test_core_does_not_import_matplotlib() -> None:
    code = (
        "import sys, posdiag, posdiag.cli, posdiag.gate, posdiag.drift, posdiag.render.html, "
        "posdiag.render.plots; print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_matplotlib_is_one_clear_error(
    cli: Callable[..., Result], synth_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(PosdiagError, match=r"pip install 'posdiag\[plot\]'"):
        check_plot_dir(tmp_path / "p", False)
    res = cli(["plot", str(synth_corpus), "-o", str(tmp_path / "p")])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "Error: plots need matplotlib, which is not installed: pip install 'posdiag[plot]'"
    )
    assert not (tmp_path / "p").exists()
