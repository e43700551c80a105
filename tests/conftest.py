"""Shared fixtures: the CLI runner, repository paths, and small corpora the tests write themselves
(no network, no downloads)."""

from __future__ import annotations

import os

# Helper threads that spin while idle burn the shared cores between the suite's thousands of
# small parallel calls: numba's OpenMP threads after each kernel, OpenBLAS's after each product.
# Measured (CPU s): draw_half on a 2 x 5 matrix 2.5 ms -> 0.06 ms a call (OpenMP passive);
# geometry/test_spectral_fast's eigh/Lanczos tests 9.5 -> 2.9 (OpenBLAS timeout 2^4 cycles).
# Set before numpy or numba loads (conftest imports run first); results do not depend on the
# thread schedule, and values already set are kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import functools
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import settings
from typer.testing import CliRunner

from posdiag.cli.app import app
from tests._data import drift_distributions, sample_texts

# CI runs the same examples every time (a red CI must mean a regression, not a new random draw);
# local runs keep exploring. CI sets CI=true.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "fixtures" / "corpus_en.txt"


@pytest.fixture
def cli() -> Callable[..., Result]:
    """``posdiag`` in-process: ``cli(["stress", path, "--json"], input=...)`` returns click's
    Result (``exit_code``, ``stdout``, ``stderr`` apart); keywords go to ``CliRunner.invoke``."""
    return functools.partial(CliRunner().invoke, app)


@pytest.fixture
def repo_root() -> Path:
    """The repository's top folder (README.md, docs/, fixtures/)."""
    return ROOT


@pytest.fixture
def bundled_corpus() -> Path:
    """fixtures/corpus_en.txt: 5,780 English sentences shipped with the repository."""
    return BUNDLED


@pytest.fixture
def synth_corpus(tmp_path: Path) -> Path:
    """600 sequences of 12 tokens whose positional distributions drift smoothly (rank 2)."""
    mu = drift_distributions(12, 30, rank=2, seed=1)
    path = tmp_path / "synth.txt"
    path.write_text("\n".join(sample_texts(mu, 600, seed=2)) + "\n")
    return path


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    """The first 400 sentences of the bundled corpus."""
    lines = BUNDLED.read_text(encoding="utf-8").splitlines()[:400]
    path = tmp_path / "small.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def empty_hub_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both Hugging Face caches empty and no --data-dir default, so a copy cached on the machine
    running the tests cannot answer (each test sets the offline variable it is about)."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("POSDIAG_DATA_DIR", raising=False)


@pytest.fixture
def offline_datasets(empty_hub_caches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Data sets offline (``HF_DATASETS_OFFLINE=1``), with empty caches."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture
def offline_hub(empty_hub_caches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub offline (``HF_HUB_OFFLINE=1``: tokenizers), with empty caches."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped output is $COLUMNS wide when set (issue 34): tests get the unset default unless one
    sets it, whatever the shell that runs them exports."""
    monkeypatch.delenv("COLUMNS", raising=False)
