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

from posdiag.counts.corpus import corpus_counts
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
from posdiag.reports.analysis import corpus_geometry
from posdiag.reports.stress import stress_report

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
    # 120 distinct lines: copies would count once towards min_count (docs/geometry.md 2b).
    corpus.write_text("".join(f"a{i % 7} b{i % 11} c{i % 13}\n" for i in range(120)))
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


def test_hellinger_heatmap_shows_the_brute_force_distances(tmp_path: Path) -> None:
    """Each cell of the rendered heatmap has the viridis colour of d_H(i, j), computed here
    from token frequencies per position (docs/geometry.md section 2), not by posdiag."""
    from collections import Counter

    import matplotlib
    import numpy as np

    from posdiag.render.plots import plot_hellinger

    lines = ["a b c d", "b a c a", "a c c b", "b b a d", "c a b b"] * 20
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines) + "\n")
    geo = corpus_geometry(corpus_counts(str(corpus)), 1, estimator="plugin")
    n = 4
    assert geo.n_eff == n
    freq = [Counter(line.split()[i] for line in lines) for i in range(n)]
    expected = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            bc = sum((freq[i][v] * freq[j][v]) ** 0.5 for v in "abcd") / len(lines)
            expected[i, j] = max(0.0, 1.0 - bc) ** 0.5
    assert expected[0, 1] == pytest.approx(0.0)  # positions 0 and 1 hold the same tokens
    # position 0: a, b 2/5 each, c 1/5; position 3: b, d 2/5 each, a 1/5
    assert expected[0, 3] == pytest.approx((1 - (0.4 * 0.2) ** 0.5 - 0.4) ** 0.5)

    fig = plot_hellinger(geo)
    fig.canvas.draw()
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.images[0].get_array(), expected, atol=1e-12)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("position j", "position i")
    assert fig.get_suptitle().startswith(
        "Hellinger distance between positional token distributions\ncorpus "
    )
    assert fig.get_suptitle().endswith(f"n_eff {n} of {geo.summary.max_len}")
    rgba = np.asarray(fig.canvas.buffer_rgba())
    height = rgba.shape[0]
    box = ax.get_window_extent()
    cmap = matplotlib.colormaps["viridis"]
    for i in range(n):
        for j in range(n):
            x = box.x0 + (j + 0.5) * box.width / n
            y = box.y1 - (i + 0.5) * box.height / n  # row 0 at the top (origin="upper")
            pixel = rgba[int(height - y), int(x), :3].astype(int)
            colour = np.round(np.array(cmap(expected[i, j])[:3]) * 255).astype(int)
            assert np.abs(pixel - colour).max() <= 2, (i, j, pixel, colour)
    assert png_size(png_bytes(fig)) == PIXELS


def test_core_does_not_import_matplotlib() -> None:
    code = (
        "import sys, posdiag, posdiag.cli.app, posdiag.reports.gate, posdiag.reports.drift, "
        "posdiag.render.html, posdiag.render.plots; print('matplotlib' in sys.modules)"
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
