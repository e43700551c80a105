"""The offline Hub message repeats the user's command (every option kept, the corpus swapped for
a local copy) and says how to make that copy with ``datasets`` on a connected machine."""

from __future__ import annotations

import shlex

import pytest
from typer.testing import CliRunner

from posdiag.cli.app import app
from posdiag.corpus.sources import HubUnavailable, local_command, open_source

runner = CliRunner()


def _suggested(stderr: str) -> list[str]:
    """The command the message tells the user to run, as argv."""
    tail = stderr.split("then run ", 1)[1]
    return shlex.split(tail.split(" (or ", 1)[0])


@pytest.mark.usefixtures("offline_datasets")
def test_message_keeps_every_other_option_of_the_command() -> None:
    args = ["stress", "sst2", "-t", "whitespace", "--view", "model", "-n", "64", "--limit", "9"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: sst2: cannot reach")
    cmd = _suggested(r.stderr)
    assert cmd == [
        "posdiag",
        "stress",
        "sst2.parquet",
        "-t",
        "whitespace",
        "--view",
        "model",
        "-n",
        "64",
        "--limit",
        "9",
        "--column",
        "sentence",
    ]


@pytest.mark.usefixtures("offline_datasets")
def test_message_says_how_to_make_the_local_copy() -> None:
    r = runner.invoke(app, ["count", "hf:someone/my-data:cfg@test", "-o", "x.npz"])
    assert r.exit_code == 2
    # The datasets call that writes the copy the command then reads, config and split included.
    assert (
        "python -c \"import datasets; datasets.load_dataset('someone/my-data', 'cfg', "
        "split='test').to_parquet('my-data.parquet')\"" in r.stderr
    )
    assert _suggested(r.stderr) == [
        "posdiag",
        "count",
        "my-data.parquet",
        "-o",
        "x.npz",
        "--column",
        "text",
    ]
    assert ".save_to_disk('DIR/my-data') there and pass --data-dir DIR" in r.stderr


@pytest.mark.usefixtures("offline_datasets")
def test_library_message_has_a_placeholder_command() -> None:
    with pytest.raises(HubUnavailable) as info:
        open_source("imdb", "review")
    exc = info.value
    assert "then run posdiag <command> imdb.parquet --column review (or" in str(exc)
    assert exc.message_for(None) == str(exc)


def test_local_command_replaces_the_corpus_and_the_column() -> None:
    argv = ["diff", "a.txt", "sst2", "--column=x", "-e", "sst2", "--column", "y", "-q"]
    assert local_command(argv, "sst2", "sst2.parquet", "sentence") == (
        "posdiag diff a.txt sst2.parquet -e sst2 -q --column sentence"
    )
    assert local_command(["stress", "my data"], "my data", "a b.parquet", None) == (
        "posdiag stress 'a b.parquet'"
    )
