"""Sampling units on a corpus with a known geometry: what copies, prefixes and groups do.

``python -m benchmarks.units``. A synthetic rank-3 drift corpus (``zipf_drift_distributions``,
n = 24, V = 2,000) whose population ``B_true`` is exact. Every variant below has the same marginal
distribution at every position as the independent corpus (a copy, a prefix or a re-drawn first
token of a sentence is distributed like the sentence), so ``B_true`` is the answer for all of
them; what differs is which sequences are dependent. Printed per variant and unit rule: the
relative error of the cross-fitted ``B_H``, the stress of ``learned-random``, ``sinusoidal`` and
the true rank-3 structure, and the stress floor (docs/geometry.md section 2b).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from posdiag.counts.corpus import corpus_counts
from posdiag.encodings import make_encoding
from posdiag.geometry.core import mds_from_gram, stress, stress_floor
from posdiag.geometry.estimator import gram_from_bc
from posdiag.reports.analysis import corpus_geometry
from tests._data import sample_texts, zipf_drift_distributions

N, V, SENTENCES = 24, 2_000, 1_500


def _variants(texts: list[str], rng: np.random.Generator) -> dict[str, list[tuple[str, int]]]:
    base = [(t, i) for i, t in enumerate(texts)]
    copies = base + [base[i] for i in rng.choice(len(base), size=len(base) * 3 // 10)]
    prefixes = list(base)
    for t, i in base:
        words = t.split()
        prefixes += [(" ".join(words[:m]), i) for m in (3, 6, 9, 12, 15, 18)]
    redrawn = list(base)
    for t, i in base:
        words = t.split()
        redrawn.append((" ".join([f"t{rng.integers(V)}", *words[1:]]), i))
    order = rng.permutation
    return {
        "independent": base,
        "+30% exact copies": [copies[k] for k in order(len(copies))],
        "sentences + 6 prefixes each": [prefixes[k] for k in order(len(prefixes))],
        "+1 copy per sentence, token 0 redrawn": [redrawn[k] for k in order(len(redrawn))],
    }


def main() -> None:
    mu = zipf_drift_distributions(N, V, 3, sharpness=2.0, seed=0)
    s = np.sqrt(mu)
    b_true = gram_from_bc(s @ s.T)
    x = mds_from_gram(b_true).coordinates(3)
    grams = {
        "learned-random": make_encoding("learned-random", N, {}).gram(),
        "sinusoidal": make_encoding("sinusoidal", N, {}).gram(),
        "true rank 3": x @ x.T,
    }
    truth = " ".join(f"{stress(b_true, g):.3f}" for g in grams.values())
    print(f"truth: stress {' / '.join(grams)} = {truth}")
    texts = list(sample_texts(mu, SENTENCES, seed=1))
    rng = np.random.default_rng(2)
    rules = [("prefix 0", {"group_prefix": 0}), ("prefix 4", {"group_prefix": 4})]
    rules += [("prefix 6 (default)", {}), ("prefix 8", {"group_prefix": 8})]
    rules += [("--group-by sentence", {"group_by": "doc"})]
    with tempfile.TemporaryDirectory() as tmp:
        for name, rows in _variants(texts, rng).items():
            path = Path(tmp) / "corpus.jsonl"
            path.write_text("".join(json.dumps({"text": t, "doc": str(i)}) + "\n" for t, i in rows))
            print(f"\n{name} ({len(rows):,} sequences)")
            head = f"{'random':>6} {'sinus':>6} {'rank3':>6}"
            print(f"{'units':>20} | {'err B_H':>7} | {head} | floor")
            for label, opts in rules:
                counts = corpus_counts(str(path), max_len=N, shards=20, shard_seed=0, **opts)
                geo = corpus_geometry(counts, min_count=50, plain=False)
                b = geo.mds.gram
                err = float(np.linalg.norm(b - b_true) / np.linalg.norm(b_true))
                st = " ".join(f"{stress(b, g):6.3f}" for g in grams.values())
                floor = stress_floor(geo.mds.eigenvalues)
                print(f"{label:>20} | {err:7.3f} | {st} | {floor:.3f}")


if __name__ == "__main__":
    main()
