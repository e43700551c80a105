"""The ``posdiag`` command line: each command parses, calls the library, and emits the result.

No analysis happens here and no report is laid out here (see :mod:`posdiag.render`); the options
the commands share live in :mod:`posdiag.cli.options`. Library errors (:class:`PosdiagError`)
become one ``Error: ...`` line on stderr and their exit code in :class:`_Group`, the only place
that does so.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.exceptions import UsageError
from typer.core import TyperGroup
from typer.exceptions import TyperException

from .. import __version__

# Only names without numpy/scipy at import: `posdiag --version` and `--help` stay fast; each
# command imports the library it calls.
from .._util.defaults import (
    DEFAULT_DIM,
    DEFAULT_ESTIMATOR,
    DEFAULT_LEVEL,
    DEFAULT_MIN_COUNT,
    DEFAULT_SHARDS,
)
from ..corpus.reading import Reading
from ..errors import PosdiagError, PosdiagWarning
from .options import (
    ENCODINGS,
    OUTPUT,
    READING,
    CiOpt,
    CorpusArg,
    EstimatorOpt,
    ForceOpt,
    JsonOpt,
    MinCountOpt,
    PlotForceOpt,
    PlotOpt,
    QuietOpt,
    ReplicatesOpt,
    SampleSeedOpt,
    SeedOpt,
    ShardsOpt,
    bootstrap_progress,
    check_ci,
    check_plots,
    complete_preset,
    counts,
    emit,
    encoding_option,
    output_option,
    progress,
    reads_corpus,
    sharded,
    warn,
    write_plots,
)

__all__ = ["app", "main"]


class _Group(TyperGroup):
    """Turns every exception into ``Error: <message>`` and its exit code (see
    posdiag.cli.faults)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _bare_flags(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _bare_flags(cmd.get_params(ctx))
        return cmd

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta["posdiag_argv"] = list(args)  # the command line, for messages that repeat it
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        from .._util.atomic import forget_outputs
        from .faults import (
            check_stdout,
            debug,
            error_message,
            run_error_hooks,
            signals_as_interrupts,
            silence_stdout,
        )

        forget_outputs()  # the interruption message names this command's outputs only
        run_error_hooks(None)  # hooks of an earlier command in this process (tests) go
        try:
            with signals_as_interrupts(), warnings.catch_warnings():
                warnings.simplefilter("ignore", PosdiagWarning)
                check_stdout()  # every command reports on standard output
                result = super().invoke(ctx)
                if sys.stdout is not None:
                    sys.stdout.flush()  # a full disk or closed pipe fails here, not at exit
                return result
        except UsageError as exc:  # a bad option value (exit 2): click prints it itself
            _annotate(ctx, exc.format_message())
            raise
        except (typer.Exit, typer.Abort, TyperException):
            raise  # typer's own exits and usage errors keep their codes
        except BaseException as exc:
            found = error_message(exc)
            if found is None or (debug() and not isinstance(exc, PosdiagError)):
                raise
            run_error_hooks(found[0])  # e.g. check --junit's error report, written first
            message, code = error_message(exc) or found  # so an interruption names it
            from ..corpus.sources import HubUnavailable

            if isinstance(exc, HubUnavailable):
                message = exc.message_for(ctx.meta.get("posdiag_argv"))
            if isinstance(exc, OSError) and exc.filename is None:  # standard output failed
                silence_stdout()
            _annotate(ctx, message)
            typer.echo(f"Error: {message}", err=True)
            raise typer.Exit(code) from None


def _bare_flags(params: list[Any]) -> list[Any]:
    """Flags take no value: show ``--json``, not ``--json <bool>``, in the help; every other
    parameter shows one plain placeholder (posdiag.cli._help)."""
    from ._help import tidy_params

    return tidy_params(params)


def _annotate(ctx: Any, message: str) -> None:
    """With ``--format github``, an error (exit 2) is also a workflow ``::error`` annotation."""
    from ..render.gate import asks_github_format, error_annotation

    if asks_github_format(ctx.meta.get("posdiag_argv")):
        typer.echo(error_annotation(message))


app = typer.Typer(
    cls=_Group,
    help="Which positional encoding fits the geometry of my corpus? Hellinger geometry, "
    "classical MDS and stress (arXiv 2604.05217).",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# Repeatable options: None when not given.
Names = list[str] | None
# Help panel of `posdiag check`'s rule options.
RULES = "Rules"


def _rule(decl: str, help: str, **kw: Any) -> Any:
    """An option of ``posdiag check`` that sets a rule, in the Rules help panel."""
    return typer.Option(decl, help=help, rich_help_panel=RULES, **kw)


def _specs(encoding: Names) -> list[tuple[str, dict[str, Any]]] | None:
    """The parsed ``--encoding`` values (None: the default set), parsed before any counting: a
    typo should not cost a pass over the corpus."""
    from ..encodings import parse_encoding

    return [parse_encoding(e) for e in encoding] if encoding else None


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


def _npz_output(output: Path, force: bool) -> None:
    from .._util.atomic import check_output

    if not str(output).endswith(".npz"):
        raise PosdiagError(f"'output' must end with .npz; got {str(output)!r}")
    check_output(output, force)  # refuse before a long pass, not after


@app.command()
@reads_corpus
def stress(
    corpus: CorpusArg,
    reading: Reading,
    encoding: Annotated[
        Names,
        encoding_option(
            "NAME[:key=value,...], repeatable (see 'posdiag encodings') "
            "\\[default: a standard set]."
        ),
    ] = None,
    model_preset: Annotated[
        Names,
        typer.Option(
            "--model-preset",
            help="A real model's encoding with its parameters (e.g. llama3-8b, bert-base), "
            "repeatable; see 'posdiag encodings --presets'.",
            rich_help_panel=ENCODINGS,
            autocompletion=complete_preset,
        ),
    ] = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    plot: PlotOpt = None,
    force: PlotForceOpt = False,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = None,
    seed: SeedOpt = 0,
    dim: EncodingDimOpt = None,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Also show the raw (unnormalised) stress, each encoding's plug-in stress and "
            "mds-r's in-sample stress; --json always has them.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
) -> None:
    """Stress of every standard encoding against the corpus geometry, best first."""
    from ..encodings import parse_encoding, preset_specs
    from ..render.stress import print_stress, stress_json
    from ..reports.longctx import stress_report  # the dense report, or the implicit one at long n

    chosen: list[Any] = [parse_encoding(e) for e in encoding or ()]
    for preset in model_preset or ():
        chosen += preset_specs(preset)  # each row keeps the preset's name
    check_ci(ci, replicates, shards, estimator)
    check_plots(plot, force)
    counted = sharded(corpus, reading, quiet, shards=shards, seed=seed)
    with bootstrap_progress(quiet) as bar:
        report = stress_report(
            counted,
            chosen or None,
            min_count=min_count,
            dim=dim,
            level=ci,
            replicates=replicates,
            seed=seed,
            progress=bar,
            estimator=estimator,
            # The plug-in column and the noise floor are shown by --verbose / --json only.
            details=as_json or verbose,
        )
    warn(report.warnings)
    emit(
        as_json,
        lambda: stress_json(report),
        lambda out: print_stress(report, out, verbose=verbose),
    )
    write_plots(plot, force, geometry=report.geometry, report=report)


@app.command()
@reads_corpus
def count(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, output_option("Counts file to write (.npz).")],
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    sample_seed: SampleSeedOpt = 0,
) -> None:
    """Count tokens per position once; analyse the .npz many times."""
    from ..counts.core import save_counts

    _npz_output(output, force)
    counted = counts(corpus, reading, quiet, seed=sample_seed)
    save_counts(counted, output, force=force)
    info = {**dict(counted.meta), "output": str(output), "nnz": int(counted.matrix.nnz)}
    emit(
        as_json,
        info,
        f"wrote {output}: {info['sequences']:,} sequences, {info['tokens']:,} tokens, "
        f"{counted.n} x {counted.vocab_size:,} counts ({info['nnz']:,} non-zero)",
    )


@app.command("build-encoding")
@reads_corpus
def build_encoding(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, output_option("Encoding file: .safetensors or .npy (+ .json).")],
    rank: Annotated[int, typer.Option("--rank", "-r", help="MDS rank r, in [1, n_eff-1].")] = 3,
    dim: Annotated[int, typer.Option("--dim", "-d", help="Model dimension d (>= rank).")] = 768,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the orthonormal factor B and of --sample.")
    ] = 0,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """Write the rank-r MDS encoding P = A B^T (n x d) with its metadata."""
    from .._util.atomic import check_output
    from ..render.stress import encoding_json, print_encoding
    from ..reports.analysis import corpus_geometry
    from ..reports.export import FILE_SUFFIXES, low_rank_encoding, write_encoding

    if output.suffix not in FILE_SUFFIXES:
        raise PosdiagError(
            f"'output' must end with {' or '.join(FILE_SUFFIXES)}; got {str(output)!r}"
        )
    check_output(output, force)
    if output.suffix == ".npy":
        check_output(output.with_suffix(".json"), force)
    # One --seed for the run: it seeds both the orthonormal factor B and --sample.
    counted = counts(corpus, reading, quiet, seed=seed)
    with bootstrap_progress(quiet):
        geo = corpus_geometry(counted, min_count, estimator=estimator, seed=seed)
    warn(geo.warnings)
    enc = low_rank_encoding(geo, rank, dim, seed=seed)
    files = [str(p) for p in write_encoding(enc, output, force=force)]
    emit(as_json, lambda: encoding_json(enc, files), lambda out: print_encoding(enc, files, out))


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
    from ..encodings import describe
    from ..render import encodings as table

    if presets:
        preset_rows = table.presets_json()
        emit(as_json, preset_rows, lambda out: table.print_presets(preset_rows, out))
        return
    rows = describe(name)
    if name is not None:
        emit(as_json, rows, lambda out: table.print_encoding_detail(rows[0], out))
    else:
        emit(as_json, rows, lambda out: table.print_encodings(rows, out))


@app.command()
@reads_corpus
def check(
    corpus: CorpusArg,
    reading: Reading,
    encoding: Annotated[
        Names,
        encoding_option(
            "Encoding of a max-stress rule, NAME[:key=value,...]; repeatable, paired in "
            "order with --max-stress.",
            RULES,
        ),
    ] = None,
    max_stress: Annotated[
        list[float] | None,
        _rule(
            "--max-stress", "Largest acceptable stress of the matching --encoding (one value: all)."
        ),
    ] = None,
    max_rank_for_stress: Annotated[
        list[str] | None,
        _rule(
            "--max-rank-for-stress",
            "EPS:RANK: the MDS rank needed to reach stress EPS must be <= RANK; repeatable.",
        ),
    ] = None,
    min_positional_info: Annotated[
        float | None, _rule("--min-positional-info", "Smallest I(position; token), in bits.")
    ] = None,
    min_support: Annotated[
        int | None,
        _rule(
            "--min-support",
            "Smallest support N_i over the counted positions 0..n-1: sequences, or real "
            "(non-pad) tokens with --view model.",
        ),
    ] = None,
    strict: Annotated[
        bool | None,
        _rule(
            "--strict/--no-strict",
            "Judge max-stress by the upper confidence bound where one exists.",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        _rule(
            "--config",
            "Rules file: a pyproject.toml (\\[tool.posdiag]) or posdiag.toml "
            "\\[default: the nearest posdiag.toml, else pyproject.toml with \\[tool.posdiag], "
            "from the working directory up to the repository root].",
            show_default=False,
        ),
    ] = None,
    no_config: Annotated[
        bool, _rule("--no-config", "Ignore config files; rules from options only.")
    ] = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="text | github (workflow annotations).", rich_help_panel=OUTPUT
        ),
    ] = "text",
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit",
            help="Also write a JUnit XML report here (replaced on every run, as pytest's "
            "--junitxml; missing folders are created).",
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    min_count: Annotated[
        int | None,
        typer.Option(
            "--min-count",
            help="Positions with fewer sequences (--view model: fewer real, non-pad tokens) are "
            f"dropped \\[default: {DEFAULT_MIN_COUNT}].",
            rich_help_panel=READING,
        ),
    ] = None,
    force: Annotated[
        bool,
        # Kept so existing CI lines still parse: --junit now always replaces its file.
        typer.Option("--force", "-f", hidden=True),
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = None,
    seed: SeedOpt = 0,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """CI gate: exit 0 when every rule passes, 1 when one fails, 2 on bad rules or data."""
    from ..render.gate import (
        check_format,
        check_junit_path,
        gate_json,
        github_annotations,
        text_lines,
        write_junit,
    )
    from ..reports.gate import READING_KEYS, build_config, find_config, run_gate

    if junit is not None:
        from ..render.gate import write_junit_error
        from .faults import on_error

        # Exit 2 (bad rules or data, a signal) replaces the report too: never a stale pass.
        on_error(lambda message: write_junit_error(junit, corpus, message))
    check_format(fmt)
    if config is not None and no_config:
        raise PosdiagError("'--config' and '--no-config' exclude each other")
    file = None if no_config else (config if config is not None else find_config("."))
    if file is not None and (as_json or fmt != "text"):
        typer.echo(f"posdiag check: rules from {file}", err=True)  # text: in the header
    options = {**dataclasses.asdict(reading), "min_count": min_count}
    cfg = build_config(
        file=file,
        encodings=encoding or (),
        max_stress=max_stress or (),
        max_rank_for_stress=max_rank_for_stress or (),
        min_positional_info=min_positional_info,
        min_support=min_support,
        strict=strict,
        reading={k: options[k] for k in READING_KEYS},
    )
    if junit is not None:
        check_junit_path(junit)  # refuse a folder before a pass over the corpus
    check_ci(ci, replicates, shards, estimator)
    # The config file's reading keys, overridden by the options given (build_config merged them).
    counted = sharded(corpus, reading.merged(cfg.reading), quiet, shards=shards, seed=seed)
    with bootstrap_progress(quiet) as bar:
        report = run_gate(
            counted,
            cfg,
            level=ci,
            replicates=replicates,
            seed=seed,
            progress=bar,
            estimator=estimator,
        )
    warn(report.warnings)  # as stress, diagnose and report warn
    if junit is not None:
        write_junit(report, junit)
    lines = github_annotations(report) if fmt == "github" else text_lines(report)
    emit(as_json, lambda: gate_json(report), "\n".join(lines))
    if not report.passed:
        raise typer.Exit(1)


@app.command()
@reads_corpus
def diff(
    corpus_a: Annotated[str, typer.Argument(help="Corpus A (file or counts .npz).")],
    corpus_b: Annotated[str, typer.Argument(help="Corpus B (file or counts .npz).")],
    reading: Reading,
    encoding: Annotated[
        Names, encoding_option("Encodings to rank, repeatable \\[default: a standard set].")
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
    draws: Annotated[
        int,
        typer.Option(
            "--draws",
            help="Random re-splits of A+B behind the drift verdict, each two geometries "
            "(0: no verdict; else >= 2).",
        ),
    ] = 10,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    column_b: Annotated[
        str | None,
        typer.Option(
            "--column-b",
            help="Text column of corpus B when it differs from A's (--column is then A's only).",
            rich_help_panel=READING,
            show_default=False,
        ),
    ] = None,
    plot: PlotOpt = None,
    force: PlotForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """Geometry drift from corpus A to corpus B (same tokenizer, view and max_len)."""
    from .._util.validate import check_float
    from ..render.drift import drift_json, print_drift
    from ..reports.drift import check_draws, corpus_drift, count_pair

    specs = _specs(encoding)
    check_float("tolerance", tolerance, 0.0, 1.0)  # before two passes over the corpora
    check_draws(draws)
    check_plots(plot, force, drift=True)
    with progress(quiet) as bar:
        # The default shards, as stress counts them: each side's geometry is the one stress shows.
        a, b = count_pair(
            corpus_a,
            corpus_b,
            reading,
            column_b=column_b,
            seed=seed,
            progress=bar,
            shards=DEFAULT_SHARDS,
        )
    # The bar's geometry stage: two geometries and their re-splits, long at long contexts.
    with bootstrap_progress(quiet):
        drift = corpus_drift(
            a,
            b,
            min_count=min_count,
            rank=rank,
            tolerance=tolerance,
            encodings=specs,
            seed=seed,
            estimator=estimator,
            geometry_draws=draws,
        )
    warn(drift.warnings)
    emit(as_json, lambda: drift_json(drift), lambda out: print_drift(drift, out))
    write_plots(plot, force, drift=drift)


@app.command("plot")
@reads_corpus
def plot_cmd(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, output_option("Folder for the PNGs (created if missing).")],
    encoding: Annotated[
        Names,
        encoding_option("Encodings of the stress chart, repeatable \\[default: a standard set]."),
    ] = None,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    force: PlotForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    dim: EncodingDimOpt = None,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = None,
    seed: SeedOpt = 0,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """Write PNG plots: Hellinger heatmap, spectrum, MDS trajectory, stress bars (with
    intervals), support."""
    from ..render.plots import write_plots as write
    from ..reports.analysis import stress_report

    specs = _specs(encoding)
    check_ci(ci, replicates, shards, estimator)
    check_plots(output, force)
    counted = sharded(corpus, reading, quiet, shards=shards, seed=seed)
    with bootstrap_progress(quiet) as bar:
        report = stress_report(
            counted,
            specs,
            min_count=min_count,
            dim=dim,
            estimator=estimator,
            level=ci,
            replicates=replicates,
            seed=seed,
            progress=bar,
            details=False,  # no plot shows the plug-in figures or the noise floor
        )
    warn(report.warnings)
    written = write(output, geometry=report.geometry, report=report, force=force)
    w, h = written.pixels
    lines = [f"  {f}" for f in written.files]
    emit(
        as_json,
        {"directory": written.directory, "files": written.files, "pixels": written.pixels},
        "\n".join([f"wrote {len(written.files)} plots ({w} x {h} px):", *lines]),
    )


@app.command("report")
@reads_corpus
def report_cmd(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, output_option("HTML file to write.")],
    encoding: Annotated[
        Names,
        encoding_option("Encodings of the stress table, repeatable \\[default: a standard set]."),
    ] = None,
    no_plots: Annotated[
        bool, typer.Option("--no-plots", help="Leave the plots out.", rich_help_panel=OUTPUT)
    ] = False,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    dim: EncodingDimOpt = None,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = None,
    seed: SeedOpt = 0,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """One self-contained HTML page (inline plots, no network) to attach to a PR: what
    'posdiag diagnose' says (intervals, recommendation, spectrum, every warning) and plots."""
    from .._util.atomic import check_output
    from ..render.html import build_report, write_html

    specs = _specs(encoding)
    check_ci(ci, replicates, shards, estimator)
    check_output(output, force)
    counted = sharded(corpus, reading, quiet, shards=shards, seed=seed)
    with bootstrap_progress(quiet) as bar:
        page = build_report(
            counted,
            specs,
            min_count=min_count,
            plots=not no_plots,
            dim=dim if dim is not None else DEFAULT_DIM,
            estimator=estimator,
            level=ci,
            replicates=replicates,
            seed=seed,
            progress=bar,
        )
    warn(page.warnings)
    write_html(page, output, force=force)
    extra = f"; {page.plots_omitted}" if page.plots_omitted else ""
    emit(
        as_json,
        {
            "output": str(output),
            "plots": page.plots,
            "plots_omitted": page.plots_omitted,
            "warnings": page.warnings,
        },
        f"wrote {output}: recommendation, warnings, stress table with intervals, spectrum, "
        f"diagnostics, {len(page.plots)} plots{extra}",
    )


@app.command()
@reads_corpus
def diagnose(
    corpus: CorpusArg,
    reading: Reading,
    encoding: Annotated[
        Names, encoding_option("NAME[:key=value,...], repeatable \\[default: a standard set].")
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
            rich_help_panel=ENCODINGS,
        ),
    ] = DEFAULT_DIM,
    min_count: MinCountOpt = DEFAULT_MIN_COUNT,
    shards: ShardsOpt = DEFAULT_SHARDS,
    ci: CiOpt = DEFAULT_LEVEL,
    replicates: ReplicatesOpt = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    plot: PlotOpt = None,
    force: PlotForceOpt = False,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """The theory's checks on a corpus: information, noise floor, shift, rank, recommendation."""
    from .._util.validate import check_float, check_int
    from ..render.diagnosis import diagnosis_json, print_diagnosis
    from ..reports.analysis import StressReport, spectrum
    from ..reports.analysis import diagnose as run_diagnose

    specs = _specs(encoding)
    check_ci(ci, replicates, shards, estimator)
    check_float("target", target, 0.0, 1.0, lo_open=True)
    check_int("dim", dim, 1)
    check_plots(plot, force)
    counted = sharded(corpus, reading, quiet, shards=shards, seed=seed)
    with bootstrap_progress(quiet) as bar:
        result = run_diagnose(
            counted,
            specs,
            min_count=min_count,
            target=target,
            dim=dim,
            level=ci,
            replicates=replicates,
            seed=seed,
            progress=bar,
            estimator=estimator,
            details=as_json,  # each score's plug-in figure: the JSON only
        )
    warn(result.warnings)
    emit(as_json, lambda: diagnosis_json(result), lambda out: print_diagnosis(result, out))
    if plot is not None:
        geo = result.geometry
        assert geo is not None
        report = StressReport(result.corpus, spectrum(geo), result.encodings, result.warnings)
        write_plots(plot, force, geometry=geo, report=report)


@app.command()
@reads_corpus
def inspect(
    encoding_file: Annotated[
        str,
        typer.Argument(
            help="Encoding table: .npy, or .safetensors (posdiag's 'encoding' tensor or a "
            "checkpoint's position embeddings).",
            show_default=False,
        ),
    ],
    reading: Reading,
    corpus: Annotated[
        str | None,
        typer.Option(
            "--corpus",
            help="Corpus (or counts .npz) to compare the table with.",
            rich_help_panel=READING,
        ),
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
    min_count: Annotated[
        int | None,
        typer.Option(
            "--min-count",
            help="Positions with fewer sequences (--view model: fewer real, non-pad tokens) are "
            "dropped \\[default: the encoding file's, else 100].",
            rich_help_panel=READING,
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """Separation, norms, rank of an encoding table; with --corpus, stress and monotonicity.

    A file from 'posdiag build-encoding' says how its corpus was read (tokenizer, view, max-len,
    min-count): the corpus is read the same way unless an option says otherwise.
    """
    from ..counts.core import is_counts_file
    from ..encodings.file_meta import fitted_rank, inspect_reading, read_encoding_meta, row_notes
    from ..render.inspection import inspection_json, print_inspection
    from ..reports.analysis import corpus_geometry
    from ..reports.inspection import inspect_table, read_encoding_file

    table, used = read_encoding_file(encoding_file, tensor)
    meta = read_encoding_meta(encoding_file)
    geo, notes, from_file = None, tuple[str, ...](), dict[str, str]()
    if corpus is not None:
        plan = inspect_reading(
            encoding_file,
            meta,
            reading,
            min_count,
            DEFAULT_MIN_COUNT,
            counts_file=is_counts_file(corpus),
        )
        counted = counts(corpus, plan.reading, quiet, seed=seed)
        # plain=False: inspect shows no plug-in figure; spectrum=False: it scores the table
        # against the gram and the distances, no eigenpair of the corpus is shown.
        with bootstrap_progress(quiet):
            geo = corpus_geometry(
                counted,
                plan.min_count,
                estimator=estimator,
                seed=seed,
                plain=False,
                spectrum=False,
            )
        from_file = {k: meta[k] for k in plan.from_file}
        npz = corpus if is_counts_file(corpus) else None
        notes = (
            *plan.notes,
            *row_notes(encoding_file, table.shape[0], meta, geo.summary, counts_file=npz),
        )
        warn((*geo.warnings, *notes))
    # Scoring against a corpus ranks its distances (compiled kernels at long contexts).
    with bootstrap_progress(quiet or geo is None):
        result = inspect_table(
            table,
            geo,
            path=encoding_file,
            tensor=used,
            collapse_tol=collapse_tol,
            seed=seed,
            from_file=from_file,
            warnings=notes,
            fitted_rank=fitted_rank(meta, geo.summary) if geo is not None else None,
        )
    emit(as_json, lambda: inspection_json(result), lambda out: print_inspection(result, out))


@app.command()
def synth(
    output: Annotated[Path, output_option("Corpus file to write (.txt).")],
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
    from .._util.atomic import atomic_outputs, check_output
    from .._util.validate import check_int
    from ..synthetic import SynthSpec, synth_distributions, synth_texts

    spec = SynthSpec(mode, positions, vocab, rank, sequences, seed, sharpness, width)
    synth_distributions(spec)  # validates every parameter before anything is written
    check_int("sequences", sequences, 1)
    check_output(output, force)
    with atomic_outputs([output], force) as (tmp,), open(tmp, "w", encoding="utf-8") as fh:
        for line in synth_texts(spec):
            fh.write(line + "\n")
    emit(
        as_json,
        {"output": str(output), **{k: getattr(spec, k) for k in spec.__dataclass_fields__}},
        f"wrote {output}: {sequences:,} sequences of {positions} tokens, mode {mode}, "
        f"vocabulary {vocab}, seed {seed}",
    )


@app.command()
def merge(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="Counts files (.npz) from 'posdiag count'.", show_default=False),
    ],
    output: Annotated[Path, output_option("Merged counts file (.npz).")],
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Sum counts files of the same tokenizer, view, max_len and vocabulary."""
    from ..counts.core import load_counts, merge_counts, save_counts

    _npz_output(output, force)
    names = [str(p) for p in inputs]
    merged = merge_counts([load_counts(p) for p in inputs], names)
    save_counts(merged, output, force=force)
    info = {**dict(merged.meta), "output": str(output), "nnz": int(merged.matrix.nnz)}
    emit(
        as_json,
        info,
        f"wrote {output}: {len(names)} files, {info['sequences']:,} sequences, "
        f"{info['tokens']:,} tokens, {merged.n} x {merged.vocab_size:,} counts "
        f"({info['nnz']:,} non-zero)",
    )


@app.command()
def corpora(as_json: JsonOpt = False) -> None:
    """List the Hugging Face data set presets (use the name as the corpus)."""
    from ..render.corpora import corpora_json, print_corpora

    rows = corpora_json()
    emit(as_json, rows, lambda out: print_corpora(rows, out))


@app.command()
def docs(
    topic: Annotated[
        str | None,
        typer.Argument(
            help="Page to print, e.g. geometry (what every number means) or encodings; none: "
            "list the pages.",
            show_default=False,
        ),
    ] = None,
    path: Annotated[
        bool, typer.Option("--path", help="Print where the page (or the pages) are installed.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print a documentation page installed with posdiag (Markdown), or list them."""
    from .._util.userdocs import listing, page, pages

    if topic is not None:
        found = page(topic)
        text = str(found.path) if path else found.text().rstrip("\n")
        emit(as_json, found.json, text)
        return
    rows = pages()
    text = str(rows[0].path.parent) if path else listing(rows)
    emit(as_json, lambda: [p.json(text=False) for p in rows], text)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"posdiag {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
    max_memory: Annotated[
        str | None,
        typer.Option(
            "--max-memory",
            help="Memory budget, e.g. 4G: requests estimated above it are refused before they "
            "start \\[default: what the machine has available; $POSDIAG_MAX_MEMORY].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """posdiag: corpus geometry diagnostics for positional encodings."""
    from .._util.memory import set_max_memory

    set_max_memory(max_memory)


def main() -> None:
    from .faults import exit_on_signals_at_shutdown

    exit_on_signals_at_shutdown()  # a signal during the interpreter's shutdown: its exit code
    app(prog_name="posdiag")


if __name__ == "__main__":  # pragma: no cover
    main()
