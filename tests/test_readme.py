"""The README documents every command and the two set-up commands."""

from __future__ import annotations

import re
from pathlib import Path

from typer.main import get_command

import posdiag
from posdiag.cli import app


def test_every_command_is_documented_in_the_readme(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    commands = sorted(get_command(app).commands)  # type: ignore[attr-defined]
    assert "stress" in commands
    missing = [c for c in commands if not re.search(rf"`posdiag {re.escape(c)}\b", readme)]
    assert missing == []


def test_readme_shows_make_run_and_make_test(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    assert "make run" in readme and "make test" in readme


def test_public_api_names_exist_and_core_needs_no_matplotlib() -> None:
    import subprocess
    import sys

    code = (
        "import sys, posdiag; [getattr(posdiag, n) for n in posdiag.__all__]; "
        "assert 'matplotlib' not in sys.modules; print(len(posdiag.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == len(set(posdiag.__all__))  # no name listed twice


def test_public_api_is_exactly_what_the_package_imports(repo_root: Path) -> None:
    """``__all__`` lists every name ``posdiag/__init__.py`` imports (read from its syntax
    tree, not from ``__all__``) plus ``__version__``, and nothing else."""
    import ast

    tree = ast.parse((repo_root / "posdiag" / "__init__.py").read_text(encoding="utf-8"))
    # The package's own modules (relative imports), wherever they sit (under TYPE_CHECKING).
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level >= 1
        for alias in node.names
    }
    assert len(imported) >= 30  # the parse found the imports, not an empty tree
    assert sorted(posdiag.__all__) == sorted(imported | {"__version__"})
