"""One taxonomy of encodings in every output (issue 34, item 10): the stress reading, diagnose's
recommendation, every --json, the plot legend and ``posdiag encodings`` name the same family for
the same encoding, in plain words."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from posdiag.corpus.tokenizers import load_tokenizer
from posdiag.counts.core import count_texts
from posdiag.encodings import REGISTRY, parse_encoding
from posdiag.encodings.families import FAMILIES, family, is_relative
from posdiag.reports.diagnosis import diagnose
from posdiag.reports.options import Analysis
from posdiag.synthetic import SynthSpec, synth_texts

ARGS = ["--min-count", "50", "--shards", "0", "-q"]
ENCODINGS = ["-e", "alibi", "-e", "rope", "-e", "sinusoidal", "-e", "mds-2", "-e", "nope"]


def test_every_encoding_has_one_family_of_five() -> None:
    want = {
        "nope": "none",
        "sinusoidal": "absolute",
        "learned": "absolute",
        "rope": "relative: rotary",
        "rope-yarn": "relative: rotary",
        "xpos": "relative: rotary",
        "alibi": "relative: attention bias",
        "t5": "relative: attention bias",
        "kerple-log": "relative: attention bias",
        "shaw": "relative: attention bias",
        "mds-3": "optimal: MDS",
    }
    assert {name: family(name) for name in want} == want
    assert {family(name) for name in REGISTRY} == set(FAMILIES)
    # Relative: every rotary and attention-bias encoding (the old list had only 4 of 14).
    assert sorted(n for n in REGISTRY if is_relative(n)) == sorted(
        n for n, s in REGISTRY.items() if s.kind in ("relative", "bias")
    )


def test_stress_diagnose_json_and_encodings_agree(
    cli: Callable[..., Result], synth_corpus: Path
) -> None:
    r = cli(["stress", str(synth_corpus), *ENCODINGS, *ARGS])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "Reading:" not in text and "relative bias family" not in text
    doc = json.loads(cli(["stress", str(synth_corpus), *ENCODINGS, *ARGS, "--json"]).stdout)
    rows = {e["name"]: e["family"] for e in doc["encodings"]}
    assert rows == {
        "alibi": "relative: attention bias",
        "rope": "relative: rotary",
        "sinusoidal": "absolute",
        "mds-2": "optimal: MDS",
        "nope": "none",
    }
    best = next(e for e in doc["encodings"] if e["name"] not in ("mds-2", "nope"))
    assert (
        f"In short: of the standard encodings {best['name']} fits best, stress "
        f"{best['stress']:.3f} (family {best['family']});"
    ) in text
    d = json.loads(cli(["diagnose", str(synth_corpus), *ENCODINGS, *ARGS, "--json"]).stdout)
    assert {e["name"]: e["family"] for e in d["encodings"]} == rows
    rec = d["recommendation"]
    assert rec["family"] == family(rec["encoding"])
    r = cli(["diagnose", str(synth_corpus), *ENCODINGS, *ARGS])
    assert f"{rec['encoding']} ({rec['family']}) " in " ".join(r.stdout.split())
    listed = json.loads(cli(["encodings", "--json"]).stdout)
    assert all(row["family"] == family(row["name"]) for row in listed)
    r = cli(["encodings"])
    assert (
        "families: absolute = a vector added per position (sinusoidal, learned); relative: "
        "rotary = rotations by position (rope, xpos); relative: attention bias = a bias on "
        "attention by i-j (alibi, t5, kerple, shaw); optimal: MDS = the corpus's own geometry "
        "(mds-r); none = nope"
    ) in " ".join(r.stdout.split())
    r = cli(["encodings", "alibi"])
    assert r.stdout.startswith("alibi (relative: attention bias): ")


def test_plot_legend_names_the_families(synth_corpus: Path) -> None:
    pytest.importorskip("matplotlib")
    from posdiag.counts.corpus import corpus_counts
    from posdiag.render.plots import plot_stress
    from posdiag.reports.stress import stress_report

    specs = [parse_encoding(e) for e in ENCODINGS[1::2]]
    report = stress_report(corpus_counts(str(synth_corpus)), specs, analysis=Analysis(min_count=50))
    legend = plot_stress(report).axes[0].get_legend()
    assert legend.get_title().get_text() == "family"
    # Legend order is FAMILIES order: absolute, rotary, attention bias, MDS, none.
    assert [t.get_text() for t in legend.get_texts()] == list(FAMILIES)


def test_a_shift_corpus_recommends_any_relative_encoding() -> None:
    """rope-yarn is relative: on a shift-equivariant corpus it beats an absolute encoding with a
    lower stress (before, only rope, alibi, alibi-kernel and t5 counted as relative)."""
    spec = SynthSpec(mode="shift", positions=16, vocab=80, sequences=4_000)
    sc = count_texts(synth_texts(spec), load_tokenizer(), shards=10, max_len=16)
    specs = [parse_encoding(e) for e in ("rope-yarn", "sinusoidal", "mds-2")]
    d = diagnose(sc, specs, analysis=Analysis(min_count=10), dim=128)
    assert d.shift.r2 > 0.95
    assert (d.recommendation.encoding, d.recommendation.family) == (
        "rope-yarn",
        "relative: rotary",
    )
    assert d.recommendation.text.startswith("rope-yarn (relative: rotary) ")
