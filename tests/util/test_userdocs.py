"""The documentation a pip-install user can reach: ``posdiag docs [TOPIC]`` prints the pages
installed with the package, and output points to that command, not to a repository path
(issue 34, item 16)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from click.testing import Result

from posdiag.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
TOPICS = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))


def test_docs_lists_every_page(cli: Callable[..., Result]) -> None:
    r = cli(["docs"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == TOPICS
    assert "geometry      What every number means: the mathematical contract" in lines
    assert lines[-1].startswith("(posdiag docs TOPIC prints one; installed in ")
    rows = json.loads(cli(["docs", "--json"]).stdout)
    assert [row["topic"] for row in rows] == TOPICS


@pytest.mark.parametrize("topic", ["geometry", "geometry.md", "docs/geometry.md"])
def test_docs_prints_a_page(cli: Callable[..., Result], topic: str) -> None:
    r = cli(["docs", topic])
    assert r.exit_code == 0, r.output
    assert (
        r.stdout == (ROOT / "docs" / "geometry.md").read_text(encoding="utf-8").rstrip("\n") + "\n"
    )
    doc = json.loads(cli(["docs", topic, "--json"]).stdout)
    assert doc["topic"] == "geometry" and doc["text"].startswith("# What every number means")


def test_docs_unknown_topic(cli: Callable[..., Result]) -> None:
    r = cli(["docs", "geometri"])
    assert r.exit_code == 2
    assert r.stderr == (
        "Error: 'topic' 'geometri' is not a documentation page; did you mean 'geometry'? "
        f"topics: {', '.join(TOPICS)}\n"
    )


def _pointers(text: str) -> list[str]:
    return re.findall(r"'posdiag docs ([a-z-]+)'", text)


def test_output_points_to_pages_that_exist(cli: Callable[..., Result], synth_corpus: Path) -> None:
    texts = []
    for command in sorted(typer.main.get_command(app).commands):  # type: ignore[attr-defined]
        r = cli([command, "-h"], env={"COLUMNS": "400"})
        texts.append(r.stdout)
    for args in (["stress", "--verbose"], ["diagnose"]):
        r = cli([*args, str(synth_corpus), "--min-count", "50", "--shards", "0", "-q"])
        assert r.exit_code == 0, r.output
        texts.append(r.stdout + r.stderr)
    joined = "\n".join(texts)
    assert "docs/" not in joined  # a path only a clone of the repository has
    found = set(_pointers(joined))
    assert {"geometry", "scale"} <= found and found <= set(TOPICS)


def test_docs_from_the_installed_package(tmp_path: Path) -> None:
    """A built wheel carries the pages, and ``posdiag docs`` run from it prints them."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0 and "connection" in built.stderr.lower():
        pytest.skip("building the wheel needs setuptools from the package index")
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("posdiag-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        assert {f"posdiag/_docs/{t}.md" for t in TOPICS} <= set(zf.namelist())
        zf.extractall(site)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    run = [sys.executable, "-m", "posdiag", "docs"]
    # From another folder, so neither this checkout's posdiag nor its docs/ can be found.
    where = subprocess.run(
        [sys.executable, "-c", "import posdiag; print(posdiag.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert where.stdout.strip() == str(site / "posdiag" / "__init__.py")
    r = subprocess.run([*run, "geometry"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (
        r.stdout == (ROOT / "docs" / "geometry.md").read_text(encoding="utf-8").rstrip("\n") + "\n"
    )
    r = subprocess.run(
        [*run, "scale", "--path"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert r.stdout.strip() == str(site / "posdiag" / "_docs" / "scale.md")
