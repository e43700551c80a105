"""The bootstrap progress bar: what a terminal user sees during a long report."""

from __future__ import annotations

import io
import time

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
    assert "0/?" in first  # no total yet: the geometry stage has no count


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
