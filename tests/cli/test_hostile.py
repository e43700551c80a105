"""Hostile inputs and faults (issue 11): no crash, no bypass, no lost or partial output.

Every case makes its hostile input in the test, runs posdiag (in a real subprocess where the
fault needs one: memory limits, signals, closed streams, file size limits, other users) and
asserts the exit code, exactly one ``Error:`` line, no traceback, and that the output folder
holds exactly what it held before (no partial file, no stray temporary).
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from posdiag._util.atomic import atomic_outputs
from posdiag._util.memory import parse_size
from posdiag.cli.app import app
from posdiag.counts.core import load_counts, save_counts
from posdiag.errors import PosdiagError
from tests.conftest import BUNDLED

ROOT = Path(__file__).resolve().parents[2]
POSDIAG = [sys.executable, "-m", "posdiag.cli.app"]
GiB = 1 << 30


def listing(folder: Path) -> dict[str, bytes | str]:
    """Every name under ``folder`` (hidden ones too) with its bytes (files) or kind."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = "link->" + os.readlink(p)
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = "dir" if p.is_dir() else "special"
    return out


def limit_memory(gib: float) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (int(gib * GiB), int(gib * GiB)))

    return apply


def posdiag(
    *args: str,
    cwd: Path,
    preexec: Callable[[], None] | None = None,
    stdin: Any = subprocess.DEVNULL,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*POSDIAG, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=stdin,
        preexec_fn=preexec,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def refused(r: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> str:
    """Assert one ``Error:`` line (containing ``needles``), no traceback, exit ``code``."""
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "panicked" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, r.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def check_refused(
    folder: Path, *args: str, needles: tuple[str, ...] = (), code: int = 2, **kw: Any
) -> str:
    """Run, assert :func:`refused`, and that ``folder`` is unchanged."""
    before = listing(folder)
    r = posdiag(*args, cwd=folder, **kw)
    line = refused(r, *needles, code=code)
    assert listing(folder) == before
    return line


def check_refused_here(folder: Path, *args: str, needles: tuple[str, ...] = ()) -> str:
    """:func:`check_refused` in this process (CliRunner, in ``folder``), for a fault that needs
    no real process: the same exit code 2, one ``Error:`` line and unchanged folder, without
    starting an interpreter (~0.9 s CPU each)."""
    before = listing(folder)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        r = CliRunner().invoke(app, list(args), prog_name="posdiag")
    finally:
        os.chdir(cwd)
    # Only the exit the CLI chose (an escaped exception is a traceback in a real process).
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    line = refused(
        subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr), *needles
    )
    assert listing(folder) == before
    return line


# ---------------------------------------------------------------------------------------------
# Crafted counts files


META = {
    "documents": 3,
    "max_len": 4,
    "posdiag_version": "0.1.0",
    "sequences": 3,
    "source": "crafted",
    "tokenizer": "ids",
    "tokenizer_fingerprint": "ids",
    "tokens": 6,
    "view": "packed",
    "vocab_size": 5,
}


def members(**over: Any) -> dict[str, np.ndarray]:
    """A valid 4 x 5 counts file's members, with ``over`` replacing some."""
    arrays = {
        "format": np.array("csr"),
        "shape": np.array([4, 5]),
        "data": np.array([3, 2, 1], dtype=np.int64),
        "indices": np.array([0, 1, 4], dtype=np.int32),
        "indptr": np.array([0, 1, 2, 3, 3], dtype=np.int32),
        "posdiag_meta": np.array(json.dumps(META)),
    }
    arrays.update(over)
    return {k: v for k, v in arrays.items() if v is not None}


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    return path


def meta(**over: Any) -> np.ndarray:
    return np.array(json.dumps({**META, **over}))


def test_the_crafted_base_file_is_valid(tmp_path: Path) -> None:
    """The fixture the structural cases edit is itself accepted (so each case tests one rule)."""
    c = load_counts(write_npz(tmp_path / "ok.npz", members()))
    assert c.matrix.shape == (4, 5) and c.matrix.toarray()[2, 4] == 1
    assert c.matrix.sum() == 6


STRUCTURE_CASES = {
    # the heap corruption: shape edited to 16 x 5 while indices reach 3,649
    "indices beyond shape": (
        {"shape": np.array([4, 5]), "indices": np.array([0, 1, 3649], np.int32)},
        "column index 3,649 is outside [0, 5)",
    ),
    "negative index": (
        {"indices": np.array([0, -1, 2], np.int32)},
        "column index -1",
    ),
    "indptr decreasing": (
        {"indptr": np.array([0, 2, 1, 3, 3], np.int32)},
        "'indptr' decreases at row 1",
    ),
    "indptr past nnz": (
        {"indptr": np.array([0, 1, 2, 3, 9], np.int32)},
        "'indptr' must run from 0 to nnz=3",
    ),
    "indptr not starting at 0": (
        {"indptr": np.array([1, 1, 2, 3, 3], np.int32)},
        "'indptr' must run from 0",
    ),
    "indptr for 1e15 rows": (
        {"shape": np.array([10**15, 5])},
        "'indptr' has 5 entries; shape 1,000,000,000,000,000 rows",
    ),
    "zero columns": ({"shape": np.array([4, 0])}, "shape must be positive"),
    "NaN count": ({"data": np.array([1.0, np.nan, 2.0])}, "finite"),
    "fractional count": ({"data": np.array([1.0, 0.5, 2.0])}, "whole numbers"),
    # the LinAlgError
    "negative count": ({"data": np.array([-5, 1, 2])}, "counts must be >= 0; found -5"),
    # the AttributeError
    "meta a JSON list": (
        {"posdiag_meta": np.array("[1, 2]")},
        "'posdiag_meta' must be a JSON object; got list",
    ),
    "meta not JSON": ({"posdiag_meta": np.array("{nope")}, "'posdiag_meta' is not JSON"),
    "meta max_len a string": ({"posdiag_meta": meta(max_len="4")}, "'max_len' must be int"),
    "meta sequences a bool": ({"posdiag_meta": meta(sequences=True)}, "'sequences' must be int"),
    "meta vocab_size inconsistent": (
        {"posdiag_meta": meta(vocab_size=7)},
        "metadata vocab_size=7 but the matrix has 5 columns",
    ),
    "meta max_len inconsistent": (
        {"posdiag_meta": meta(max_len=512)},
        "metadata max_len=512 but the matrix has 4 rows",
    ),
    "format csc": ({"format": np.array("csc")}, "format must be 'csr'"),
    "missing indices": ({"indices": None}, "no 'indices' member"),
    "data and indices differ": (
        {"data": np.array([1, 2], dtype=np.int64)},
        "'data' has 2 entries but 'indices' 3",
    ),
    "vocab of the wrong length": (
        {"vocab": np.array(["a", "b"])},
        "'vocab' lists 2 tokens for 5 columns",
    ),
    "shape of 3 numbers": ({"shape": np.array([4, 5, 1])}, "'shape' must hold 2 numbers"),
}


@pytest.mark.parametrize("case", sorted(STRUCTURE_CASES))
def test_crafted_counts_structure_is_refused_before_any_computation(
    case: str, tmp_path: Path
) -> None:
    over, needle = STRUCTURE_CASES[case]
    write_npz(tmp_path / "bad.npz", members(**over))
    check_refused_here(
        tmp_path, "stress", "bad.npz", "--min-count", "1", needles=("bad.npz", needle)
    )


def test_pickled_member_is_refused_without_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "pickle.npz"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in members().items():
            buf = io.BytesIO()
            arr = np.array([{"boom": 1}], dtype=object) if k == "data" else v
            np.lib.format.write_array(buf, arr, allow_pickle=True)
            z.writestr(k + ".npy", buf.getvalue())
    check_refused_here(tmp_path, "stress", "pickle.npz", needles=("holds Python objects",))


def test_not_a_zip_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really")
    check_refused_here(tmp_path, "stress", "junk.npz", needles=("junk.npz", "not a zip archive"))


def _zip_with_data(path: Path, header: dict[str, Any], body: Callable[[Any], None]) -> None:
    """A counts archive whose ``data`` member has ``header`` and is written by ``body``."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for k, v in members().items():
            if k != "data":
                buf = io.BytesIO()
                np.lib.format.write_array(buf, v)
                z.writestr(k + ".npy", buf.getvalue())
        with z.open("data.npy", "w", force_zip64=True) as fh:
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(buf, header)
            fh.write(buf.getvalue())
            body(fh)


def test_member_header_declaring_5e9_int64_is_refused_under_a_memory_limit(
    tmp_path: Path,
) -> None:
    """1 KB file, header claims 40 GB: refused from the header (was a MemoryError traceback)."""
    header = {"descr": "<i8", "fortran_order": False, "shape": (5_000_000_000,)}
    _zip_with_data(tmp_path / "hdr.npz", header, lambda fh: fh.write(b"\0" * 64))
    assert (tmp_path / "hdr.npz").stat().st_size < 2000
    check_refused(
        tmp_path,
        "stress",
        "hdr.npz",
        needles=("declares shape (5000000000,)", "holds 64 bytes"),
        preexec=limit_memory(3),
    )


def test_deflate_bomb_is_refused_before_decompressing(tmp_path: Path) -> None:
    """A consistent archive of 200 MB of counts in ~0.2 MB: refused by the budget, not inflated."""
    n = 25_000_000
    rows = np.zeros(5, np.int64)
    rows[1:] = n
    zeros = b"\0" * (1 << 22)

    def body(fh: Any) -> None:
        for _ in range(n * 8 // len(zeros)):
            fh.write(zeros)
        fh.write(b"\0" * (n * 8 % len(zeros)))

    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for k, v in members(indptr=rows).items():
            if k in ("data", "indices"):
                continue
            buf = io.BytesIO()
            np.lib.format.write_array(buf, v)
            z.writestr(k + ".npy", buf.getvalue())
        for k in ("data", "indices"):
            with z.open(k + ".npy", "w", force_zip64=True) as fh:
                buf = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    buf, {"descr": "<i8", "fortran_order": False, "shape": (n,)}
                )
                fh.write(buf.getvalue())
                body(fh)
    assert path.stat().st_size < 2_000_000
    start = time.monotonic()
    line = check_refused(
        tmp_path,
        "--max-memory",
        "200M",
        "stress",
        "bomb.npz",
        needles=("bomb.npz: reading 400,000,", "needs about 1.1 GiB", "--max-memory"),
    )
    assert "200.0 MiB allowed by --max-memory" in line
    assert time.monotonic() - start < 30  # nothing was inflated (inflating alone takes longer)


def test_npy_token_ids_header_claiming_1e12_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)}
    )
    (tmp_path / "ids.npy").write_bytes(buf.getvalue() + b"\0" * 800)
    check_refused(
        tmp_path,
        "stress",
        "ids.npy",
        "--vocab-size",
        "10",
        needles=("ids.npy", "not a valid .npy file"),
        preexec=limit_memory(3),
    )


def _tokenizer(path: Path, big: int) -> Path:
    doc = {
        "version": "1.0",
        "model": {"type": "WordLevel", "vocab": {"a": 0, "b": big}, "unk_token": "a"},
        "pre_tokenizer": {"type": "Whitespace"},
    }
    path.write_text(json.dumps(doc))
    return path


def test_tokenizer_json_with_id_4294967294_is_refused(tmp_path: Path) -> None:
    """281 bytes that cost 16.9 GB and a Rust abort before."""
    _tokenizer(tmp_path / "tok.json", 4294967294)
    check_refused(
        tmp_path,
        "stress",
        str(BUNDLED),
        "-t",
        "tok.json",
        needles=("tok.json: token id 4,294,967,294",),
        preexec=limit_memory(3),
    )


def test_tokenizer_json_with_an_id_too_large_for_the_budget_is_refused(tmp_path: Path) -> None:
    _tokenizer(tmp_path / "tok.json", 200_000_000)
    check_refused(
        tmp_path,
        "--max-memory",
        "1G",
        "stress",
        str(BUNDLED),
        "-t",
        "tok.json",
        needles=("a vocabulary of ids up to 200,000,000 needs about 18.6 GiB",),
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--replicates", "1000000000"], "1,000,000,000 bootstrap replicates (--replicates)"),
        (["-e", "sinusoidal:d=1000000000"], "encoding 'sinusoidal' on 16 positions (d=1,"),
        (["-e", "alibi:heads=100000000"], "encoding 'alibi' on 16 positions (heads=100,000,000)"),
    ],
)
def test_huge_requests_are_refused_with_the_estimate_under_a_memory_limit(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    line = check_refused(
        tmp_path,
        "stress",
        str(BUNDLED),
        "-n",
        "16",
        "--min-count",
        "50",
        *args,
        needles=(needle, "needs about", "left under the address-space limit"),
        preexec=limit_memory(3),
    )
    assert "GiB" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["stress", "ids.bin", "--vocab-size", "1000000000000", "-n", "16"],
            "a vocabulary of 1,000,000,000,000 ids (--vocab-size) needs about 21.8 TiB",
        ),
        (
            ["stress", str(BUNDLED), "-n", "16", "--shards", "1000000000"],
            "1,000,000,000 shards of 16 positions (--shards, --max-len) needs about 4.0 TiB",
        ),
        (
            ["build-encoding", str(BUNDLED), "-n", "16", "-o", "x.npy", "--dim", "1000000000"],
            "an encoding of dimension 1,000,000,000 (--dim) needs about",
        ),
    ],
)
def test_more_sizes_from_options_are_estimated_first(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    """Were: a C++ std::bad_alloc, a hang creating 1e9 shard counters, a 22 GiB MemoryError."""
    np.arange(1000, dtype=np.uint16).tofile(tmp_path / "ids.bin")
    check_refused(tmp_path, *args, needles=(needle,), preexec=limit_memory(3), timeout=60)


def test_synth_100m_positions_is_refused_before_writing(tmp_path: Path) -> None:
    check_refused(
        tmp_path,
        "synth",
        "-o",
        "s.txt",
        "--positions",
        "100000000",
        needles=("synth: 100,000,000 positions x 200 words needs about 596.0 GiB",),
        preexec=limit_memory(3),
    )


def test_max_len_2_pow_63_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    check_refused_here(
        tmp_path,
        "stress",
        str(BUNDLED),
        "-n",
        "9223372036854775807",
        needles=("'max_len' must be an int in [1, 2147483647]; got 9223372036854775807",),
    )


def test_max_len_within_int32_but_beyond_memory_is_refused(tmp_path: Path) -> None:
    from posdiag._util.memory import set_max_memory
    from posdiag.counts.core import CountAccumulator

    set_max_memory("1G")
    try:
        with pytest.raises(PosdiagError, match=r"counting 2,000,000,000 positions \(--max-len\)"):
            CountAccumulator(2_000_000_000)
    finally:
        set_max_memory(None)
    # The commands keep 20 shard counters by default: their row pointers are refused first.
    for command in (["stress"], ["count", "-o", "c.npz"]):
        check_refused(
            tmp_path,
            "--max-memory",
            "1G",
            *command,
            str(BUNDLED),
            "-n",
            "2000000000",
            needles=("20 shards of 2,000,000,000 positions (--shards, --max-len) needs about 596",),
        )


def test_a_20_mb_line_counts_within_a_1_5_gib_address_space(tmp_path: Path) -> None:
    """Was 2.1 GB RSS (the pre-tokenizer's offsets of 3 M words); now pieces of 1 MB."""
    words = " ".join(f"w{i % 1000}" for i in range(4_200_000))
    assert len(words) > 20_000_000
    (tmp_path / "line.txt").write_text(words + "\n")
    r = posdiag(
        "count", "line.txt", "-n", "16", "-o", "c.npz", cwd=tmp_path, preexec=limit_memory(1.5)
    )
    assert r.returncode == 0, r.stderr
    c = load_counts(tmp_path / "c.npz")
    assert c.meta["vocab_size"] == 1003 and c.meta["tokens"] == 16  # all words seen, 16 counted
    assert [c.vocab[i] for i in c.matrix.indices[:3]] == ["w0", "w1", "w2"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "head"), [("zeros.txt.gz", b""), ("zeros.json.gz", b'[{"text": "')]
)
def test_gzip_bomb_without_newline_is_refused_while_reading(
    name: str, head: bytes, tmp_path: Path
) -> None:
    """64 MiB in 1 MB of gzip, one line: read in bounded pieces, refused past the budget."""
    import gzip

    with gzip.open(tmp_path / name, "wb") as fh:
        fh.write(head)
        chunk = b"a" * (1 << 24)
        for _ in range(4):
            fh.write(chunk)
    check_refused(
        tmp_path,
        "--max-memory",
        "128M",
        "stress",
        name,
        needles=(f"{name}: ", "of more than 8,388,608 bytes needs about 256.0 MiB"),
    )


def test_max_memory_option_lowers_the_budget_and_bad_values_are_errors(tmp_path: Path) -> None:
    check_refused(
        tmp_path,
        "--max-memory",
        "1K",
        "stress",
        str(BUNDLED),
        "-n",
        "16",
        needles=("needs about", "1.0 KiB allowed by --max-memory"),
    )
    check_refused(
        tmp_path,
        "--max-memory",
        "lots",
        "stress",
        str(BUNDLED),
        needles=("'max-memory' must be a positive size such as 512M, 2G or 1000000; got 'lots'",),
    )
    assert parse_size("1.5G") == 3 * (1 << 29) and parse_size("512MiB") == 512 << 20


# ---------------------------------------------------------------------------------------------
# No traceback ever


def test_closed_stdin_is_an_error(tmp_path: Path) -> None:
    before = listing(tmp_path)
    r = subprocess.run(
        " ".join([*POSDIAG, "stress", "-"]) + " <&-",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    refused(r, "-: standard input is closed")
    assert listing(tmp_path) == before


def test_json_to_a_closed_stdout_is_an_error_not_exit_0(tmp_path: Path) -> None:
    r = subprocess.run(
        " ".join([*POSDIAG, "stress", str(BUNDLED), "-n", "16", "--json"]) + " >&-",
        shell=True,
        cwd=tmp_path,
        capture_output=False,
        stderr=subprocess.PIPE,
        text=True,
    )
    refused(r, "standard output is closed")


def test_stdout_on_a_full_device_is_an_error(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [*POSDIAG, "stress", str(BUNDLED), "-n", "16", "--json"],
            cwd=tmp_path,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    refused(r, "standard output: cannot complete: no space left on the device")


def test_unwritable_folder_is_an_error_naming_the_output(tmp_path: Path) -> None:
    """Without the capability to ignore permissions (root has it): was a PermissionError
    traceback with exit 0 reported by the shell pipeline."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop CAP_DAC_OVERRIDE")
    (tmp_path / "ro").mkdir(mode=0o555)
    before = listing(tmp_path)
    r = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-dac_override,-dac_read_search",
            *POSDIAG,
            "count",
            str(BUNDLED),
            "-n",
            "16",
            "-o",
            "ro/c.npz",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    refused(r, "ro/c.npz: cannot write (permission denied)")
    assert listing(tmp_path) == before


def test_file_size_limit_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    check_refused(
        tmp_path,
        "count",
        str(BUNDLED),
        "-n",
        "16",
        "-o",
        "c.npz",
        needles=("c.npz: cannot write (file too large",),
        preexec=small_files,
    )


@pytest.fixture
def tiny_fs() -> Any:
    """A 64 KiB tmpfs (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    import tempfile

    mnt = Path(tempfile.mkdtemp(prefix="posdiag-full-"))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=False)
    if r.returncode != 0:
        mnt.rmdir()
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        mnt.rmdir()


def test_full_disk_is_an_error_and_leaves_nothing(tiny_fs: Path) -> None:
    (tiny_fs / "keep.txt").write_text("already here\n")
    check_refused(
        tiny_fs,
        "count",
        str(BUNDLED),
        "-n",
        "64",
        "-o",
        "c.npz",
        needles=("c.npz: cannot write (no space left on the device)",),
    )


def _patched(tmp_path: Path, code: str, *args: str) -> subprocess.Popen[str]:
    """posdiag in a subprocess after ``code`` ran (to patch a library function)."""
    argv = ["posdiag", *args]
    script = f"import sys\n{code}\nfrom posdiag.cli.app import main\nsys.argv = {argv!r}\nmain()\n"
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("raise_", "needle"),
    [
        ("MemoryError()", "out of memory"),
        ("__import__('numpy').linalg.LinAlgError('SVD did not converge')", "numerical failure"),
        ("AttributeError('boom')", "unexpected internal error (AttributeError: boom)"),
        ("PermissionError(13, 'Permission denied', 'x.bin')", "x.bin: cannot complete"),
    ],
)
def test_unexpected_exceptions_become_one_error_line(
    raise_: str, needle: str, tmp_path: Path
) -> None:
    code = (
        "import posdiag.reports.analysis as a\n"
        f"def boom(*args, **kw):\n    raise {raise_}\n"
        "a.estimate_hellinger = boom\n"
    )
    p = _patched(tmp_path, code, "stress", str(BUNDLED), "-n", "16", "--min-count", "50")
    out, err = p.communicate(timeout=120)
    refused(subprocess.CompletedProcess(p.args, p.returncode, out, err), needle)
    assert out == ""


# ---------------------------------------------------------------------------------------------
# Exclusive create, --force and what may be replaced


def test_concurrent_writers_exactly_one_wins(tmp_path: Path) -> None:
    """Writer A is held just before it places its file; writer B runs to completion; then A
    resumes: A must fail (exit 2) and B's file must stay. Before: both exited 0."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    code = (
        "import os, time, posdiag._util.atomic as io\n"
        "orig = io._place_exclusive\n"
        "def slow(tmp, target):\n"
        f"    open({str(ready)!r}, 'w').close()\n"
        f"    while not os.path.exists({str(go)!r}):\n"
        "        time.sleep(0.02)\n"
        "    orig(tmp, target)\n"
        "io._place_exclusive = slow\n"
    )
    common = ["-n", "16", "--min-count", "50", "--rank", "2", "--dim", "8", "-o", "e.safetensors"]
    a = _patched(tmp_path, code, "build-encoding", str(BUNDLED), *common, "--seed", "1")
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert a.poll() is None and time.monotonic() < deadline, a.communicate()
        time.sleep(0.05)
    b = posdiag("build-encoding", str(BUNDLED), *common, "--seed", "2", cwd=tmp_path)
    assert b.returncode == 0, b.stderr
    won = (tmp_path / "e.safetensors").read_bytes()
    go.touch()
    out, err = a.communicate(timeout=120)
    refused(
        subprocess.CompletedProcess(a.args, a.returncode, out, err),
        "e.safetensors: already exists (created by another process meanwhile)",
    )
    assert (tmp_path / "e.safetensors").read_bytes() == won
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.safetensors", "go", "ready"]


def test_library_exclusive_create_refuses_a_name_taken_meanwhile(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    with (
        pytest.raises(PosdiagError, match="already exists"),
        atomic_outputs([target], force=False) as (tmp,),
    ):
        tmp.write_text("mine")
        target.write_text("theirs")  # another writer wins the name
    assert target.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_force_still_replaces_a_regular_file_atomically(tmp_path: Path) -> None:
    c = load_counts(write_npz(tmp_path / "in.npz", members()))
    (tmp_path / "out.npz").write_bytes(b"old")
    save_counts(c, tmp_path / "out.npz", force=True)
    assert load_counts(tmp_path / "out.npz").matrix.sum() == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "out.npz"]


def test_force_refuses_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.npz")
    check_refused(
        tmp_path,
        "count",
        str(BUNDLED),
        "-n",
        "16",
        "-o",
        "pipe.npz",
        "--force",
        needles=("pipe.npz: is not a regular file", "refusing to replace it"),
    )


def test_force_refuses_a_device_node(tmp_path: Path) -> None:
    """As root, ``-o dev --force`` replaced the node (the issue's /dev/null)."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(tmp_path / "null.npz", 0o20666, os.makedev(1, 3))
    check_refused(
        tmp_path,
        "count",
        str(BUNDLED),
        "-n",
        "16",
        "-o",
        "null.npz",
        "--force",
        needles=("null.npz: is not a regular file",),
    )
    assert (tmp_path / "null.npz").is_char_device()


def test_force_refuses_a_link_to_a_device_node(tmp_path: Path) -> None:
    os.symlink("/dev/null", tmp_path / "link.npz")
    check_refused(
        tmp_path,
        "count",
        str(BUNDLED),
        "-n",
        "16",
        "-o",
        "link.npz",
        "--force",
        needles=("link.npz: is not a regular file",),
    )


def test_a_dangling_symlink_counts_as_existing(tmp_path: Path) -> None:
    os.symlink("nowhere.npz", tmp_path / "dangling.npz")
    check_refused(
        tmp_path,
        "count",
        str(BUNDLED),
        "-n",
        "16",
        "-o",
        "dangling.npz",
        needles=("dangling.npz: already exists; pass --force to overwrite",),
    )
    assert not (tmp_path / "nowhere.npz").exists()


# ---------------------------------------------------------------------------------------------
# Signals and multi-file outputs


def _wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)


def test_sigterm_while_build_encoding_writes_leaves_no_temporary(tmp_path: Path) -> None:
    flag = tmp_path.parent / f"{tmp_path.name}.writing"
    code = (
        "import time, posdiag._util.atomic as io\n"
        "def hold(tmp, target):\n"
        f"    open({str(flag)!r}, 'w').close()\n"
        "    time.sleep(60)\n"
        "io._place_exclusive = hold\n"
    )
    before = listing(tmp_path)
    p = _patched(
        tmp_path,
        code,
        "build-encoding",
        str(BUNDLED),
        "-n",
        "16",
        "--min-count",
        "50",
        "--rank",
        "2",
        "--dim",
        "8",
        "-o",
        "e.npy",
    )
    _wait_for(flag, p)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    refused(
        subprocess.CompletedProcess(p.args, p.returncode, out, err),
        "interrupted by SIGTERM",
        code=128 + signal.SIGTERM,
    )
    assert listing(tmp_path) == before  # neither e.npy, e.json nor a temporary folder


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_signal_to_count_stops_the_forked_workers(sig: int, tmp_path: Path) -> None:
    """``count`` of a token id file on the forked-worker path; workers report their pid."""
    ids = np.random.default_rng(0).integers(0, 100, size=1 << 24, dtype=np.uint16)
    ids.tofile(tmp_path / "ids.bin")
    pids = tmp_path.parent / f"{tmp_path.name}.pids"
    pids.mkdir()
    code = (
        "import os, time, posdiag.counts.ids as c\n"
        "orig = c._die_with_parent\n"
        "def held(parent):\n"
        "    orig(parent)\n"
        f"    open(os.path.join({str(pids)!r}, str(os.getpid())), 'w').close()\n"
        "    time.sleep(120)\n"
        "c._die_with_parent = held\n"
    )
    before = listing(tmp_path)
    p = _patched(
        tmp_path, code, "count", "ids.bin", "--vocab-size", "100", "-n", "8", "-o", "c.npz"
    )
    deadline = time.monotonic() + 120
    while len(list(pids.iterdir())) < 2:
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    workers = [int(f.name) for f in pids.iterdir()]
    assert all(_alive(w) for w in workers)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    if sig == signal.SIGTERM:
        refused(
            subprocess.CompletedProcess(p.args, p.returncode, out, err),
            "interrupted by SIGTERM",
            code=143,
        )
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)
    assert listing(tmp_path) == before


def _interrupt_on_place(k: int, sig: int) -> str:
    """Code that sends ``sig`` to the process while it places its ``k``-th output file."""
    return (
        "import os, posdiag._util.atomic as io\n"
        "calls = []\n"
        "orig_x, orig_r = io._place_exclusive, io.os.replace\n"
        "def place(tmp, target):\n"
        "    calls.append(target)\n"
        f"    if len(calls) == {k}:\n"
        f"        os.kill(os.getpid(), {int(sig)})\n"
        "    orig_x(tmp, target)\n"
        "io._place_exclusive = place\n"
    )


def test_sigint_while_plot_places_its_files_leaves_none(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "plots").mkdir()
    before = listing(tmp_path)
    p = _patched(
        tmp_path,
        _interrupt_on_place(3, signal.SIGINT),
        "plot",
        str(BUNDLED),
        "-n",
        "16",
        "--min-count",
        "50",
        "-o",
        "plots",
    )
    out, err = p.communicate(timeout=180)
    refused(
        subprocess.CompletedProcess(p.args, p.returncode, out, err),
        "interrupted by SIGINT",
        code=130,
    )
    assert listing(tmp_path) == before  # not 2 of 6 PNGs


def test_sigterm_while_plot_force_replaces_restores_the_old_files(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    r = posdiag("plot", str(BUNDLED), "-n", "16", "--min-count", "50", "-o", "plots", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for png in (tmp_path / "plots").iterdir():
        png.write_bytes(b"old " + png.name.encode())
    before = listing(tmp_path)
    code = (
        "import os, posdiag._util.atomic as io\n"
        "calls = []\n"
        "real = io.os.replace\n"
        "class OS:\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(os, name)\n"
        "    @staticmethod\n"
        "    def replace(a, b):\n"
        "        calls.append(b)\n"
        "        if len(calls) == 4:\n"
        f"            os.kill(os.getpid(), {int(signal.SIGTERM)})\n"
        "        real(a, b)\n"
        "io.os = OS()\n"
    )
    p = _patched(
        tmp_path,
        code,
        "plot",
        str(BUNDLED),
        "-n",
        "16",
        "--min-count",
        "50",
        "-o",
        "plots",
        "--force",
    )
    out, err = p.communicate(timeout=180)
    refused(subprocess.CompletedProcess(p.args, p.returncode, out, err), "SIGTERM", code=143)
    assert listing(tmp_path) == before  # the 3 replaced files are the old ones again


# ---------------------------------------------------------------------------------------------
# CSV / TSV, BOM, safetensors


def _documents(tmp_path: Path, name: str, *extra: str) -> int:
    r = posdiag("count", name, "-n", "4", "-o", f"{name}.npz", "--json", *extra, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return int(json.loads(r.stdout)["documents"])


def test_tsv_fields_starting_with_a_quote_are_text(tmp_path: Path) -> None:
    """Four rows are four documents (they merged into 2 before), as pandas QUOTE_NONE reads them."""
    (tmp_path / "q.tsv").write_text('text\tlabel\n"a b\t1\nc d\t0\ne f\t1\ng h"\t0\n')
    assert _documents(tmp_path, "q.tsv") == 4
    c = load_counts(tmp_path / "q.tsv.npz")
    assert c.vocab is not None and '"' in c.vocab  # the quote is a token of the text


def test_csv_unterminated_quote_is_an_error_naming_the_line(tmp_path: Path) -> None:
    """3 rows merged into 1 document with exit 0 before."""
    (tmp_path / "q.csv").write_text('text,label\nok row,1\n"a b,1\nc d,0\ne f,1\n')
    check_refused(
        tmp_path,
        "count",
        "q.csv",
        "-n",
        "4",
        "-o",
        "q.npz",
        needles=("q.csv: line 3 is not valid CSV (a quoted field opened here is never closed)",),
    )


def test_csv_text_after_a_closing_quote_is_an_error_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "q.csv").write_text('text,label\n"a" b,1\n')
    check_refused(tmp_path, "count", "q.csv", "-n", "4", "-o", "q.npz", needles=("q.csv: line 2",))


def test_csv_quoted_newlines_are_still_one_field(tmp_path: Path) -> None:
    (tmp_path / "q.csv").write_text('text,label\n"a\nb",1\nc,0\n')
    assert _documents(tmp_path, "q.csv") == 2


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    ("suffix", "body"),
    [
        (".txt", BUNDLED.read_bytes()[:30000]),
        (".csv", b"text,label\nhello world,1\nfoo bar baz,0\n"),
        (".jsonl", b'{"text": "hello world"}\n{"text": "foo bar"}\n'),
        (".json", b'[{"text": "hello world"}, {"text": "foo bar"}]'),
    ],
)
def test_utf8_bom_gives_the_same_counts(suffix: str, body: bytes, tmp_path: Path) -> None:
    (tmp_path / f"plain{suffix}").write_bytes(body)
    (tmp_path / f"bom{suffix}").write_bytes(BOM + body)
    got = []
    for name in (f"plain{suffix}", f"bom{suffix}"):
        r = posdiag("count", name, "-n", "16", "-o", f"{name}.npz", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got.append(load_counts(tmp_path / f"{name}.npz"))
    plain, bom = got
    assert plain.vocab == bom.vocab and "\ufeff" not in "".join(bom.vocab or ())
    assert (plain.matrix != bom.matrix).nnz == 0
    assert plain.meta["vocab_size"] == bom.meta["vocab_size"]


def _safetensors(path: Path, header: Any, data: bytes = b"", length: int | None = None) -> None:
    raw = json.dumps(header).encode()
    size = len(raw) if length is None else length
    path.write_bytes(struct.pack("<Q", size) + raw + data)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: _safetensors(p, {}, length=2**62), "header length 4,611,686,018,427,387,904"),
        (lambda p: _safetensors(p, [1, 2]), "the header must be a JSON object"),
        (
            lambda p: _safetensors(
                p, {"encoding": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]}}, b"\0"
            ),
            "file not fully covered",
        ),
        (lambda p: p.write_bytes(b"\0" * 4), "file shorter than the 8-byte header length"),
    ],
)
def test_safetensors_errors_give_the_reason(
    make: Callable[[Path], None], needle: str, tmp_path: Path
) -> None:
    make(tmp_path / "bad.safetensors")
    line = check_refused(tmp_path, "inspect", "bad.safetensors", needles=(needle,))
    assert "()" not in line


def test_valid_counts_with_duplicate_entries_load_as_their_sum(tmp_path: Path) -> None:
    """Duplicates are valid CSR (scipy sums them); validation must not refuse real files."""
    arrays = members(
        data=np.array([1, 2, 1], np.int64),
        indices=np.array([0, 0, 4], np.int32),
        indptr=np.array([0, 2, 2, 3, 3], np.int32),
    )
    c = load_counts(write_npz(tmp_path / "dup.npz", arrays))
    expected = sp.csr_matrix(([3, 1], ([0, 2], [0, 4])), shape=(4, 5)).toarray()
    assert (c.matrix.toarray() == expected).all()


# ---------------------------------------------------------------------------------------------
# Issue 34 item 8: a signal at any point of writing an output; a signal while shutting down


def _signal_at(point: str, when: str) -> str:
    """Patch code: SIGTERM to this process ``when`` ("before"/"after") the first call of
    ``point`` on posdiag's temporary folder: the windows between one file operation and the
    bookkeeping that undoes it, which a real kill hits by chance."""
    call = {
        "mkdir": ("pathlib.Path", "mkdir", "self"),
        "write_bytes": ("pathlib.Path", "write_bytes", "self"),
        "link": ("os", "link", "a[0]"),
        "rmtree": ("shutil", "rmtree", "a[0]"),
    }[point]
    owner, name, path = call
    first = "self, *a, **k" if path == "self" else "*a, **k"
    return (
        "import os, pathlib, shutil, signal\n"
        f"real = {owner}.{name}\n"
        "armed = [True]\n"
        f"def hit({first}):\n"
        f"    mine = '.posdiag-' in str({path}) and armed[0]\n"
        "    if mine and " + repr(when) + " == 'before':\n"
        "        armed[0] = False\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        f"    out = real({first})\n"
        "    if mine and armed[0]:\n"
        "        armed[0] = False\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return out\n"
        f"{owner}.{name} = hit\n"
    )


@pytest.mark.parametrize(
    ("point", "when", "whole"),
    [
        ("mkdir", "after", False),  # the folder exists, not yet registered for removal
        ("write_bytes", "after", False),  # the temporary is complete, not yet placed
        ("link", "after", False),  # the target exists, not yet recorded: undone (all or none)
        ("rmtree", "before", True),  # the output is placed, its temporaries not yet removed
    ],
)
def test_sigterm_at_every_step_of_writing_leaves_no_temporary_and_says_so(
    point: str, when: str, whole: bool, tmp_path: Path
) -> None:
    """Before: a SIGTERM between a file operation and its bookkeeping left a
    .posdiag-PID-XXXX.tmp folder (or an output) while the message said "no partial output was
    left". Now each step completes first, and the message names what was written whole."""
    args = ["build-encoding", str(BUNDLED), "-n", "16", "--min-count", "50", "--rank", "2"]
    p = _patched(tmp_path, _signal_at(point, when), *args, "-d", "8", "-o", "e.safetensors")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, err
    left = sorted(q.name for q in tmp_path.iterdir())
    if whole:
        assert err == (
            "Error: interrupted by SIGTERM; e.safetensors was written whole before it; nothing "
            "partial was left\n"
        )
        assert left == ["e.safetensors"]
        from safetensors.numpy import load_file

        assert load_file(str(tmp_path / "e.safetensors"))["encoding"].shape == (16, 8)
    else:
        assert err == "Error: interrupted by SIGTERM; nothing was written\n"
        assert left == []
    assert out == ""


def test_sigint_while_shutting_down_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """Before: a SIGINT during the interpreter's exit (matplotlib's atexit callbacks after
    ``plot``) printed 'Exception ignored in atexit callback ... KeyboardInterrupt' and exited 0.
    The callback below is the first registered, so it runs last, after matplotlib's."""
    code = "import atexit, os, signal\natexit.register(os.kill, os.getpid(), signal.SIGINT)\n"
    args = ["plot", str(BUNDLED), "-n", "16", "--min-count", "50", "--shards", "0", "-o", "p"]
    p = _patched(tmp_path, code, *args)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130
    assert err.endswith(
        "\nError: interrupted by SIGINT while exiting, after the command had finished\n"
    )
    assert "Exception ignored" not in err and "Traceback" not in err
    assert out.startswith("wrote 6 plots") or out.startswith("wrote 5 plots")
    assert not any(q.name.startswith(".posdiag-") for q in (tmp_path / "p").iterdir())
