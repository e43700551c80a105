"""posdiag: which positional encoding fits the geometry of my corpus?

The public API, in pipeline order: corpus -> counts -> geometry -> scoring / encodings ->
uncertainty -> reports -> render. The CLI (``posdiag.cli``) is a thin layer over these names.
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are what __all__, built from _EXPORTS, lists)

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - the names for type checkers; at run time see __getattr__
    from .corpus.sources import open_source
    from .corpus.tokenizers import load_tokenizer
    from .counts.core import Counts, count_texts, load_counts, merge_counts, save_counts
    from .counts.corpus import corpus_counts
    from .encodings import REGISTRY, Encoding, make_encoding, parse_encoding
    from .errors import PosdiagError, PosdiagWarning
    from .geometry.core import (
        MDS,
        classical_mds,
        effective_rank,
        hellinger_distances,
        stress,
        stress_by_rank,
    )
    from .geometry.estimator import HellingerEstimate, estimate_hellinger
    from .reports.analysis import DEFAULT_MIN_COUNT, CorpusGeometry, corpus_geometry
    from .reports.diagnosis import Diagnosis, diagnose
    from .reports.drift import Drift, corpus_drift
    from .reports.export import LowRankEncoding, low_rank_encoding, write_encoding
    from .reports.gate import GateReport, build_config, run_gate
    from .reports.inspection import Inspection, inspect_table
    from .reports.options import Analysis
    from .reports.scores import EncodingScore, score_encodings
    from .reports.stress import StressReport, stress_report
    from .uncertainty.bootstrap import bootstrap_stress, corpus_counts_sharded

# Imported on first use (PEP 562): `posdiag --version` and `--help` must not pay for numpy and
# scipy's imports, so `import posdiag` loads nothing until a name is asked for.
_EXPORTS = {
    "corpus.sources": ("open_source",),
    "corpus.tokenizers": ("load_tokenizer",),
    "counts.core": ("Counts", "count_texts", "load_counts", "merge_counts", "save_counts"),
    "counts.corpus": ("corpus_counts",),
    "encodings": ("REGISTRY", "Encoding", "make_encoding", "parse_encoding"),
    "errors": ("PosdiagError", "PosdiagWarning"),
    "geometry.core": (
        "MDS",
        "classical_mds",
        "effective_rank",
        "hellinger_distances",
        "stress",
        "stress_by_rank",
    ),
    "geometry.estimator": ("HellingerEstimate", "estimate_hellinger"),
    "reports.analysis": ("DEFAULT_MIN_COUNT", "CorpusGeometry", "corpus_geometry"),
    "reports.diagnosis": ("Diagnosis", "diagnose"),
    "reports.drift": ("Drift", "corpus_drift"),
    "reports.export": ("LowRankEncoding", "low_rank_encoding", "write_encoding"),
    "reports.gate": ("GateReport", "build_config", "run_gate"),
    "reports.inspection": ("Inspection", "inspect_table"),
    "reports.options": ("Analysis",),
    "reports.scores": ("EncodingScore", "score_encodings"),
    "reports.stress": ("StressReport", "stress_report"),
    "uncertainty.bootstrap": ("bootstrap_stress", "corpus_counts_sharded"),
}
_LAZY = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'posdiag' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = ["__version__", *_LAZY]
