"""What the ``posdiag`` commands share: option types grouped into help panels, the reading and
uncertainty options as one :class:`~posdiag.corpus.reading.Reading` and one :class:`Estimation`,
progress bars, and one way to emit a result.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar, get_type_hints

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from .._util.defaults import DEFAULT_ESTIMATOR, DEFAULT_LEVEL, DEFAULT_SHARDS
from .._util.jit import watch
from .._util.userdocs import doc_ref
from .._util.validate import check_choice
from ..corpus.reading import READING_FIELDS, Reading

if TYPE_CHECKING:  # pragma: no cover - numpy/scipy load on first use, not for --help/--version
    from ..counts.core import Counts
    from ..reports.options import Analysis

# Help panels of `posdiag COMMAND --help`.
READING = "Reading the corpus"
ENGINE = "Counting engine"
ENCODINGS = "Encodings"
UNCERTAINTY = "Uncertainty"
OUTPUT = "Output"

CorpusArg = Annotated[
    str,
    typer.Argument(
        help="Corpus: a file (.txt one sequence per line, .jsonl, .json, .csv, .tsv, .gz of "
        "these, .parquet, .arrow; - for stdin), a folder or glob of them, a save_to_disk folder, "
        "a preset (see 'posdiag corpora'), hf:OWNER/NAME[:CONFIG]\\[@SPLIT], token ids (.npy, "
        ".bin), or a counts .npz from 'posdiag count'.",
        show_default=False,
    ),
]

# ---- reading the corpus: the fields of Reading, added to a command by @reads_corpus ----------
# field -> help; every one defaults to None ("the default", see Reading) and has the type Reading
# gives it, the flag --field-name (and the short flag of _SHORT_FLAGS), the panel READING or ENGINE.
_READING_HELP = {
    "column": "Text column of .jsonl/.json/.csv/.tsv/.parquet files and data sets "
    "\\[default: text; presets: their own].",
    "tokenizer": "'whitespace', 'bytes', a tokenizer.json, or a hub name (e.g. bert-base-uncased) "
    "\\[default: whitespace].",
    "view": "text | model | packed \\[default: text].",
    "max_len": "Positions counted, n \\[default: 512].",
    "pad_token": "Pad token for --view model, if not found.",
    "limit": "Analyse only the first N documents (token ids: windows).",
    "sample": "Analyse a seeded random fraction F in (0, 1] of the documents.",
    "data_dir": "Folder with local copies of presets / hub data sets "
    "\\[default: $POSDIAG_DATA_DIR].",
    "dtype": "Id type of a raw .bin token file: uint16 | uint32 \\[default: uint16].",
    "vocab_size": "Vocabulary size V of a .npy/.bin token id file \\[default: the tokenizer's].",
    "engine": "Where to count: local (this process) or dask (pieces of the corpus on a Dask "
    f"cluster; needs posdiag\\[dask]; see {doc_ref('scale')}) \\[default: local].",
    "scheduler": "--engine dask: address of a running Dask scheduler (e.g. tcp://host:8786) "
    "\\[default: start a LocalCluster].",
    "workers": "--engine dask without --scheduler: LocalCluster worker processes "
    "\\[default: the CPU count].",
    "group_by": "Field of .jsonl/.json/.csv/.tsv/.parquet records and data sets naming each "
    "record's sampling unit (a document, book or source id): records with one value share a "
    f"shard (see {doc_ref('geometry', 'The sampling unit')}).",
    "group_prefix": "Sequences sharing their first K tokens are one sampling unit (0: exact copies "
    "only) \\[default: 6].",
    "dedup": "Drop exact duplicate sequences (--view packed: documents) before counting.",
}
_SHORT_FLAGS = {"tokenizer": ("-t",), "max_len": ("-n",)}
_READING_OPTIONS = {
    name: typer.Option(
        "--" + name.replace("_", "-"),
        *_SHORT_FLAGS.get(name, ()),
        help=help,
        rich_help_panel=ENGINE if name in ("engine", "scheduler", "workers") else READING,
        show_default=False,  # every default is None: the help text says what it means
    )
    for name, help in _READING_HELP.items()
}
assert tuple(_READING_OPTIONS) == READING_FIELDS

# Commands with bootstrap intervals use @estimates: one --seed for sample, shards and bootstrap.
SampleSeedOpt = Annotated[int, typer.Option("--seed", help="Seed of --sample.")]


def _estimator_choice(value: str) -> str:
    """Refuse a wrong --estimator while parsing, before a pass over the corpus."""
    from ..geometry.estimator import ESTIMATORS

    return check_choice("estimator", value, ESTIMATORS)


# ---- uncertainty: the fields of Estimation, added to a command by @estimates ---------------
_ESTIMATION_OPTIONS = {
    "shards": typer.Option(
        "--shards",
        help="Random shards counted for the bootstrap intervals (0: no intervals).",
        rich_help_panel=UNCERTAINTY,
    ),
    "ci": typer.Option(
        "--ci", help="Coverage of the bootstrap intervals.", rich_help_panel=UNCERTAINTY
    ),
    "replicates": typer.Option(
        "--replicates",
        help="Bootstrap replicates (each recomputes the geometry) \\[default: 200; from 128 "
        "positions 38 balanced half-samples with 20 shards, at most 50; below 100 the interval "
        "is a t interval from their sd].",
        show_default=False,
        rich_help_panel=UNCERTAINTY,
    ),
    "seed": typer.Option(
        "--seed",
        help="Seed of --sample, shards, bootstrap and splits.",
        rich_help_panel=UNCERTAINTY,
    ),
    "estimator": typer.Option(
        "--estimator",
        callback=_estimator_choice,
        help="Geometry estimator: crossfit (corrects the sampling-noise bias) or plugin "
        f"(the biased plug-in of earlier versions); see {doc_ref('geometry')}.",
        rich_help_panel=UNCERTAINTY,
    ),
}
EstimatorOpt = Annotated[str, _ESTIMATION_OPTIONS["estimator"]]

# ---- output -----------------------------------------------------------------------------------
JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON object instead of tables.", rich_help_panel=OUTPUT),
]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar.", rich_help_panel=OUTPUT)
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force", "-f", help="Overwrite an existing output file.", rich_help_panel=OUTPUT
    ),
]
PlotOpt = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="Also write PNG plots into this folder.",
        show_default=False,
        rich_help_panel=OUTPUT,
    ),
]
PlotForceOpt = Annotated[
    bool,
    typer.Option("--force", "-f", help="Overwrite existing plot files.", rich_help_panel=OUTPUT),
]


def complete_encoding(incomplete: str) -> list[str]:
    """Shell completion of ``-e``: registered names (and ``mds-1..3``) starting with the text."""
    from ..encodings import REGISTRY

    names = [*REGISTRY, "mds-1", "mds-2", "mds-3"]
    return [n for n in names if n.startswith(incomplete)]


def complete_preset(incomplete: str) -> list[str]:
    """Shell completion of ``--model-preset``."""
    from ..encodings import MODEL_PRESETS

    return [n for n in MODEL_PRESETS if n.startswith(incomplete)]


def encoding_option(help: str, panel: str = ENCODINGS) -> Any:
    """The repeatable ``--encoding/-e`` option, with the command's own help text."""
    return typer.Option(
        "--encoding", "-e", help=help, rich_help_panel=panel, autocompletion=complete_encoding
    )


def output_option(help: str) -> Any:
    """The required ``--output/-o`` option, with the command's own help text."""
    return typer.Option("--output", "-o", help=help, show_default=False, rich_help_panel=OUTPUT)


def _bundled(name: str, cls: Any, options: dict[str, Any], *, last: bool = False) -> Any:
    """A decorator: a command's parameter ``name`` (a frozen dataclass ``cls``) shows in its help
    as ``options`` (field -> typer option; types and defaults from ``cls``), in the parameter's
    place or, with ``last``, after every other.

    typer reads a command's options from its signature; the wrapper rewrites that signature and
    gives the command one ``cls`` built from the options' values.
    """
    kind = inspect.Parameter.KEYWORD_ONLY
    types = get_type_hints(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    added = [
        inspect.Parameter(f, kind, default=defaults[f], annotation=Annotated[types[f], option])
        for f, option in options.items()
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        params = inspect.signature(command, eval_str=True).parameters.values()
        shown = [p.replace(kind=kind) for p in params]
        at = [p.name for p in shown].index(name)
        del shown[at]
        at = len(shown) if last else at
        shown[at:at] = added

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            bundle = cls(**{f: kwargs.pop(f) for f in options})
            return command(**kwargs, **{name: bundle})

        wrapper.__signature__ = inspect.Signature(shown)  # type: ignore[attr-defined]
        return wrapper

    return decorate


# Gives a command the reading options, received as one ``reading: Reading``.
reads_corpus = _bundled("reading", Reading, _READING_OPTIONS, last=True)


@dataclass(frozen=True)
class Estimation:
    """The uncertainty options of the commands with bootstrap intervals (``@estimates``)."""

    shards: int = DEFAULT_SHARDS
    ci: float = DEFAULT_LEVEL
    replicates: int | None = None
    seed: int = 0
    estimator: str = DEFAULT_ESTIMATOR

    def analysis(self, min_count: int | None) -> Analysis:
        """The :class:`~posdiag.reports.options.Analysis`, checked (:func:`analysis_options`)."""
        return analysis_options(
            min_count, self.estimator, self.seed, self.ci, self.replicates, self.shards
        )


# The default of a command's ``estimation`` parameter (typer never sees it: @estimates).
ESTIMATION = Estimation()
# Gives a command --shards, --ci, --replicates, --seed and --estimator, in the place of its
# ``estimation: Estimation`` parameter, received as one Estimation.
estimates = _bundled("estimation", Estimation, _ESTIMATION_OPTIONS)


# Width of piped output when $COLUMNS does not say: wider than rich's 80, so rows stay on one line.
PIPED_WIDTH = 160


def stdout() -> Console:
    """Standard output: a terminal's own width; piped, $COLUMNS if set, else :data:`PIPED_WIDTH`."""
    console = Console(highlight=False)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH
    return Console(highlight=False, width=width)


def emit(as_json: bool, document: Any, text: str | Callable[[Console], None]) -> None:
    """Print ``document`` as indented JSON, or else ``text`` (a line, or a printer of tables).

    ``document`` may be a callable that builds it, so text output never builds it.
    """
    if as_json:
        doc = document() if callable(document) else document
        typer.echo(json.dumps(doc, indent=2))
    elif isinstance(text, str):
        typer.echo(text)
    else:
        text(stdout())


def warn(messages: Sequence[str]) -> None:
    for m in messages:
        typer.echo(f"Warning: {m}", err=True)


def analysis_options(
    min_count: int | None,
    estimator: str,
    seed: int,
    ci: float | None = None,
    replicates: int | None = None,
    shards: int = 0,
) -> Analysis:
    """The analysis options as one :class:`~posdiag.reports.options.Analysis`, checked before a
    pass over the corpus, not after; ``shards`` against ``estimator``'s minimum."""
    from ..reports.options import Analysis
    from ..uncertainty.bootstrap import check_shards

    analysis = Analysis(min_count, estimator, seed, ci, replicates)
    check_shards(shards, estimator)
    return analysis


class _Warns(Protocol):
    @property
    def warnings(self) -> Sequence[str]: ...


Report = TypeVar("Report", bound=_Warns)


def analyse(
    corpus: str,
    reading: Reading,
    quiet: bool,
    estimation: Estimation,
    run: Callable[[Counts, Callable[[int, int], None] | None], Report],
) -> Report:
    """Count ``corpus`` (:func:`sharded`, in ``estimation``'s shards and seed), then
    ``run(counted, progress)`` under the analysis bar (:func:`bootstrap_progress`); its warnings
    go to stderr."""
    counted = sharded(corpus, reading, quiet, shards=estimation.shards, seed=estimation.seed)
    with bootstrap_progress(quiet) as bar:
        result = run(counted, bar)
    warn(result.warnings)
    return result


def check_plots(plot: Path | None, force: bool, *, drift: bool = False) -> None:
    """Refuse an unusable plot folder before a pass over the corpus (nothing when None).

    ``drift``: the folder will get the drift plots, not the corpus plots.
    """
    if plot is None:
        return
    from ..render.plots import CORPUS_PLOTS, DRIFT_PLOTS, check_plot_dir

    check_plot_dir(plot, force, DRIFT_PLOTS if drift else CORPUS_PLOTS)


def write_plots(plot: Path | None, force: bool, **what: Any) -> None:
    """Write the ``--plot`` PNGs of ``what`` and say so on stderr (nothing when None)."""
    if plot is None:
        return
    from ..render.plots import write_plots as write

    written = write(plot, force=force, **what)
    typer.echo(f"wrote {len(written.files)} plots: {', '.join(written.files)}", err=True)


class CountColumn(MofNCompleteColumn):
    """``done/total``, and nothing while the total is unknown (rich's ``0/?`` says nothing)."""

    def render(self, task: Task) -> Text:
        return Text("") if task.total is None else super().render(task)


class EtaColumn(TimeRemainingColumn):
    """``ETA h:mm:ss`` while a known total is being worked through; nothing while the total is
    unknown (rich's ``-:--:--``) or once it is done (``0:00:00 ETA`` at the end of counting)."""

    def render(self, task: Task) -> Text:
        if task.total is None or task.finished or task.time_remaining is None:
            return Text("")
        return Text.assemble("ETA ", super().render(task))


class CountingBar:
    """Progress callback for the library: sequences, tokens, tokens/s, and ETA when known."""

    def __init__(self, prog: Progress) -> None:
        self._prog = prog
        self._unit = "documents"
        self._task = prog.add_task("counting", total=None, seqs=0, toks=0, rate=0.0)

    def start(self, total: int | None, unit: str) -> None:
        self._unit = unit
        self._prog.update(self._task, total=total)

    def __call__(self, docs: int, seqs: int, toks: int) -> None:
        task = self._prog.tasks[0]
        rate = toks / (task.elapsed or 1e-9)
        done = toks if self._unit == "tokens" else docs
        self._prog.update(self._task, completed=done, seqs=seqs, toks=toks, rate=rate)


def counting_columns() -> tuple[Any, ...]:
    return (
        SpinnerColumn(),
        TextColumn("counting"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[seqs]:,} seqs  {task.fields[toks]:,} tokens"),
        TextColumn("{task.fields[rate]:,.0f} tok/s"),
        TimeElapsedColumn(),
        EtaColumn(),
    )


@contextmanager
def progress(quiet: bool) -> Iterator[Callable[[int, int, int], None] | None]:
    """A rich progress bar of the counting on a terminal's stderr; nothing when piped or quiet."""
    err = Console(stderr=True)
    if quiet or not err.is_terminal:
        yield None
        return
    with Progress(*counting_columns(), console=err, transient=True) as prog:
        yield CountingBar(prog)


@contextmanager
def bootstrap_progress(quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on a terminal's stderr (nothing when piped or quiet): "geometry" with
    the time elapsed, then the bootstrap replicates with the time remaining; :data:`COMPILING`
    while numba compiles posdiag's kernels."""
    err = Console(stderr=True)
    if quiet or not err.is_terminal:
        yield None
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        CountColumn(),
        TimeElapsedColumn(),
        EtaColumn(),
    )
    with Progress(*columns, console=err, transient=True) as prog:
        task = prog.add_task("geometry", total=None)
        stage = ["geometry"]

        def update(done: int, total: int) -> None:
            stage[0] = "bootstrap"
            prog.update(task, completed=done, total=total, description="bootstrap")

        def compiling(now: bool) -> None:
            prog.update(task, description=COMPILING if now else stage[0])

        with watch(compiling):
            yield update


# What the bar says while numba compiles posdiag's kernels (posdiag._util.jit).
COMPILING = "compiling posdiag's kernels (once after an install)"


def sharded(
    corpus: str, reading: Reading, quiet: bool, *, shards: int = 0, seed: int = 0
) -> Counts:
    """Count ``corpus`` as ``reading`` says, in ``shards`` seeded shards, with a bar.

    ``seed`` seeds both the shards and ``--sample``. ``shards=0`` (no intervals) still counts
    the default shards, kept on the counts only: the cross-fitted geometry splits by sequence,
    and must be the same whether or not intervals are asked for.
    """
    from ..uncertainty.bootstrap import corpus_counts_sharded

    with progress(quiet) as bar:
        counted = corpus_counts_sharded(
            corpus, shards=shards or DEFAULT_SHARDS, seed=seed, progress=bar, **reading.kwargs()
        )
    if shards == 0:
        return dataclasses.replace(counted, no_intervals="--shards 0 was given")
    return counted
