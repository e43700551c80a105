"""posdiag: which positional encoding fits the geometry of my corpus?

The public API, in pipeline order: sources -> tokenize -> counts -> geometry -> encodings ->
analysis -> export / render. The CLI (``posdiag.cli``) is a thin layer over these names.
"""

__version__ = "0.1.0"

from .analysis import (  # noqa: E402
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
from .counts import (  # noqa: E402
    Counts,
    corpus_counts,
    count_texts,
    load_counts,
    merge_counts,
    save_counts,
)
from .drift import Drift, corpus_drift  # noqa: E402
from .encodings import REGISTRY, Encoding, make_encoding, parse_encoding  # noqa: E402
from .errors import PosdiagError, PosdiagWarning  # noqa: E402
from .export import LowRankEncoding, low_rank_encoding, write_encoding  # noqa: E402
from .gate import GateReport, build_config, run_gate  # noqa: E402
from .geometry import (  # noqa: E402
    MDS,
    classical_mds,
    effective_rank,
    hellinger_distances,
    stress,
    stress_by_rank,
)
from .inspect import Inspection, inspect_table  # noqa: E402
from .sources import open_source  # noqa: E402
from .tokenize import load_tokenizer  # noqa: E402
from .uncertainty import ShardedCounts, bootstrap_stress, corpus_counts_sharded  # noqa: E402

__all__ = [
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
