"""posdiag: which positional encoding fits the geometry of my corpus?

The public API, in pipeline order: sources -> tokenize -> counts -> geometry -> encodings ->
analysis -> export / render. The CLI (``posdiag.cli``) is a thin layer over these names.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - the names for type checkers; at run time see __getattr__
    from .analysis import (
        DEFAULT_MIN_COUNT,
        CorpusGeometry,
        Diagnosis,
        EncodingScore,
        StressReport,
        corpus_geometry,
        diagnose,
        score_encodings,
        stress_report,
    )
    from .counts import Counts, corpus_counts, count_texts, load_counts, merge_counts, save_counts
    from .drift import Drift, corpus_drift
    from .encodings import REGISTRY, Encoding, make_encoding, parse_encoding
    from .errors import PosdiagError, PosdiagWarning
    from .estimator import HellingerEstimate, estimate_hellinger
    from .export import LowRankEncoding, low_rank_encoding, write_encoding
    from .gate import GateReport, build_config, run_gate
    from .geometry import (
        MDS,
        classical_mds,
        effective_rank,
        hellinger_distances,
        stress,
        stress_by_rank,
    )
    from .inspect import Inspection, inspect_table
    from .sources import open_source
    from .tokenize import load_tokenizer
    from .uncertainty import ShardedCounts, bootstrap_stress, corpus_counts_sharded

# Imported on first use (PEP 562): `posdiag --version` and `--help` must not pay for numpy and
# scipy's imports, so `import posdiag` loads nothing until a name is asked for.
_LAZY = {
    "DEFAULT_MIN_COUNT": "analysis",
    "CorpusGeometry": "analysis",
    "Diagnosis": "analysis",
    "EncodingScore": "analysis",
    "StressReport": "analysis",
    "corpus_geometry": "analysis",
    "diagnose": "analysis",
    "score_encodings": "analysis",
    "stress_report": "analysis",
    "Counts": "counts",
    "corpus_counts": "counts",
    "count_texts": "counts",
    "load_counts": "counts",
    "merge_counts": "counts",
    "save_counts": "counts",
    "Drift": "drift",
    "corpus_drift": "drift",
    "REGISTRY": "encodings",
    "Encoding": "encodings",
    "make_encoding": "encodings",
    "parse_encoding": "encodings",
    "PosdiagError": "errors",
    "PosdiagWarning": "errors",
    "HellingerEstimate": "estimator",
    "estimate_hellinger": "estimator",
    "LowRankEncoding": "export",
    "low_rank_encoding": "export",
    "write_encoding": "export",
    "GateReport": "gate",
    "build_config": "gate",
    "run_gate": "gate",
    "MDS": "geometry",
    "classical_mds": "geometry",
    "effective_rank": "geometry",
    "hellinger_distances": "geometry",
    "stress": "geometry",
    "stress_by_rank": "geometry",
    "Inspection": "inspect",
    "inspect_table": "inspect",
    "open_source": "sources",
    "load_tokenizer": "tokenize",
    "ShardedCounts": "uncertainty",
    "bootstrap_stress": "uncertainty",
    "corpus_counts_sharded": "uncertainty",
}


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


__all__ = [
    "HellingerEstimate",
    "estimate_hellinger",
    "Diagnosis",
    "Drift",
    "GateReport",
    "Inspection",
    "ShardedCounts",
    "bootstrap_stress",
    "build_config",
    "corpus_counts_sharded",
    "corpus_drift",
    "diagnose",
    "inspect_table",
    "merge_counts",
    "run_gate",
    "DEFAULT_MIN_COUNT",
    "MDS",
    "REGISTRY",
    "CorpusGeometry",
    "Counts",
    "Encoding",
    "EncodingScore",
    "LowRankEncoding",
    "PosdiagError",
    "PosdiagWarning",
    "StressReport",
    "__version__",
    "classical_mds",
    "corpus_counts",
    "corpus_geometry",
    "count_texts",
    "effective_rank",
    "hellinger_distances",
    "load_counts",
    "load_tokenizer",
    "low_rank_encoding",
    "make_encoding",
    "open_source",
    "parse_encoding",
    "save_counts",
    "score_encodings",
    "stress",
    "stress_by_rank",
    "stress_report",
    "write_encoding",
]
