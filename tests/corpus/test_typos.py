"""A typo in a tokenizer name or a preset's split gets a 'did you mean', before any network or
counting (issue 34, item 15)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

import posdiag.corpus.sources as sources
import posdiag.corpus.tokenizers as tokenize
from posdiag.errors import PosdiagError


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(tokenize, "_from_hub", refuse)


@pytest.mark.parametrize(
    ("name", "hint"),
    [("whitspace", "whitespace"), ("Whitespace", "whitespace"), ("byte", "bytes")],
)
def test_tokenizer_typo_gets_a_suggestion(
    cli: Callable[..., Result], synth_corpus: Path, name: str, hint: str
) -> None:
    r = cli(["stress", str(synth_corpus), "-t", name, "-q"])
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        f"Error: tokenizer {name!r}: not a built-in tokenizer or a file; did you mean {hint!r}? "
        "built-in tokenizers: whitespace, bytes (else a tokenizer.json path or a hub name)\n"
    )


def test_a_name_far_from_the_built_ins_still_goes_to_the_hub() -> None:
    with pytest.raises(AssertionError, match="the Hub was asked"):
        tokenize.load_tokenizer("bert-base-uncased")


def test_preset_split_typo_gets_a_suggestion(cli: Callable[..., Result]) -> None:
    r = cli(["stress", "sst2@validaton", "-q"])
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        "Error: sst2@validaton: preset sst2 has no split 'validaton'; did you mean 'validation'? "
        "splits: train, validation, test\n"
    )
    r = cli(["count", "imdb@dev", "-o", "x.npz"])
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        "Error: imdb@dev: preset imdb has no split 'dev'; splits: train, test, unsupervised\n"
    )


def test_a_known_split_goes_on_to_the_data_set(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def hf_source(name: str, dataset: str, config: object, split: str, *a: object, **k: object):  # type: ignore[no-untyped-def]
        seen.append((name, dataset, split))
        raise PosdiagError("stop here")

    monkeypatch.setattr(sources, "_hf_source", hf_source)
    for spec in ("sst2@validation", "sst2", "c4-en@train"):
        with pytest.raises(PosdiagError, match="stop here"):
            sources.open_source(spec)
    assert seen == [
        ("sst2@validation", "stanfordnlp/sst2", "validation"),
        ("sst2", "stanfordnlp/sst2", "train"),
        ("c4-en@train", "allenai/c4", "train"),
    ]


def test_corpora_lists_each_presets_splits(cli: Callable[..., Result]) -> None:
    rows = {r["name"]: r for r in json.loads(cli(["corpora", "--json"]).stdout)}
    assert rows["sst2"]["splits"] == ["train", "validation", "test"]
    assert all(r["split"] in r["splits"] for r in rows.values())  # each default is a known split
