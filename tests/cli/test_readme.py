"""The README documents every command and the two set-up commands; docs/cli.md every option."""

from __future__ import annotations

import re
from pathlib import Path

from typer.main import get_command

import posdiag
from posdiag.cli.app import app
from posdiag.reports.options import Analysis


def test_every_command_is_documented_in_the_readme(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    commands = sorted(get_command(app).commands)  # type: ignore[attr-defined]
    assert "stress" in commands
    missing = [c for c in commands if not re.search(rf"`posdiag {re.escape(c)}\b", readme)]
    assert missing == []


def _cli_md_sections(repo_root: Path) -> dict[str, str]:
    """docs/cli.md cut at its ``## `` headings: heading line -> that section's text."""
    text = (repo_root / "docs" / "cli.md").read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    return {part.split("\n", 1)[0]: part for part in parts[1:]}


def test_every_command_and_option_is_documented_in_docs_cli(repo_root: Path) -> None:
    """The option reference (moved out of the README): every command has its own section in
    docs/cli.md, and every option `--help` shows is named in that section or in the shared
    options' section (hidden options excepted), as are the options before the command."""
    sections = _cli_md_sections(repo_root)
    shared = sections["Options shared by the commands that read a corpus"]
    whole = (repo_root / "docs" / "cli.md").read_text()
    root = get_command(app)
    commands = root.commands  # type: ignore[attr-defined]
    assert len(commands) >= 13
    missing = []
    for name, cmd in sorted(commands.items()):
        own = [s for h, s in sections.items() if re.match(rf"`posdiag {re.escape(name)}\b", h)]
        if len(own) != 1:
            missing.append(f"section of {name} ({len(own)} found)")
            continue
        options = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]
        assert options, name
        for param in options:
            for flag in param.opts + param.secondary_opts:
                named = re.compile(rf"`{re.escape(flag)}(?![\w-])")
                if not (named.search(own[0]) or named.search(shared)):
                    missing.append(f"{name} {flag}")
    for param in root.params:
        for flag in param.opts:
            if not re.search(rf"`{re.escape(flag)}(?![\w-])", whole):
                missing.append(f"posdiag {flag}")
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


def test_the_bundled_corpus_tables_are_what_stress_prints(repo_root: Path) -> None:
    """README and docs/geometry.md quote `posdiag stress fixtures/corpus_en.txt` (plug-in and
    cross-fit, 3 decimals); they had drifted from the output by up to 0.008."""
    from posdiag.reports.stress import stress_report
    from posdiag.uncertainty.bootstrap import corpus_counts_sharded

    counts = corpus_counts_sharded(str(repo_root / "fixtures" / "corpus_en.txt"))
    cross = {e.name: e for e in stress_report(counts).encodings}
    plug = {
        e.name: e.stress
        for e in stress_report(counts, analysis=Analysis(estimator="plugin")).encodings
    }
    row = re.compile(
        r"^\| `([a-z0-9-]+)` \| ([0-9.]+) \| ([0-9.]+)(?: \(in-sample ([0-9.]+)\))? \|$", re.M
    )
    for doc in ("README.md", "docs/geometry.md"):
        rows = row.findall((repo_root / doc).read_text())
        names = [r[0] for r in rows if r[0] in cross]
        assert sorted(names) == sorted(cross), (doc, names)
        for name, pl, cf, in_sample in rows:
            if name not in cross:
                continue
            assert (pl, cf) == (f"{plug[name]:.3f}", f"{cross[name].stress:.3f}"), (doc, name)
            if in_sample:
                assert in_sample == f"{cross[name].in_sample:.3f}", (doc, name)
