"""The config file of ``posdiag check``: a broken file is an error naming file, line and column
(never a silent skip that lets the gate pass), and the file is searched upward to the
repository root, as ruff and pytest do."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.errors import PosdiagError
from posdiag.reports.config import find_config, read_toml, search_dirs
from posdiag.reports.gate import build_config

runner = CliRunner()


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _check(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["check", *args])
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        # A duplicate key: tomllib refuses it at the second definition.
        (
            '[project]\nname = "x"\n[tool.posdiag]\nmin-support = 1\nmin-support = 99999\n',
            "5:20",
            "Cannot overwrite a value",
        ),
        # A syntax error in the table.
        ("[tool.posdiag]\nmin-support = 1\nmax-stress = { rope = }\n", "3:23", "Invalid value"),
        # Unterminated at the end of the document: the position of the last character.
        ("[tool.posdiag]\nmin-support = [1,\n", "2:18", "Invalid value"),
    ],
)
def test_broken_config_in_cwd_fails_the_gate_with_file_line_column(
    synth_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    where: str,
    reason: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "pyproject.toml", text)
    # A rule that passes on the command line: before the fix the broken file was skipped and
    # the gate exited 0 on this rule alone.
    code, out, err = _check(str(synth_corpus), "--min-support", "1")
    assert code == 2, out
    assert err.startswith(f"Error: pyproject.toml:{where}: not valid TOML ({reason}")
    assert err.count("\n") == 1
    # With --config the same message; --no-config is the way around it.
    code, _, err = _check(str(synth_corpus), "--config", "pyproject.toml", "--min-support", "1")
    assert code == 2 and err.startswith(f"Error: pyproject.toml:{where}: not valid TOML")
    code, _, _ = _check(str(synth_corpus), "--no-config", "--min-support", "1", "-n", "12")
    assert code == 0


def test_broken_posdiag_toml_is_an_error(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "posdiag.toml", "min-support = 1\nmin-support = 2\n")
    assert find_config(tmp_path) == cfg
    with pytest.raises(PosdiagError, match=r"posdiag.toml:2:16: not valid TOML"):
        build_config(file=cfg, min_support=1)


def test_broken_pyproject_that_never_mentions_posdiag_is_not_ours(tmp_path: Path) -> None:
    _write(tmp_path / ".git" / "HEAD", "")
    _write(tmp_path / "pyproject.toml", "[project\nname = 'x'\n")
    assert find_config(tmp_path) is None
    with pytest.raises(PosdiagError, match=r"pyproject.toml:1:9: not valid TOML"):
        read_toml(tmp_path / "pyproject.toml")


def test_config_is_found_upward_and_not_past_the_repository_root(
    synth_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = _write(tmp_path / "pyproject.toml", "[tool.posdiag]\nmin-support = 99999\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)
    assert search_dirs(deep) == [deep.resolve(), (repo / "src").resolve(), repo.resolve()]
    # Above the repository root: not used.
    assert find_config(deep) is None
    assert find_config(tmp_path) == outside
    cfg = _write(repo / "pyproject.toml", "[tool.posdiag]\nmin-support = 601\nmax-len = 12\n")
    assert find_config(deep) == cfg
    monkeypatch.chdir(deep)
    code, out, _ = _check(str(synth_corpus))
    assert code == 1
    # The header names the file used, relative to the working directory.
    assert "rules from ../../pyproject.toml" in out.splitlines()[0]
    assert "FAIL  min-support: smallest support 600 sequences < 601 sequences" in out
    # Non-text formats say it on stderr.
    code, out, err = _check(str(synth_corpus), "--format", "github")
    assert code == 1 and "posdiag check: rules from ../../pyproject.toml" in err
    # The nearest file wins: a posdiag.toml in between.
    _write(repo / "src" / "posdiag.toml", "min-support = 600\nmax-len = 12\n")
    code, out, _ = _check(str(synth_corpus))
    assert code == 0 and "rules from ../posdiag.toml" in out.splitlines()[0]
