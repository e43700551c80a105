"""The options of one command or a few (``own`` in :mod:`posdiag.cli.app`): ``check``'s rules
(the Rules help panel), ``--min-count`` and ``--dim`` variants, each command's own.

An option one command has is a typer value here, typed in that command's signature
(``Annotated[int, own.DRAWS]``); one several commands share is an ``Annotated`` alias.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .. import __version__
from .._util.defaults import DEFAULT_DIM, DEFAULT_MIN_COUNT
from .options import ENCODINGS, OUTPUT, READING, complete_preset, encoding_option, output_option

# Help panel of `posdiag check`'s rule options.
RULES = "Rules"


def _rule(decl: str, help: str, **kw: Any) -> Any:
    """An option of ``posdiag check`` that sets a rule, in the Rules help panel."""
    return typer.Option(decl, help=help, rich_help_panel=RULES, **kw)


def min_count_option(tail: str, **kw: Any) -> Any:
    """The ``--min-count`` option (Reading panel); ``tail`` ends its help."""
    return typer.Option(
        "--min-count",
        help="Positions with fewer sequences (--view model: fewer real, non-pad tokens) are "
        f"dropped{tail}",
        rich_help_panel=READING,
        **kw,
    )


RULE_ENCODING = encoding_option(
    "Encoding of a max-stress rule, NAME[:key=value,...]; repeatable, paired in "
    "order with --max-stress.",
    RULES,
)
MAX_STRESS = _rule(
    "--max-stress", "Largest acceptable stress of the matching --encoding (one value: all)."
)
MAX_RANK = _rule(
    "--max-rank-for-stress",
    "EPS:RANK: the MDS rank needed to reach stress EPS must be <= RANK; repeatable.",
)
MIN_INFO = _rule("--min-positional-info", "Smallest I(position; token), in bits.")
MIN_SUPPORT = _rule(
    "--min-support",
    "Smallest support N_i over the counted positions 0..n-1: sequences, or real "
    "(non-pad) tokens with --view model.",
)
STRICT = _rule(
    "--strict/--no-strict",
    "Judge max-stress by the upper confidence bound where one exists.",
    show_default=False,
)
CONFIG = _rule(
    "--config",
    "Rules file: a pyproject.toml (\\[tool.posdiag]) or posdiag.toml "
    "\\[default: the nearest posdiag.toml, else pyproject.toml with \\[tool.posdiag], "
    "from the working directory up to the repository root].",
    show_default=False,
)
NO_CONFIG = _rule("--no-config", "Ignore config files; rules from options only.")
FORMAT = typer.Option(
    "--format", help="text | github (workflow annotations).", rich_help_panel=OUTPUT
)
JUNIT = typer.Option(
    "--junit",
    help="Also write a JUnit XML report here (replaced on every run, as pytest's "
    "--junitxml; missing folders are created).",
    show_default=False,
    rich_help_panel=OUTPUT,
)
# None: the config file's min-count, else the default.
RULES_MIN_COUNT = min_count_option(f" \\[default: {DEFAULT_MIN_COUNT}].")
# Kept so existing CI lines still parse: --junit now always replaces its file.
HIDDEN_FORCE = typer.Option("--force", "-f", hidden=True)

# ---- stress ----
STRESS_ENCODING = encoding_option(
    "NAME[:key=value,...], repeatable (see 'posdiag encodings') \\[default: a standard set]."
)
MODEL_PRESET = typer.Option(
    "--model-preset",
    help="A real model's encoding with its parameters (e.g. llama3-8b, bert-base), "
    "repeatable; see 'posdiag encodings --presets'.",
    rich_help_panel=ENCODINGS,
    autocompletion=complete_preset,
)
VERBOSE = typer.Option(
    "--verbose",
    "-v",
    help="Also show the raw (unnormalised) stress, each encoding's plug-in stress and "
    "mds-r's in-sample stress; --json always has them.",
    rich_help_panel=OUTPUT,
)

# ---- diff ----
DIFF_ENCODING = encoding_option("Encodings to rank, repeatable \\[default: a standard set].")
DIFF_RANK = typer.Option(
    "--rank",
    "-r",
    help="Rank of the MDS encodings crossed \\[default: each corpus's effective rank "
    "at --tolerance].",
    show_default=False,
)
TOLERANCE = typer.Option("--tolerance", help="Stress that picks the default ranks.")
DIFF_SEED = typer.Option(
    "--seed", help="Seed of --sample and of the no-drift reference's re-splits."
)
DRAWS = typer.Option(
    "--draws",
    help="Random re-splits of A+B behind the drift verdict, each two geometries "
    "(0: no verdict; else >= 2).",
)
COLUMN_B = typer.Option(
    "--column-b",
    help="Text column of corpus B when it differs from A's (--column is then A's only).",
    rich_help_panel=READING,
    show_default=False,
)

# ---- inspect ----
ENCODING_FILE = typer.Argument(
    help="Encoding table: .npy, or .safetensors (posdiag's 'encoding' tensor or a "
    "checkpoint's position embeddings).",
    show_default=False,
)
INSPECT_CORPUS = typer.Option(
    "--corpus", help="Corpus (or counts .npz) to compare the table with.", rich_help_panel=READING
)
TENSOR = typer.Option("--tensor", help="Tensor name inside a .safetensors file.")
COLLAPSE_TOL = typer.Option("--collapse-tol", help="Pairs closer than this x the median collapse.")
INSPECT_SEED = typer.Option("--seed", help="Seed of the random baseline and of --sample.")
INSPECT_MIN_COUNT = min_count_option(
    " \\[default: the encoding file's, else 100].", show_default=False
)

# ---- several commands ----
MinCountOpt = Annotated[int, min_count_option(" (and listed).")]

EncodingDimOpt = Annotated[
    int | None,
    typer.Option(
        "--dim",
        "-d",
        help="Model dimension d of every encoding that has one (sinusoidal, scaled-sinusoidal, "
        f"learned-random, mds) unless given as d=/dim= \\[default: {DEFAULT_DIM}].",
        show_default=False,
        rich_help_panel=ENCODINGS,
    ),
]


# ---- count ----
COUNT_OUTPUT = output_option("Counts file to write (.npz).")

# ---- build-encoding ----
BUILD_ENCODING_OUTPUT = output_option("Encoding file: .safetensors or .npy (+ .json).")
BUILD_ENCODING_RANK = typer.Option("--rank", "-r", help="MDS rank r, in [1, n_eff-1].")
BUILD_ENCODING_DIM = typer.Option("--dim", "-d", help="Model dimension d (>= rank).")
BUILD_ENCODING_SEED = typer.Option(
    "--seed", help="Seed of the orthonormal factor B and of --sample."
)

# ---- encodings ----
ENCODINGS_NAME = typer.Argument(
    help="Show one encoding's parameters in detail.", show_default=False
)
ENCODINGS_PRESETS = typer.Option("--presets", help="List the model presets (for --model-preset).")

# ---- plot ----
PLOT_OUTPUT = output_option("Folder for the PNGs (created if missing).")
PLOT_ENCODING = encoding_option(
    "Encodings of the stress chart, repeatable \\[default: a standard set]."
)

# ---- report ----
REPORT_OUTPUT = output_option("HTML file to write.")
REPORT_ENCODING = encoding_option(
    "Encodings of the stress table, repeatable \\[default: a standard set]."
)
REPORT_NO_PLOTS = typer.Option("--no-plots", help="Leave the plots out.", rich_help_panel=OUTPUT)

# ---- diagnose ----
DIAGNOSE_ENCODING = encoding_option("NAME[:key=value,...], repeatable \\[default: a standard set].")
DIAGNOSE_TARGET = typer.Option("--target", help="Stress the recommended MDS rank must reach.")
DIAGNOSE_DIM = typer.Option(
    "--dim",
    "-d",
    help="Model dimension d: of the parameter saving, and of every encoding that has "
    "one (sinusoidal, scaled-sinusoidal, learned-random, mds) unless given as d=/dim=.",
    rich_help_panel=ENCODINGS,
)

# ---- synth ----
SYNTH_OUTPUT = output_option("Corpus file to write (.txt).")
SYNTH_MODE = typer.Option("--mode", help="drift (low-rank smooth drift) | shift (Toeplitz).")
SYNTH_POSITIONS = typer.Option("--positions", help="Sequence length n.")
SYNTH_VOCAB = typer.Option("--vocab", help="Vocabulary size.")
SYNTH_RANK = typer.Option("--rank", help="drift: intrinsic rank.")
SYNTH_SEQUENCES = typer.Option("--sequences", help="Lines to write.")
SYNTH_SEED = typer.Option("--seed", help="Seed of the sampler.")
SYNTH_SHARPNESS = typer.Option("--sharpness", help="drift: how peaked the block weights are.")
SYNTH_WIDTH = typer.Option("--width", help="shift: bump width in tokens \\[default: n/2].")

# ---- merge ----
MERGE_INPUTS = typer.Argument(help="Counts files (.npz) from 'posdiag count'.", show_default=False)
MERGE_OUTPUT = output_option("Merged counts file (.npz).")

# ---- docs ----
DOCS_TOPIC = typer.Argument(
    help="Page to print, e.g. geometry (what every number means) or encodings; none: "
    "list the pages.",
    show_default=False,
)
DOCS_PATH = typer.Option("--path", help="Print where the page (or the pages) are installed.")


# ---- root ----
def _version(value: bool) -> None:
    if value:
        typer.echo(f"posdiag {__version__}")
        raise typer.Exit()


ROOT_VERSION = typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
ROOT_MAX_MEMORY = typer.Option(
    "--max-memory",
    help="Memory budget, e.g. 4G: requests estimated above it are refused before they "
    "start \\[default: what the machine has available; $POSDIAG_MAX_MEMORY].",
    show_default=False,
)
