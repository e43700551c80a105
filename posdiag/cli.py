"""The ``posdiag`` command line: parses arguments, calls the library, prints reports.

No analysis happens here. Library errors (:class:`PosdiagError`) become one ``Error: ...`` line
on stderr and their exit code in :class:`_Group`, the only place that does so.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from typer.core import TyperGroup

from . import __version__
from .analysis import (
    DEFAULT_MIN_COUNT,
    StressReport,
    corpus_geometry,
    score_encodings,
    spectrum,
    stress_report,
)
from .counts import Counts, save_counts
from .encodings import DEFAULT_DIM, describe, parse_encoding, preset_specs
from .errors import PosdiagError, PosdiagWarning
from .export import low_rank_encoding, write_encoding
from .render.stress import encoding_json, print_encoding, print_stress, stress_json
from .sources import HubUnavailable
from .uncertainty import (
    DEFAULT_LEVEL,
    DEFAULT_REPLICATES,
    DEFAULT_SHARDS,
    ShardedCounts,
    corpus_counts_sharded,
)

__all__ = ["app", "main"]


class _Group(TyperGroup):
    """Turns every PosdiagError into ``Error: <message>`` and its exit code."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta["posdiag_argv"] = list(args)  # the command line, for messages that repeat it
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PosdiagWarning)
                return super().invoke(ctx)
        except PosdiagError as exc:
            message = str(exc)
            if isinstance(exc, HubUnavailable):
                message = exc.message_for(ctx.meta.get("posdiag_argv"))
            typer.echo(f"Error: {message}", err=True)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_Group,
    help="Which positional encoding fits the geometry of my corpus? Hellinger geometry, "
    "classical MDS and stress (arXiv 2604.05217).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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
ColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--column",
        help="Text column of .jsonl/.json/.csv/.tsv/.parquet files and data sets "
        "(default: text; presets: their own).",
    ),
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        "-t",
        help="'whitespace', 'bytes', a tokenizer.json, or a hub name (e.g. bert-base-uncased) "
        "(default: whitespace).",
    ),
]
ViewOpt = Annotated[
    str | None, typer.Option("--view", help="text | model | packed (default: text).")
]
MaxLenOpt = Annotated[
    int | None, typer.Option("--max-len", "-n", help="Positions counted, n (default: 512).")
]
PadOpt = Annotated[
    str | None, typer.Option("--pad-token", help="Pad token for --view model, if not found.")
]
MinCountOpt = Annotated[
    int,
    typer.Option("--min-count", help="Positions with fewer sequences are dropped (and listed)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
LimitOpt = Annotated[
    int | None,
    typer.Option("--limit", help="Analyse only the first N documents (token ids: windows)."),
]
SampleOpt = Annotated[
    float | None,
    typer.Option("--sample", help="Analyse a seeded random fraction F in (0, 1] of the documents."),
]
SampleSeedOpt = Annotated[int, typer.Option("--seed", help="Seed of --sample.")]
# Commands with bootstrap intervals use SeedOpt: one --seed for sample, shards and bootstrap.
DataDirOpt = Annotated[
    str | None,
    typer.Option(
        "--data-dir",
        help="Folder with local copies of presets / hub data sets \\[default: $POSDIAG_DATA_DIR].",
    ),
]
DtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--dtype", help="Id type of a raw .bin token file: uint16 | uint32 (default: uint16)."
    ),
]
VocabSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--vocab-size",
        help="Vocabulary size V of a .npy/.bin token id file (default: the tokenizer's).",
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", "-f", help="Overwrite an existing output file.")]


def _stdout() -> Console:
    # Piped output gets a fixed wide layout instead of rich's 80 columns, so rows stay on one line.
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=160)


class _Bar:
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


def _columns() -> tuple[Any, ...]:
    return (
        SpinnerColumn(),
        TextColumn("counting"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[seqs]:,} seqs  {task.fields[toks]:,} tokens"),
        TextColumn("{task.fields[rate]:,.0f} tok/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[int, int, int], None] | None]:
    """A rich progress bar on a terminal's stderr; nothing when piped or quiet."""
    err = Console(stderr=True)
    if quiet or not err.is_terminal:
        yield None
        return
    with Progress(*_columns(), console=err, transient=True) as prog:
        yield _Bar(prog)


def _counts(
    corpus: str,
    column: str | None,
    tokenizer: str | None,
    view: str | None,
    max_len: int | None,
    pad_token: str | None,
    quiet: bool,
    **read: Any,
) -> Counts:
    """``read``: limit, sample, seed, data_dir, dtype, vocab_size (see ``corpus_counts``)."""
    seed = read.pop("seed", 0)
    return _sharded(
        corpus, 0, seed, column, tokenizer, view, max_len, pad_token, quiet, **read
    ).counts


ShardsOpt = Annotated[
    int,
    typer.Option(
        "--shards",
        help="Random shards counted for the bootstrap intervals (0: no intervals).",
    ),
]
CiOpt = Annotated[float, typer.Option("--ci", help="Coverage of the bootstrap intervals.")]
SeedOpt = Annotated[
    int, typer.Option("--seed", help="Seed of --sample, shards, bootstrap and splits.")
]
ReplicatesOpt = Annotated[
    int, typer.Option("--replicates", help="Bootstrap replicates (each recomputes the geometry).")
]


EncodingDimOpt = Annotated[
    int | None,
    typer.Option(
        "--dim",
        "-d",
        help="Model dimension d of every encoding that has one (sinusoidal, scaled-sinusoidal, "
        f"learned-random, mds) unless given as d=/dim= \\[default: {DEFAULT_DIM}].",
        show_default=False,
    ),
]


def _check_ci(ci: float, replicates: int) -> None:
    """Check the interval options before a pass over the corpus, not after."""
    from ._validate import check_int
    from .uncertainty import check_level

    check_level(ci)
    check_int("replicates", replicates, 2)


def _sharded(
    corpus: str,
    shards: int,
    seed: int,
    column: str | None,
    tokenizer: str | None,
    view: str | None,
    max_len: int | None,
    pad_token: str | None,
    quiet: bool,
    **read: Any,
) -> ShardedCounts:
    """``seed`` seeds both the shards and ``--sample``; ``read`` as in :func:`_counts`."""
    with _progress(quiet) as progress:
        return corpus_counts_sharded(
            corpus,
            shards=shards,
            seed=seed,
            column=column,
            tokenizer=tokenizer,
            view_name=view,
            max_len=max_len,
            pad_token=pad_token,
            progress=progress,
            **read,
        )


@contextmanager
def _bootstrap_progress(quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar of the bootstrap replicates on a terminal's stderr."""
    err = Console(stderr=True)
    if quiet or not err.is_terminal:
        yield None
        return
    columns = (
        SpinnerColumn(),
        TextColumn("bootstrap"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as prog:
        task = prog.add_task("bootstrap", total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        yield update


def _warn(messages: tuple[str, ...]) -> None:
    for m in messages:
        typer.echo(f"Warning: {m}", err=True)


@app.command()
def stress(
    corpus: CorpusArg,
    encoding: Annotated[
        list[str] | None,
        typer.Option(
            "--encoding",
            "-e",
            help="NAME[:key=value,...], repeatable (see 'posdiag encodings'); "
            "default: a standard set.",
        ),
    ] = None,
    model_preset: Annotated[
        list[str] | None,
        typer.Option(
            "--model-preset",
            help="A real model's encoding with its parameters (e.g. llama3-8b, bert-base), "
            "repeatable; see 'posdiag encodings --presets'.",
        ),
    ] = None,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    pad_token: PadOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also write PNG plots into this folder.", show_default=False),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite existing plot files.")
    ] = False,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = DEFAULT_REPLICATES,
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
    dim: EncodingDimOpt = None,
) -> None:
    """Stress of every standard encoding against the corpus geometry, best first."""
    # Parse encodings first: a typo should not cost a pass over the corpus.
    chosen: list[Any] = [parse_encoding(e) for e in encoding or ()]
    for preset in model_preset or ():
        chosen += preset_specs(preset)  # each row keeps the preset's name
    specs = chosen or None
    _check_ci(ci, replicates)
    if plot is not None:
        from .render.plots import CORPUS_PLOTS, check_plot_dir

        check_plot_dir(plot, force, CORPUS_PLOTS)
    counts = _sharded(
        corpus,
        shards,
        seed,
        column,
        tokenizer,
        view,
        max_len,
        pad_token,
        quiet,
        limit=limit,
        sample=sample,
        data_dir=data_dir,
        dtype=dtype,
        vocab_size=vocab_size,
    )
    with _bootstrap_progress(quiet) as progress:
        report = stress_report(
            counts,
            specs,
            min_count=min_count,
            dim=dim,
            level=ci,
            replicates=replicates,
            seed=seed,
            progress=progress,
        )
    _warn(report.warnings)
    if as_json:
        typer.echo(json.dumps(stress_json(report), indent=2))
    else:
        print_stress(report, _stdout())
    if plot is not None:
        from .render.plots import write_plots

        written = write_plots(plot, geometry=report.geometry, report=report, force=force)
        typer.echo(f"wrote {len(written.files)} plots: {', '.join(written.files)}", err=True)


@app.command()
def count(
    corpus: CorpusArg,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Counts file to write (.npz).", show_default=False),
    ],
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    pad_token: PadOpt = None,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    sample_seed: SampleSeedOpt = 0,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
) -> None:
    """Count tokens per position once; analyse the .npz many times."""
    from ._io import check_output

    if not str(output).endswith(".npz"):
        raise PosdiagError(f"'output' must end with .npz; got {str(output)!r}")
    check_output(output, force)  # refuse before a long pass, not after
    counts = _counts(
        corpus,
        column,
        tokenizer,
        view,
        max_len,
        pad_token,
        quiet,
        limit=limit,
        sample=sample,
        seed=sample_seed,
        data_dir=data_dir,
        dtype=dtype,
        vocab_size=vocab_size,
    )
    save_counts(counts, output, force=force)
    info = {**dict(counts.meta), "output": str(output), "nnz": int(counts.matrix.nnz)}
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    else:
        typer.echo(
            f"wrote {output}: {info['sequences']:,} sequences, {info['tokens']:,} tokens, "
            f"{counts.n} x {counts.vocab_size:,} counts ({info['nnz']:,} non-zero)"
        )


@app.command("build-encoding")
def build_encoding(
    corpus: CorpusArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Encoding file: .safetensors or .npy (+ .json).",
            show_default=False,
        ),
    ],
    rank: Annotated[int, typer.Option("--rank", "-r", help="MDS rank r, in [1, n_eff-1].")] = 3,
    dim: Annotated[int, typer.Option("--dim", "-d", help="Model dimension d (>= rank).")] = 768,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the orthonormal factor B and of --sample.")
    ] = 0,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    pad_token: PadOpt = None,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
) -> None:
    """Write the rank-r MDS encoding P = A B^T (n x d) with its metadata."""
    from ._io import check_output
    from .export import FILE_SUFFIXES

    if output.suffix not in FILE_SUFFIXES:
        raise PosdiagError(
            f"'output' must end with {' or '.join(FILE_SUFFIXES)}; got {str(output)!r}"
        )
    check_output(output, force)
    if output.suffix == ".npy":
        check_output(output.with_suffix(".json"), force)
    # One --seed for the run: it seeds both the orthonormal factor B and --sample.
    counts = _counts(
        corpus,
        column,
        tokenizer,
        view,
        max_len,
        pad_token,
        quiet,
        limit=limit,
        sample=sample,
        seed=seed,
        data_dir=data_dir,
        dtype=dtype,
        vocab_size=vocab_size,
    )
    geo = corpus_geometry(counts, min_count)
    _warn(geo.warnings)
    enc = low_rank_encoding(geo, rank, dim, seed=seed)
    files = [str(p) for p in write_encoding(enc, output, force=force)]
    if as_json:
        typer.echo(json.dumps(encoding_json(enc, files), indent=2))
    else:
        print_encoding(enc, files, _stdout())


@app.command()
def encodings(
    name: Annotated[
        str | None,
        typer.Argument(help="Show one encoding's parameters in detail.", show_default=False),
    ] = None,
    presets: Annotated[
        bool, typer.Option("--presets", help="List the model presets (for --model-preset).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """List every encoding with its parameters, defaults and parameter count, and the presets."""
    from .render.encodings import (
        presets_json,
        print_encoding_detail,
        print_encodings,
        print_presets,
    )

    if presets:
        preset_rows = presets_json()
        if as_json:
            typer.echo(json.dumps(preset_rows, indent=2))
        else:
            print_presets(preset_rows, _stdout())
        return
    rows = describe(name)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    elif name is not None:
        print_encoding_detail(rows[0], _stdout())
    else:
        print_encodings(rows, _stdout())


@app.command()
def check(
    corpus: CorpusArg,
    encoding: Annotated[
        list[str] | None,
        typer.Option(
            "--encoding",
            "-e",
            help="Encoding of a max-stress rule, NAME[:key=value,...]; repeatable, paired in "
            "order with --max-stress.",
        ),
    ] = None,
    max_stress: Annotated[
        list[float] | None,
        typer.Option(
            "--max-stress",
            help="Largest acceptable stress of the matching --encoding (one value: all).",
        ),
    ] = None,
    max_rank_for_stress: Annotated[
        list[str] | None,
        typer.Option(
            "--max-rank-for-stress",
            help="EPS:RANK: the MDS rank needed to reach stress EPS must be <= RANK; repeatable.",
        ),
    ] = None,
    min_positional_info: Annotated[
        float | None,
        typer.Option("--min-positional-info", help="Smallest I(position; token), in bits."),
    ] = None,
    min_support: Annotated[
        int | None,
        typer.Option(
            "--min-support", help="Smallest support N_i over the counted positions 0..n-1."
        ),
    ] = None,
    strict: Annotated[
        bool | None,
        typer.Option(
            "--strict/--no-strict",
            help="Judge max-stress by the upper confidence bound where one exists.",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Rules file: a pyproject.toml (\\[tool.posdiag]) or posdiag.toml "
            "\\[default: the nearest posdiag.toml, else pyproject.toml with \\[tool.posdiag], "
            "from the working directory up to the repository root].",
            show_default=False,
        ),
    ] = None,
    no_config: Annotated[
        bool, typer.Option("--no-config", help="Ignore config files; rules from options only.")
    ] = False,
    fmt: Annotated[
        str, typer.Option("--format", help="text | github (workflow annotations).")
    ] = "text",
    junit: Annotated[
        Path | None,
        typer.Option("--junit", help="Also write a JUnit XML report here.", show_default=False),
    ] = None,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: Annotated[
        int | None,
        typer.Option(
            "--min-count",
            help=f"Positions with fewer sequences are dropped \\[default: {DEFAULT_MIN_COUNT}].",
        ),
    ] = None,
    pad_token: PadOpt = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite an existing --junit file.")
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = DEFAULT_REPLICATES,
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
) -> None:
    """CI gate: exit 0 when every rule passes, 1 when one fails, 2 on bad rules or data."""
    from ._io import check_output
    from .gate import build_config, find_config, run_gate
    from .render.gate import check_format, gate_json, github_annotations, text_lines, write_junit

    check_format(fmt)
    if config is not None and no_config:
        raise PosdiagError("'--config' and '--no-config' exclude each other")
    file = None if no_config else (config if config is not None else find_config("."))
    if file is not None and (as_json or fmt != "text"):
        typer.echo(f"posdiag check: rules from {file}", err=True)  # text: in the header
    cfg = build_config(
        file=file,
        encodings=encoding or (),
        max_stress=max_stress or (),
        max_rank_for_stress=max_rank_for_stress or (),
        min_positional_info=min_positional_info,
        min_support=min_support,
        strict=strict,
        reading={
            "column": column,
            "tokenizer": tokenizer,
            "view": view,
            "max_len": max_len,
            "min_count": min_count,
            "pad_token": pad_token,
        },
    )
    if junit is not None:
        check_output(junit, force)  # refuse before a pass over the corpus
    _check_ci(ci, replicates)
    r = cfg.reading
    sharded = _sharded(
        corpus,
        shards,
        seed,
        r.get("column"),
        r.get("tokenizer"),
        r.get("view"),
        r.get("max_len"),
        r.get("pad_token"),
        quiet,
        limit=limit,
        sample=sample,
        data_dir=data_dir,
        dtype=dtype,
        vocab_size=vocab_size,
    )
    with _bootstrap_progress(quiet) as progress:
        report = run_gate(
            sharded, cfg, level=ci, replicates=replicates, seed=seed, progress=progress
        )
    if junit is not None:
        write_junit(report, junit, force=force)
    if as_json:
        typer.echo(json.dumps(gate_json(report), indent=2))
    elif fmt == "github":
        for line in github_annotations(report):
            typer.echo(line)
    else:
        for line in text_lines(report):
            typer.echo(line)
    if not report.passed:
        raise typer.Exit(1)


@app.command()
def diff(
    corpus_a: Annotated[str, typer.Argument(help="Corpus A (file or counts .npz).")],
    corpus_b: Annotated[str, typer.Argument(help="Corpus B (file or counts .npz).")],
    encoding: Annotated[
        list[str] | None,
        typer.Option(
            "--encoding", "-e", help="Encodings to rank, repeatable; default: a standard set."
        ),
    ] = None,
    rank: Annotated[
        int | None,
        typer.Option(
            "--rank",
            "-r",
            help="Rank of the MDS encodings crossed \\[default: each corpus's effective rank "
            "at --tolerance].",
            show_default=False,
        ),
    ] = None,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Stress that picks the default ranks.")
    ] = 0.1,
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of --sample and of the no-drift reference's re-splits."),
    ] = 0,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    pad_token: PadOpt = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also write PNG plots into this folder.", show_default=False),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite existing plot files.")
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
) -> None:
    """Geometry drift from corpus A to corpus B (same tokenizer, view and max_len)."""
    from ._validate import check_float
    from .drift import corpus_drift, count_pair
    from .render.drift import drift_json, print_drift

    specs = [parse_encoding(e) for e in encoding] if encoding else None
    check_float("tolerance", tolerance, 0.0, 1.0)  # before two passes over the corpora
    if plot is not None:
        from .render.plots import DRIFT_PLOTS, check_plot_dir

        check_plot_dir(plot, force, DRIFT_PLOTS)
    with _progress(quiet) as progress:
        a, b = count_pair(
            corpus_a,
            corpus_b,
            column=column,
            tokenizer=tokenizer,
            view_name=view,
            max_len=max_len,
            pad_token=pad_token,
            progress=progress,
            limit=limit,
            sample=sample,
            seed=seed,
            data_dir=data_dir,
            dtype=dtype,
            vocab_size=vocab_size,
        )
    drift = corpus_drift(
        a, b, min_count=min_count, rank=rank, tolerance=tolerance, encodings=specs, seed=seed
    )
    _warn(drift.warnings)
    if as_json:
        typer.echo(json.dumps(drift_json(drift), indent=2))
    else:
        print_drift(drift, _stdout())
    if plot is not None:
        from .render.plots import write_plots

        written = write_plots(plot, drift=drift, force=force)
        typer.echo(f"wrote {len(written.files)} plots: {', '.join(written.files)}", err=True)


@app.command("plot")
def plot_cmd(
    corpus: CorpusArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Folder for the PNGs (created if missing).", show_default=False
        ),
    ],
    encoding: Annotated[
        list[str] | None,
        typer.Option("--encoding", "-e", help="Encodings of the stress chart, repeatable."),
    ] = None,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    pad_token: PadOpt = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite existing plot files.")
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
    seed: SampleSeedOpt = 0,
) -> None:
    """Write PNG plots: Hellinger heatmap, spectrum, MDS trajectory, stress bars, support."""
    from .render.plots import CORPUS_PLOTS, check_plot_dir, write_plots

    specs = [parse_encoding(e) for e in encoding] if encoding else None
    check_plot_dir(output, force, CORPUS_PLOTS)
    counts = _counts(
        corpus,
        column,
        tokenizer,
        view,
        max_len,
        pad_token,
        quiet,
        seed=seed,
        limit=limit,
        sample=sample,
        data_dir=data_dir,
        dtype=dtype,
        vocab_size=vocab_size,
    )
    geo = corpus_geometry(counts, min_count)
    _warn(geo.warnings)
    report = StressReport(
        geo.summary, spectrum(geo), tuple(score_encodings(geo, specs)), geo.warnings
    )
    written = write_plots(output, geometry=geo, report=report, force=force)
    if as_json:
        info = {"directory": written.directory, "files": written.files, "pixels": written.pixels}
        typer.echo(json.dumps(info, indent=2))
    else:
        w, h = written.pixels
        typer.echo(f"wrote {len(written.files)} plots ({w} x {h} px):")
        for f in written.files:
            typer.echo(f"  {f}")


@app.command("report")
def report_cmd(
    corpus: CorpusArg,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="HTML file to write.", show_default=False),
    ],
    encoding: Annotated[
        list[str] | None,
        typer.Option("--encoding", "-e", help="Encodings of the stress table, repeatable."),
    ] = None,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Leave the plots out.")] = False,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    pad_token: PadOpt = None,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
    seed: SampleSeedOpt = 0,
) -> None:
    """One self-contained HTML page (inline plots, no network) to attach to a PR."""
    from ._io import check_output
    from .render.html import build_report, write_html

    specs = [parse_encoding(e) for e in encoding] if encoding else None
    check_output(output, force)
    counts = _counts(
        corpus,
        column,
        tokenizer,
        view,
        max_len,
        pad_token,
        quiet,
        seed=seed,
        limit=limit,
        sample=sample,
        data_dir=data_dir,
        dtype=dtype,
        vocab_size=vocab_size,
    )
    geo = corpus_geometry(counts, min_count)
    _warn(geo.warnings)
    page = build_report(counts, specs, min_count=min_count, plots=not no_plots, geometry=geo)
    write_html(page, output, force=force)
    if as_json:
        info = {"output": str(output), "plots": page.plots, "plots_omitted": page.plots_omitted}
        typer.echo(json.dumps(info, indent=2))
    else:
        extra = f"; {page.plots_omitted}" if page.plots_omitted else ""
        typer.echo(
            f"wrote {output}: summary, stress table, diagnostics, {len(page.plots)} plots{extra}"
        )


@app.command()
def diagnose(
    corpus: CorpusArg,
    encoding: Annotated[
        list[str] | None,
        typer.Option("--encoding", "-e", help="NAME[:key=value,...], repeatable; default set."),
    ] = None,
    target: Annotated[
        float, typer.Option("--target", help="Stress the recommended MDS rank must reach.")
    ] = 0.1,
    dim: Annotated[
        int,
        typer.Option(
            "--dim",
            "-d",
            help="Model dimension d: of the parameter saving, and of every encoding that has "
            "one (sinusoidal, scaled-sinusoidal, learned-random, mds) unless given as d=/dim=.",
        ),
    ] = 768,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    pad_token: PadOpt = None,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = DEFAULT_REPLICATES,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also write PNG plots into this folder.", show_default=False),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite existing plot files.")
    ] = False,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
) -> None:
    """The theory's checks on a corpus: information, noise floor, shift, rank, recommendation."""
    from ._validate import check_float, check_int
    from .analysis import diagnose as run_diagnose
    from .render.diagnosis import diagnosis_json, print_diagnosis

    specs = [parse_encoding(e) for e in encoding] if encoding else None
    _check_ci(ci, replicates)
    check_float("target", target, 0.0, 1.0, lo_open=True)
    check_int("dim", dim, 1)
    if plot is not None:
        from .render.plots import CORPUS_PLOTS, check_plot_dir

        check_plot_dir(plot, force, CORPUS_PLOTS)
    counts = _sharded(
        corpus,
        shards,
        seed,
        column,
        tokenizer,
        view,
        max_len,
        pad_token,
        quiet,
        limit=limit,
        sample=sample,
        data_dir=data_dir,
        dtype=dtype,
        vocab_size=vocab_size,
    )
    with _bootstrap_progress(quiet) as progress:
        result = run_diagnose(
            counts,
            specs,
            min_count=min_count,
            target=target,
            dim=dim,
            level=ci,
            replicates=replicates,
            seed=seed,
            progress=progress,
        )
    _warn(result.warnings)
    if as_json:
        typer.echo(json.dumps(diagnosis_json(result), indent=2))
    else:
        print_diagnosis(result, _stdout())
    if plot is not None:
        from .render.plots import write_plots

        geo = result.geometry
        assert geo is not None
        report = StressReport(result.corpus, spectrum(geo), result.encodings, result.warnings)
        written = write_plots(plot, geometry=geo, report=report, force=force)
        typer.echo(f"wrote {len(written.files)} plots: {', '.join(written.files)}", err=True)


@app.command()
def inspect(
    encoding_file: Annotated[
        str,
        typer.Argument(
            help="Encoding table: .npy, or .safetensors (posdiag's 'encoding' tensor or a "
            "checkpoint's position embeddings).",
            show_default=False,
        ),
    ],
    corpus: Annotated[
        str | None,
        typer.Option("--corpus", help="Corpus (or counts .npz) to compare the table with."),
    ] = None,
    tensor: Annotated[
        str, typer.Option("--tensor", help="Tensor name inside a .safetensors file.")
    ] = "",
    collapse_tol: Annotated[
        float,
        typer.Option("--collapse-tol", help="Pairs closer than this x the median collapse."),
    ] = 0.01,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the random baseline and of --sample.")
    ] = 0,
    column: ColumnOpt = None,
    tokenizer: TokenizerOpt = None,
    view: ViewOpt = None,
    max_len: MaxLenOpt = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    pad_token: PadOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
) -> None:
    """Separation, norms, rank of an encoding table; with --corpus, stress and monotonicity."""
    from .inspect import inspect_table, read_encoding_file
    from .render.inspection import inspection_json, print_inspection

    table, used = read_encoding_file(encoding_file, tensor)
    geo = None
    if corpus is not None:
        counts = _counts(
            corpus,
            column,
            tokenizer,
            view,
            max_len,
            pad_token,
            quiet,
            seed=seed,
            limit=limit,
            sample=sample,
            data_dir=data_dir,
            dtype=dtype,
            vocab_size=vocab_size,
        )
        geo = corpus_geometry(counts, min_count)
        _warn(geo.warnings)
    result = inspect_table(
        table, geo, path=encoding_file, tensor=used, collapse_tol=collapse_tol, seed=seed
    )
    if as_json:
        typer.echo(json.dumps(inspection_json(result), indent=2))
    else:
        print_inspection(result, _stdout())


@app.command()
def synth(
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Corpus file to write (.txt).", show_default=False),
    ],
    mode: Annotated[
        str, typer.Option("--mode", help="drift (low-rank smooth drift) | shift (Toeplitz).")
    ] = "drift",
    positions: Annotated[int, typer.Option("--positions", help="Sequence length n.")] = 32,
    vocab: Annotated[int, typer.Option("--vocab", help="Vocabulary size.")] = 200,
    rank: Annotated[int, typer.Option("--rank", help="drift: intrinsic rank.")] = 3,
    sequences: Annotated[int, typer.Option("--sequences", help="Lines to write.")] = 20_000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampler.")] = 0,
    sharpness: Annotated[
        float, typer.Option("--sharpness", help="drift: how peaked the block weights are.")
    ] = 2.0,
    width: Annotated[
        float | None, typer.Option("--width", help="shift: bump width in tokens \\[default: n/2].")
    ] = None,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Write the paper's synthetic corpus: smooth low-rank drift, or a shift-equivariant one."""
    from ._io import atomic_outputs, check_output
    from .synthetic import SynthSpec, synth_distributions, synth_texts

    spec = SynthSpec(mode, positions, vocab, rank, sequences, seed, sharpness, width)
    synth_distributions(spec)  # validates every parameter before anything is written
    from ._validate import check_int

    check_int("sequences", sequences, 1)
    check_output(output, force)
    with atomic_outputs([output], force) as (tmp,), open(tmp, "w", encoding="utf-8") as fh:
        for line in synth_texts(spec):
            fh.write(line + "\n")
    info = {"output": str(output), **{k: getattr(spec, k) for k in spec.__dataclass_fields__}}
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    else:
        typer.echo(
            f"wrote {output}: {sequences:,} sequences of {positions} tokens, mode {mode}, "
            f"vocabulary {vocab}, seed {seed}"
        )


@app.command()
def merge(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="Counts files (.npz) from 'posdiag count'.", show_default=False),
    ],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Merged counts file (.npz).", show_default=False),
    ],
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Sum counts files of the same tokenizer, view, max_len and vocabulary."""
    from ._io import check_output
    from .counts import load_counts, merge_counts

    if not str(output).endswith(".npz"):
        raise PosdiagError(f"'output' must end with .npz; got {str(output)!r}")
    check_output(output, force)
    names = [str(p) for p in inputs]
    merged = merge_counts([load_counts(p) for p in inputs], names)
    save_counts(merged, output, force=force)
    info = {**dict(merged.meta), "output": str(output), "nnz": int(merged.matrix.nnz)}
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    else:
        typer.echo(
            f"wrote {output}: {len(names)} files, {info['sequences']:,} sequences, "
            f"{info['tokens']:,} tokens, {merged.n} x {merged.vocab_size:,} counts "
            f"({info['nnz']:,} non-zero)"
        )


@app.command()
def corpora(as_json: JsonOpt = False) -> None:
    """List the Hugging Face data set presets (use the name as the corpus)."""
    from .render.corpora import corpora_json, print_corpora

    rows = corpora_json()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        print_corpora(rows, _stdout())


def _version(value: bool) -> None:
    if value:
        typer.echo(f"posdiag {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """posdiag: corpus geometry diagnostics for positional encodings."""


def main() -> None:
    app(prog_name="posdiag")


if __name__ == "__main__":  # pragma: no cover
    main()
