"""The bootstrap progress bar: what a terminal user sees during a long report."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

import posdiag._util.jit as jit
import posdiag.cli.options as options


def _terminal(monkeypatch: pytest.MonkeyPatch, is_terminal: bool) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(
        options,
        "Console",
        lambda stderr=True: Console(file=buf, force_terminal=is_terminal, width=100),
    )
    return buf


def test_bar_shows_the_geometry_stage_then_the_replicates(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = _terminal(monkeypatch, True)
    with options.bootstrap_progress(False) as bar:
        assert bar is not None
        time.sleep(0.25)  # rich refreshes ~10 times a second
        first = buf.getvalue()
        bar(3, 10)
        time.sleep(0.25)
    later = buf.getvalue()[len(first) :]
    assert "geometry" in first and "bootstrap" not in first
    assert "bootstrap" in later and "3/10" in later
    assert "0/?" not in first and "-:--:--" not in first  # no total yet: no count, no ETA


def test_bar_is_silent_when_piped_or_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    for is_terminal, quiet in ((False, False), (True, True)):
        buf = _terminal(monkeypatch, is_terminal)
        with options.bootstrap_progress(quiet) as bar:
            assert bar is None
        assert buf.getvalue() == ""


def test_bar_says_compiling_while_numba_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    # posdiag._util.jit calls the watchers when numba starts and ends compiling
    # (tests/util/test_jit.py); here those two calls are made by hand, so the test does not
    # depend on numba's cache.
    buf = _terminal(monkeypatch, True)
    with options.bootstrap_progress(False) as bar:
        assert bar is not None
        jit._tell(True)
        time.sleep(0.25)
        during = buf.getvalue()
        jit._tell(False)
        time.sleep(0.25)
        after = buf.getvalue()[len(during) :]
        bar(1, 4)
        jit._tell(True)
        jit._tell(False)
        time.sleep(0.25)
        last = buf.getvalue()[len(during) + len(after) :]
    assert options.COMPILING in during
    assert "geometry" in after and options.COMPILING not in after
    assert "bootstrap" in last and "1/4" in last and options.COMPILING not in last
    assert not jit._WATCHERS  # the bar stopped listening when it closed


def _rendered(columns: tuple[object, ...], total: float | None, done: float) -> str:
    """What ``columns`` show for one task ``done`` of ``total`` (None: unknown)."""
    from rich.progress import Progress

    prog = Progress(*columns, console=Console(file=io.StringIO(), width=200))  # type: ignore[arg-type]
    task = prog.add_task("geometry", total=total, seqs=7, toks=1_234, rate=631_637.0)
    prog.update(task, completed=done)
    return " ".join(str(c(prog.tasks[0])) for c in columns if callable(c))  # type: ignore[operator]


def test_counting_bar_ends_without_an_eta() -> None:
    cols = options.counting_columns()
    done = _rendered(cols, 100, 100)  # a known total, all of it counted
    assert "631,637 tok/s" in done
    assert "ETA" not in done and "-:--:--" not in done
    unknown = _rendered(cols, None, 40)  # a stream: no total, so no ETA either
    assert "ETA" not in unknown and "-:--:--" not in unknown


def test_eta_and_count_columns_show_only_what_is_known() -> None:
    from rich.progress import Progress

    eta, count = options.EtaColumn(), options.CountColumn()
    prog = Progress(eta, count, console=Console(file=io.StringIO(), width=200))
    task = prog.add_task("bootstrap", total=None)
    assert (str(eta(prog.tasks[0])), str(count(prog.tasks[0]))) == ("", "")  # geometry stage
    prog.update(task, total=10, completed=3)
    assert str(count(prog.tasks[0])) == " 3/10"
    prog.update(task, completed=10)
    assert (str(eta(prog.tasks[0])), str(count(prog.tasks[0]))) == ("", "10/10")
    # A known total with a known speed: the time left, labelled.
    running = SimpleNamespace(total=10, finished=False, time_remaining=75.0, finished_time=None)
    assert str(eta.render(running)) == "ETA 0:01:15"  # type: ignore[arg-type]
