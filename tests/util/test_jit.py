"""posdiag._util.jit: numba imported on demand, and its compilations reported to watchers."""

from __future__ import annotations

import subprocess
import sys

from posdiag._util.jit import load_numba, watch


def test_watchers_see_one_start_and_end_per_compilation_nested_ones_included() -> None:
    numba = load_numba()
    load_numba()  # a second call registers no second listener

    @numba.njit
    def inner(x: int) -> int:
        return x * 3

    @numba.njit
    def outer(x: int) -> int:
        return inner(x) + 1  # compiled inside outer's compilation

    seen: list[bool] = []
    with watch(seen.append):
        assert outer(2) == 7
        assert seen == [True, False]
        assert outer(5) == 16  # compiled already: no event
        assert seen == [True, False]
    assert outer(1.5) == 5.5  # a new signature compiles, but nobody watches any more
    assert seen == [True, False]


def test_two_watchers_both_hear_and_leave_cleanly() -> None:
    numba = load_numba()

    @numba.njit
    def f(x: float) -> float:
        return x + 0.5

    a: list[bool] = []
    b: list[bool] = []
    with watch(a.append), watch(b.append):
        f(1.0)
    assert a == b == [True, False]


def test_importing_the_module_does_not_import_numba() -> None:
    # The bundled corpus never calls a kernel; the progress bar imports posdiag._util.jit anyway.
    code = "import sys, posdiag._util.jit, posdiag.cli.options; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
