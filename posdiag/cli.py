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
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from typer.core import TyperGroup

from . import __version__
from .counts import Counts, corpus_counts, save_counts
from .diagnostics import DEFAULT_MIN_COUNT, StressReport, corpus_geometry, score_encodings, spectrum
from .encodings import REGISTRY, parse_encoding
from .errors import PosdiagError, PosdiagWarning
from .export import low_rank_encoding, write_encoding
from .report import encoding_json, print_encoding, print_stress, stress_json
from .sources import HubUnavailable

__all__ = ["app", "main"]


class _Group(TyperGroup):
    """Turns every PosdiagError into ``Error: <message>`` and its exit code."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PosdiagWarning)
                return super().invoke(ctx)
        except PosdiagError as exc:
            message = str(exc)
            if isinstance(exc, HubUnavailable) and ctx.invoked_subcommand:
                message = message.replace("posdiag <command>", f"posdiag {ctx.invoked_subcommand}")
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
        "a preset (see 'posdiag corpora'), hf:OWNER/NAME[:CONFIG][@SPLIT], token ids (.npy, "
        ".bin), or a counts .npz from 'posdiag count'.",
        show_default=False,
    ),
]
ColumnOpt = Annotated[
    str | None, typer.Option("--column", help="Text column of .jsonl/.csv/.tsv [default: text].")
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        "-t",
        help="'whitespace', 'bytes', a tokenizer.json, or a hub name (e.g. bert-base-uncased) "
        "[default: whitespace].",
    ),
]
ViewOpt = Annotated[
    str | None, typer.Option("--view", help="text | model | packed [default: text].")
]
MaxLenOpt = Annotated[
    int | None, typer.Option("--max-len", "-n", help="Positions counted, n [default: 512].")
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
DataDirOpt = Annotated[
    str | None,
    typer.Option(
        "--data-dir",
        help="Folder with local copies of presets / hub data sets [default: $POSDIAG_DATA_DIR].",
    ),
]
DtypeOpt = Annotated[
    str | None, typer.Option("--dtype", help="Id type of a raw .bin token file: uint16 | uint32.")
]
VocabSizeOpt = Annotated[
    int | None,
    typer.Option("--vocab-size", help="Vocabulary size V of a .npy/.bin token id file."),
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
    with _progress(quiet) as progress:
        return corpus_counts(
            corpus,
            column=column,
            tokenizer=tokenizer,
            view_name=view,
            max_len=max_len,
            pad_token=pad_token,
            progress=progress,
            **read,
        )


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
    sample_seed: SampleSeedOpt = 0,
    data_dir: DataDirOpt = None,
    dtype: DtypeOpt = None,
    vocab_size: VocabSizeOpt = None,
) -> None:
    """Stress of every standard encoding against the corpus geometry, best first."""
    # Parse encodings first: a typo should not cost a pass over the corpus.
    specs = [parse_encoding(e) for e in encoding] if encoding else None
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
    geo = corpus_geometry(counts, min_count)
    report = StressReport(
        geo.summary, spectrum(geo), tuple(score_encodings(geo, specs)), geo.warnings
    )
    _warn(report.warnings)
    if as_json:
        typer.echo(json.dumps(stress_json(report), indent=2))
    else:
        print_stress(report, _stdout())


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
def encodings(as_json: JsonOpt = False) -> None:
    """List every encoding with its parameters, defaults and parameter count."""
    rows: list[dict[str, Any]] = [
        {
            "name": s.name,
            "kind": s.kind,
            "params": {k: v for k, v in s.defaults.items()},
            "n_params": s.n_params_formula,
            "summary": s.summary,
        }
        for s in REGISTRY.values()
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    t = Table(title="Encodings (use as --encoding NAME[:key=value,...])", title_justify="left")
    for col in ("name", "kind", "parameters [defaults]", "params", "definition"):
        t.add_column(col)
    for r in rows:
        ps = ", ".join(f"{k}={'(required)' if v is None else v}" for k, v in r["params"].items())
        t.add_row(r["name"], r["kind"], ps or "-", r["n_params"], r["summary"])
    _stdout().print(t)


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
    from .sources import PRESETS

    rows = [
        {
            "name": p.name,
            "dataset": p.dataset,
            "config": p.config,
            "split": p.split,
            "column": p.column,
            "summary": p.summary,
        }
        for p in PRESETS.values()
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    t = Table(
        # \\[ keeps rich from reading [SPLIT] as markup.
        title="Presets (corpus NAME\\[@SPLIT]; "
        "any hub data set: hf:OWNER/NAME\\[:CONFIG]\\[@SPLIT])",
        title_justify="left",
    )
    for col in ("name", "dataset", "config", "split", "column", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"], r["dataset"], r["config"] or "-", r["split"], r["column"], r["summary"]
        )
    _stdout().print(t)


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
