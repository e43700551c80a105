"""posdiag: which positional encoding fits the geometry of my corpus?

The public API, in pipeline order: sources -> tokenize -> counts -> geometry -> encodings ->
diagnostics -> export / report. The CLI (``posdiag.cli``) is a thin layer over these names.
"""

__version__ = "0.1.0"

from .counts import Counts, corpus_counts, count_texts, load_counts, save_counts  # noqa: E402
from .diagnostics import (  # noqa: E402
    DEFAULT_MIN_COUNT,
    CorpusGeometry,
    EncodingScore,
    StressReport,
    corpus_geometry,
    score_encodings,
    stress_report,
)
from .encodings import REGISTRY, Encoding, make_encoding, parse_encoding  # noqa: E402
from .errors import PosdiagError, PosdiagWarning  # noqa: E402
from .export import LowRankEncoding, low_rank_encoding, write_encoding  # noqa: E402
from .geometry import (  # noqa: E402
    MDS,
    classical_mds,
    effective_rank,
    hellinger_distances,
    stress,
    stress_by_rank,
)
from .sources import open_source  # noqa: E402
from .tokenize import load_tokenizer  # noqa: E402

__all__ = [
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
