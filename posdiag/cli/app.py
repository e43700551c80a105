"""The ``posdiag`` commands: each parses its options (:mod:`posdiag.cli.options`,
:mod:`posdiag.cli.command_options` as ``own``), calls the library and emits the result, laid out
by :mod:`posdiag.render`. Errors become ``Error: ...`` in :class:`posdiag.cli.faults.CommandGroup`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

# Only names without numpy/scipy at import: `posdiag --version` and `--help` stay fast; each
# command imports the library it calls.
from .._util.atomic import atomic_outputs, check_output
from .._util.defaults import DEFAULT_DIM, DEFAULT_ESTIMATOR, DEFAULT_MIN_COUNT, DEFAULT_SHARDS
from .._util.memory import set_max_memory
from .._util.signals import exit_on_signals_at_shutdown
from .._util.userdocs import listing, page, pages
from .._util.validate import check_float, check_int
from ..corpus.reading import Reading
from ..errors import PosdiagError
from . import command_options as own
from .faults import CommandGroup, on_error
from .options import (
    ESTIMATION,
    CorpusArg,
    Estimation,
    EstimatorOpt,
    ForceOpt,
    JsonOpt,
    PlotForceOpt,
    PlotOpt,
    QuietOpt,
    SampleSeedOpt,
    analyse,
    analysis_options,
    bootstrap_progress,
    check_plots,
    emit,
    estimates,
    progress,
    reads_corpus,
    sharded,
    warn,
    write_plots,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..counts.core import Counts

__all__ = ["app", "main"]


app = typer.Typer(
    cls=CommandGroup,
    help="Which positional encoding fits the geometry of my corpus? Hellinger geometry, "
    "classical MDS and stress (arXiv 2604.05217).",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _specs(encoding: list[str] | None) -> list[tuple[str, dict[str, Any]]] | None:
    """The parsed ``--encoding`` values (None: the default set), parsed before any counting: a
    typo should not cost a pass over the corpus."""
    from ..encodings import parse_encoding

    return [parse_encoding(e) for e in encoding] if encoding else None


def _npz_output(output: Path, force: bool) -> None:
    if not str(output).endswith(".npz"):
        raise PosdiagError(f"'output' must end with .npz; got {str(output)!r}")
    check_output(output, force)  # refuse before a long pass, not after


def _save_counts(counted: Counts, output: Path, force: bool, as_json: bool, what: str = "") -> None:
    """Write a counts file and say what it holds (``what``: a prefix of the summary line)."""
    from ..counts.core import save_counts

    save_counts(counted, output, force=force)
    info = {**dict(counted.meta), "output": str(output), "nnz": int(counted.matrix.nnz)}
    emit(
        as_json,
        info,
        f"wrote {output}: {what}{info['sequences']:,} sequences, {info['tokens']:,} tokens, "
        f"{counted.n} x {counted.vocab_size:,} counts ({info['nnz']:,} non-zero)",
    )


@app.command()
@reads_corpus
@estimates
def stress(
    corpus: CorpusArg,
    reading: Reading,
    encoding: Annotated[list[str] | None, own.STRESS_ENCODING] = None,
    model_preset: Annotated[list[str] | None, own.MODEL_PRESET] = None,
    min_count: own.MinCountOpt = DEFAULT_MIN_COUNT,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    plot: PlotOpt = None,
    force: PlotForceOpt = False,
    estimation: Estimation = ESTIMATION,
    dim: own.EncodingDimOpt = None,
    verbose: Annotated[bool, own.VERBOSE] = False,
) -> None:
    """Stress of every standard encoding against the corpus geometry, best first."""
    from ..encodings import parse_encoding, preset_specs
    from ..render.stress import print_stress, stress_json
    from ..reports.longctx import stress_report  # the dense report, or the implicit one at long n

    chosen: list[Any] = [parse_encoding(e) for e in encoding or ()]
    for preset in model_preset or ():
        chosen += preset_specs(preset)  # each row keeps the preset's name
    analysis = estimation.analysis(min_count)
    check_plots(plot, force)
    # The plug-in column and the noise floor are shown by --verbose / --json only.
    report = analyse(
        corpus,
        reading,
        quiet,
        estimation,
        lambda c, bar: stress_report(
            c, chosen or None, analysis, dim=dim, progress=bar, details=as_json or verbose
        ),
    )
    emit(
        as_json, lambda: stress_json(report), lambda out: print_stress(report, out, verbose=verbose)
    )
    write_plots(plot, force, geometry=report.geometry, report=report)


@app.command()
@reads_corpus
def count(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, own.COUNT_OUTPUT],
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    sample_seed: SampleSeedOpt = 0,
) -> None:
    """Count tokens per position once; analyse the .npz many times."""
    _npz_output(output, force)
    _save_counts(sharded(corpus, reading, quiet, seed=sample_seed), output, force, as_json)


@app.command("build-encoding")
@reads_corpus
def build_encoding(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, own.BUILD_ENCODING_OUTPUT],
    rank: Annotated[int, own.BUILD_ENCODING_RANK] = 3,
    dim: Annotated[int, own.BUILD_ENCODING_DIM] = 768,
    seed: Annotated[int, own.BUILD_ENCODING_SEED] = 0,
    min_count: own.MinCountOpt = DEFAULT_MIN_COUNT,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """Write the rank-r MDS encoding P = A B^T (n x d) with its metadata."""
    from ..render.stress import encoding_json, print_encoding
    from ..reports.export import FILE_SUFFIXES, write_encoding
    from ..reports.longctx import build_encoding as encoding_of  # dense, or implicit at long n

    if output.suffix not in FILE_SUFFIXES:
        raise PosdiagError(
            f"'output' must end with {' or '.join(FILE_SUFFIXES)}; got {str(output)!r}"
        )
    check_output(output, force)
    if output.suffix == ".npy":
        check_output(output.with_suffix(".json"), force)
    # One --seed for the run: it seeds both the orthonormal factor B and --sample.
    analysis = analysis_options(min_count, estimator, seed)
    enc = analyse(
        corpus,
        reading,
        quiet,
        Estimation(shards=0, seed=seed),
        lambda c, _: encoding_of(c, rank, dim, analysis, seed=seed),
    )
    files = [str(p) for p in write_encoding(enc, output, force=force)]
    emit(as_json, lambda: encoding_json(enc, files), lambda out: print_encoding(enc, files, out))


@app.command()
def encodings(
    name: Annotated[str | None, own.ENCODINGS_NAME] = None,
    presets: Annotated[bool, own.ENCODINGS_PRESETS] = False,
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
@estimates
def check(
    corpus: CorpusArg,
    reading: Reading,
    encoding: Annotated[list[str] | None, own.RULE_ENCODING] = None,
    max_stress: Annotated[list[float] | None, own.MAX_STRESS] = None,
    max_rank_for_stress: Annotated[list[str] | None, own.MAX_RANK] = None,
    min_positional_info: Annotated[float | None, own.MIN_INFO] = None,
    min_support: Annotated[int | None, own.MIN_SUPPORT] = None,
    strict: Annotated[bool | None, own.STRICT] = None,
    config: Annotated[Path | None, own.CONFIG] = None,
    no_config: Annotated[bool, own.NO_CONFIG] = False,
    fmt: Annotated[str, own.FORMAT] = "text",
    junit: Annotated[Path | None, own.JUNIT] = None,
    min_count: Annotated[int | None, own.RULES_MIN_COUNT] = None,
    force: Annotated[bool, own.HIDDEN_FORCE] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    estimation: Estimation = ESTIMATION,
) -> None:
    """CI gate: exit 0 when every rule passes, 1 when one fails, 2 on bad rules or data."""
    from ..render import gate as verdict
    from ..reports.gate import READING_KEYS, build_config, find_config, run_gate

    if junit is not None:
        # Exit 2 (bad rules or data, a signal) replaces the report too: never a stale pass.
        on_error(
            lambda message: verdict.write_junit(verdict.junit_error_xml(corpus, message), junit)
        )
    verdict.check_format(fmt)
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
        verdict.check_junit_path(junit)  # refuse a folder before a pass over the corpus
    # The config file's reading keys, overridden by the options given (build_config merged them).
    analysis = estimation.analysis(min_count)
    report = analyse(
        corpus,
        reading.merged(cfg.reading),
        quiet,
        estimation,
        lambda c, bar: run_gate(c, cfg, analysis, progress=bar),
    )
    if junit is not None:
        verdict.write_junit(report, junit)
    lines = verdict.github_annotations(report) if fmt == "github" else verdict.text_lines(report)
    emit(as_json, lambda: verdict.gate_json(report), "\n".join(lines))
    if not report.passed:
        raise typer.Exit(1)


@app.command()
@reads_corpus
def diff(
    corpus_a: Annotated[str, typer.Argument(help="Corpus A (file or counts .npz).")],
    corpus_b: Annotated[str, typer.Argument(help="Corpus B (file or counts .npz).")],
    reading: Reading,
    encoding: Annotated[list[str] | None, own.DIFF_ENCODING] = None,
    rank: Annotated[int | None, own.DIFF_RANK] = None,
    tolerance: Annotated[float, own.TOLERANCE] = 0.1,
    seed: Annotated[int, own.DIFF_SEED] = 0,
    draws: Annotated[int, own.DRAWS] = 10,
    min_count: own.MinCountOpt = DEFAULT_MIN_COUNT,
    column_b: Annotated[str | None, own.COLUMN_B] = None,
    plot: PlotOpt = None,
    force: PlotForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
) -> None:
    """Geometry drift from corpus A to corpus B (same tokenizer, view and max_len)."""
    from ..render.drift import drift_json, print_drift
    from ..reports.drift import check_draws, corpus_drift, count_pair

    specs = _specs(encoding)
    analysis = analysis_options(min_count, estimator, seed)
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
            a, b, analysis, rank=rank, tolerance=tolerance, encodings=specs, geometry_draws=draws
        )
    warn(drift.warnings)
    emit(as_json, lambda: drift_json(drift), lambda out: print_drift(drift, out))
    write_plots(plot, force, drift=drift)


@app.command("plot")
@reads_corpus
@estimates
def plot_cmd(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, own.PLOT_OUTPUT],
    encoding: Annotated[list[str] | None, own.PLOT_ENCODING] = None,
    min_count: own.MinCountOpt = DEFAULT_MIN_COUNT,
    force: PlotForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    dim: own.EncodingDimOpt = None,
    estimation: Estimation = ESTIMATION,
) -> None:
    """Write PNG plots: Hellinger heatmap, spectrum, MDS trajectory, stress bars (with
    intervals), support."""
    from ..render.plots import write_plots as write
    from ..reports.stress import stress_report

    specs = _specs(encoding)
    analysis = estimation.analysis(min_count)
    check_plots(output, force)
    # details=False: no plot shows the plug-in figures or the noise floor.
    report = analyse(
        corpus,
        reading,
        quiet,
        estimation,
        lambda c, bar: stress_report(c, specs, analysis, dim=dim, progress=bar, details=False),
    )
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
@estimates
def report_cmd(
    corpus: CorpusArg,
    reading: Reading,
    output: Annotated[Path, own.REPORT_OUTPUT],
    encoding: Annotated[list[str] | None, own.REPORT_ENCODING] = None,
    no_plots: Annotated[bool, own.REPORT_NO_PLOTS] = False,
    min_count: own.MinCountOpt = DEFAULT_MIN_COUNT,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    dim: own.EncodingDimOpt = None,
    estimation: Estimation = ESTIMATION,
) -> None:
    """One self-contained HTML page (inline plots, no network) to attach to a PR: what
    'posdiag diagnose' says (intervals, recommendation, spectrum, every warning) and plots."""
    from ..render.html import build_report, write_html
    from ..reports.longctx import diagnose as run_diagnose  # dense, or implicit at long n

    specs = _specs(encoding)
    analysis = estimation.analysis(min_count)
    check_output(output, force)
    d = dim if dim is not None else DEFAULT_DIM
    page = analyse(
        corpus,
        reading,
        quiet,
        estimation,
        # details=False: the page shows no plug-in figure.
        lambda c, bar: build_report(
            run_diagnose(c, specs, analysis, dim=d, progress=bar, details=False), plots=not no_plots
        ),
    )
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
@estimates
def diagnose(
    corpus: CorpusArg,
    reading: Reading,
    encoding: Annotated[list[str] | None, own.DIAGNOSE_ENCODING] = None,
    target: Annotated[float, own.DIAGNOSE_TARGET] = 0.1,
    dim: Annotated[int, own.DIAGNOSE_DIM] = DEFAULT_DIM,
    min_count: own.MinCountOpt = DEFAULT_MIN_COUNT,
    estimation: Estimation = ESTIMATION,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    plot: PlotOpt = None,
    force: PlotForceOpt = False,
) -> None:
    """The theory's checks on a corpus: information, noise floor, shift, rank, recommendation."""
    from ..render.diagnosis import diagnosis_json, print_diagnosis
    from ..reports.analysis import spectrum
    from ..reports.longctx import diagnose as run_diagnose  # dense, or implicit at long n
    from ..reports.stress import StressReport

    specs = _specs(encoding)
    analysis = estimation.analysis(min_count)
    check_float("target", target, 0.0, 1.0, lo_open=True)
    check_int("dim", dim, 1)
    check_plots(plot, force)
    # details: each score's plug-in figure, the JSON only.
    result = analyse(
        corpus,
        reading,
        quiet,
        estimation,
        lambda c, bar: run_diagnose(
            c, specs, analysis, target=target, dim=dim, progress=bar, details=as_json
        ),
    )
    emit(as_json, lambda: diagnosis_json(result), lambda out: print_diagnosis(result, out))
    if plot is not None:
        geo = result.geometry
        if geo is None:
            raise PosdiagError(
                f"--plot: at n_eff = {result.corpus.n_eff:,} the plots need the n x n geometry, "
                "which the long-context path does not build (docs/geometry.md, 'Long "
                "contexts'); the diagnosis above is complete"
            )
        report = StressReport(result.corpus, spectrum(geo), result.encodings, result.warnings)
        write_plots(plot, force, geometry=geo, report=report)


@app.command()
@reads_corpus
def inspect(
    encoding_file: Annotated[str, own.ENCODING_FILE],
    reading: Reading,
    corpus: Annotated[str | None, own.INSPECT_CORPUS] = None,
    tensor: Annotated[str, own.TENSOR] = "",
    collapse_tol: Annotated[float, own.COLLAPSE_TOL] = 0.01,
    seed: Annotated[int, own.INSPECT_SEED] = 0,
    min_count: Annotated[int | None, own.INSPECT_MIN_COUNT] = None,
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
        npz = corpus if is_counts_file(corpus) else None
        plan = inspect_reading(
            encoding_file, meta, reading, min_count, DEFAULT_MIN_COUNT, counts_file=npz is not None
        )
        counted = sharded(corpus, plan.reading, quiet, seed=seed)
        # plain=False: inspect shows no plug-in figure; spectrum=False: it scores the table
        # against the gram and the distances, no eigenpair of the corpus is shown.
        with bootstrap_progress(quiet):
            geo = corpus_geometry(
                counted, plan.min_count, estimator=estimator, seed=seed, plain=False, spectrum=False
            )
        from_file = {k: meta[k] for k in plan.from_file}
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
    output: Annotated[Path, own.SYNTH_OUTPUT],
    mode: Annotated[str, own.SYNTH_MODE] = "drift",
    positions: Annotated[int, own.SYNTH_POSITIONS] = 32,
    vocab: Annotated[int, own.SYNTH_VOCAB] = 200,
    rank: Annotated[int, own.SYNTH_RANK] = 3,
    sequences: Annotated[int, own.SYNTH_SEQUENCES] = 20_000,
    seed: Annotated[int, own.SYNTH_SEED] = 0,
    sharpness: Annotated[float, own.SYNTH_SHARPNESS] = 2.0,
    width: Annotated[float | None, own.SYNTH_WIDTH] = None,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Write the paper's synthetic corpus: smooth low-rank drift, or a shift-equivariant one."""
    from ..synthetic import SynthSpec, synth_distributions, synth_texts

    spec = SynthSpec(mode, positions, vocab, rank, sequences, seed, sharpness, width)
    synth_distributions(spec)  # validates every parameter before anything is written
    check_int("sequences", sequences, 1)
    check_output(output, force)
    with atomic_outputs([output], force) as (tmp,), open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(line + "\n" for line in synth_texts(spec))
    emit(
        as_json,
        {"output": str(output), **{k: getattr(spec, k) for k in spec.__dataclass_fields__}},
        f"wrote {output}: {sequences:,} sequences of {positions} tokens, mode {mode}, "
        f"vocabulary {vocab}, seed {seed}",
    )


@app.command()
def merge(
    inputs: Annotated[list[Path], own.MERGE_INPUTS],
    output: Annotated[Path, own.MERGE_OUTPUT],
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Sum counts files of the same tokenizer, view, max_len and vocabulary."""
    from ..counts.core import load_counts, merge_counts

    _npz_output(output, force)
    names = [str(p) for p in inputs]
    merged = merge_counts([load_counts(p) for p in inputs], names)
    _save_counts(merged, output, force, as_json, f"{len(names)} files, ")


@app.command()
def corpora(as_json: JsonOpt = False) -> None:
    """List the Hugging Face data set presets (use the name as the corpus)."""
    from ..render.corpora import corpora_json, print_corpora

    rows = corpora_json()
    emit(as_json, rows, lambda out: print_corpora(rows, out))


@app.command()
def docs(
    topic: Annotated[str | None, own.DOCS_TOPIC] = None,
    path: Annotated[bool, own.DOCS_PATH] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print a documentation page installed with posdiag (Markdown), or list them."""
    if topic is not None:
        found = page(topic)
        text = str(found.path) if path else found.text().rstrip("\n")
        emit(as_json, found.json, text)
        return
    rows = pages()
    text = str(rows[0].path.parent) if path else listing(rows)
    emit(as_json, lambda: [p.json(text=False) for p in rows], text)


@app.callback()
def _root(
    version: Annotated[bool, own.ROOT_VERSION] = False,
    max_memory: Annotated[str | None, own.ROOT_MAX_MEMORY] = None,
) -> None:
    """posdiag: corpus geometry diagnostics for positional encodings."""
    set_max_memory(max_memory)


def main() -> None:
    exit_on_signals_at_shutdown()  # a signal during the interpreter's shutdown: its exit code
    app(prog_name="posdiag")


if __name__ == "__main__":  # pragma: no cover
    main()
