"""`posdiag encodings` is generated from the registry; `--model-preset` scores real models."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from posdiag.encodings import MODEL_PRESETS, REGISTRY, make_encoding
from posdiag.encodings.presets import expand_preset


def test_encodings_json_is_the_registry(cli: Callable[..., Result]) -> None:
    res = cli(["encodings", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["name"] for r in rows] == list(REGISTRY)
    for r in rows:
        spec = REGISTRY[r["name"]]
        assert r["params"] == dict(spec.defaults)
        assert r["types"] == {k: t.__name__ for k, t in spec.types.items()}
        assert r["n_params"] == spec.n_params_formula and r["summary"] == spec.summary
        assert list(r["docs"]) == list(spec.defaults) and all(r["docs"].values())
    res = cli(["encodings", "--presets", "--json"])
    presets = json.loads(res.stdout)
    assert [p["name"] for p in presets] == list(MODEL_PRESETS)
    assert presets[0]["encodings"] == [
        {"name": e, "params": dict(p)} for e, p in MODEL_PRESETS[presets[0]["name"]].encodings
    ]


def test_encodings_table_lists_every_encoding_and_preset(cli: Callable[..., Result]) -> None:
    res = cli(["encodings"])
    assert res.exit_code == 0
    for name in REGISTRY:
        assert re.search(rf"(?m)^│ {re.escape(name)} +│", res.stdout), name
    res = cli(["encodings", "--presets"])
    for name in MODEL_PRESETS:
        assert re.search(rf"(?m)^│ {re.escape(name)} +│", res.stdout), name


def test_one_encoding_in_detail(cli: Callable[..., Result]) -> None:
    res = cli(["encodings", "rope-yarn"])
    assert res.exit_code == 0
    for key, doc in REGISTRY["rope-yarn"].docs.items():
        assert re.search(rf"(?m)^│ {key} +│", res.stdout) and doc[:30] in res.stdout
    res = cli(["encodings", "rope-yam"])
    assert res.exit_code == 2
    assert res.stderr.startswith(
        "Error: unknown encoding 'rope-yam'; did you mean 'rope-yarn'? encodings: nope, "
    )


@pytest.mark.parametrize("preset", list(MODEL_PRESETS))
def test_every_preset_expands_to_valid_encodings(preset: str) -> None:
    for name, params in expand_preset(preset):
        e = make_encoding(name, 20, params)
        for k, v in params.items():
            assert e.params[k] == v


def test_stress_with_model_presets(cli: Callable[..., Result], small_corpus: Path) -> None:
    res = cli(
        ["stress", str(small_corpus), "--model-preset", "llama3-8b", "--model-preset", "bloom",
         "-e", "rope", "--json", "--min-count", "20"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["encodings"]
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"rope", "rope-llama3", "alibi", "alibi-kernel"}
    assert by_name["rope-llama3"]["params"]["base"] == 500000.0
    assert by_name["rope-llama3"]["params"]["factor"] == 8.0
    assert by_name["alibi"]["params"] == {"heads": 112}
    assert all(0.0 <= r["stress"] <= 1.0 for r in rows)


def test_unknown_preset_is_refused_before_counting(
    cli: Callable[..., Result], small_corpus: Path
) -> None:
    res = cli(["stress", str(small_corpus), "--model-preset", "llama9"])
    assert res.exit_code == 2
    assert (
        res.stderr == f"Error: unknown model preset 'llama9'; presets: {', '.join(MODEL_PRESETS)}\n"
    )


def test_every_encoding_and_preset_is_documented(repo_root: Path) -> None:
    docs = (repo_root / "docs" / "encodings.md").read_text()
    readme = (repo_root / "README.md").read_text()
    for name in REGISTRY:
        assert f"`{name}`" in docs and f"`{name}`" in readme, name
    for name in MODEL_PRESETS:
        assert f"`{name}`" in docs, name


def test_rope_and_sinusoidal_score_alike_on_a_real_corpus(
    cli: Callable[..., Result], small_corpus: Path
) -> None:
    res = cli(
        ["stress", str(small_corpus), "--min-count", "20", "--json", "-e", "rope:head_dim=96",
         "-e", "sinusoidal:d=96", "-e", "rope-dynamic:head_dim=96,seq_len=100000"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)["encodings"]}
    assert rows["rope"]["stress"] == pytest.approx(rows["sinusoidal"]["stress"], abs=1e-9)
    assert rows["rope"]["kruskal"] == pytest.approx(rows["sinusoidal"]["kruskal"], abs=1e-9)
    # Running at 100k tokens, dynamic NTK has rescaled its base: a different geometry.
    assert rows["rope-dynamic"]["params"]["scaled_base"] > 1e4
    assert rows["rope-dynamic"]["stress"] != pytest.approx(rows["rope"]["stress"], abs=1e-6)
