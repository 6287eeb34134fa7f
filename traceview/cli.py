"""The `traceview` command: each subcommand is a thin parse -> analyse -> render.

Exit codes: 0 ok; 1 a `--fail-on` threshold was crossed; 2 bad input or usage (one line, naming the file or the
option); 3 an internal error (one line naming a log file that holds the traceback); 4 the run was analysed but
some inputs were skipped (each named). A crossed threshold (1) outranks a partial run (4).
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from traceview import __version__
from traceview.analysis import AnalysisOptions, RunAnalysis
from traceview.cli_options import (
    AlphaOpt,
    BandwidthOpt,
    CommPatternOpt,
    DtypeOpt,
    EfficiencyOpt,
    ExecutorOpt,
    FailOnOpt,
    GpusPerNodeOpt,
    LocalBatchOpt,
    NcclLogOpt,
    NicOpt,
    ParamsOpt,
    PeakFlopsOpt,
    QuietOpt,
    RanksPerHostOpt,
    RayAddressOpt,
    RunsArg,
    VirtualStagesOpt,
    WorkersOpt,
    nccl_log_paths,
    options_from,
    run_spec,
    with_model,
)
from traceview.errors import ThresholdCrossed, TraceviewError, UsageError
from traceview.inputs import load_run
from traceview.model import Run
from traceview.sanitize import printable
from traceview.thresholds import crossings, parse_threshold

EXIT_OK, EXIT_THRESHOLD, EXIT_INPUT, EXIT_INTERNAL, EXIT_PARTIAL = 0, 1, 2, 3, 4


def _click_exceptions() -> Any:
    """click's exception module: typer >= 0.16 vendors click as `typer._click`, older typer depends on it."""
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("neither typer._click nor click is installed")  # pragma: no cover


_CLICK = _click_exceptions()
CommandLineError: Any = _CLICK.UsageError
"""click's usage error (unknown command or option, missing or extra argument, bad value): exit 2."""
ClickError: Any = _CLICK.ClickException

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    help="Where the time went in a distributed training job.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
stderr = Console(stderr=True, soft_wrap=True, highlight=False)  # one line per message, never wrapped


def say(message: str) -> None:
    """One line on stderr, input-derived text already made printable by the caller."""
    stderr.print(message, markup=False, highlight=False)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"traceview {__version__}\n")
        raise typer.Exit(EXIT_OK)


@app.callback(invoke_without_command=True)
def _root(
    context: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Where the time went in a distributed training job."""
    if context.invoked_subcommand is None:
        raise CommandLineError("no command given", ctx=context)


def stdout_console(width_when_piped: int = 160) -> Console:
    """A console for tables on stdout: the terminal's width, or a fixed one when piped."""
    return Console(width=None if sys.stdout.isatty() else width_when_piped)


def print_json(document: Any) -> None:
    """Write `document` to stdout as indented JSON."""
    import msgspec

    sys.stdout.write(msgspec.json.format(msgspec.json.encode(document), indent=2).decode() + "\n")


def load(spec: str | Sequence[str], workers: int | None = None) -> Run:
    """Parse the run in memory (the commands that need every event: collectives, stragglers)."""
    return load_run(spec, workers=workers)  # type: ignore[arg-type]


def analyse(
    spec: str | Sequence[str],
    options: AnalysisOptions,
    workers: int | None,
    executor: str,
    ray_address: str | None,
    quiet: bool,
) -> RunAnalysis:
    """The run's analysis through the map/reduce pipeline, with the load's progress bar on stderr."""
    from traceview.pipeline import analyze_files
    from traceview.progress import load_progress

    with load_progress(stderr, quiet) as progress:
        return analyze_files(spec, options, workers, executor, progress, ray_address)


def check_thresholds(fail_on: list[str] | None) -> None:
    """Refuse a malformed `--fail-on` before any work is done."""
    for text in fail_on or ():
        parse_threshold(text)


def gate(figures: Mapping[str, float | None], fail_on: list[str] | None) -> None:
    """Raise `ThresholdCrossed` when a `--fail-on` threshold fires on `figures`."""
    fired = crossings([parse_threshold(text) for text in fail_on or ()], figures)
    if fired:
        detail = "; ".join(f"{c.threshold} (measured {c.measured:.4g})" for c in fired)
        raise ThresholdCrossed(f"threshold crossed: {detail}")


class PartialRun(TraceviewError):
    """The run was analysed, but some inputs were skipped (exit code 4)."""


def finish(analysis: RunAnalysis, fail_on: list[str] | None) -> None:
    """After rendering: the threshold gate (exit 1), then a partial run (exit 4), each in one line."""
    gate(analysis.gate_figures(), fail_on)
    skipped = [*analysis.header.skipped, *(analysis.options.nccl_skipped or ())]
    if skipped:
        raise PartialRun(f"analysed without {len(skipped)} input(s) that could not be read (listed above)")


def with_nccl_logs(
    options: AnalysisOptions, spec: str | Sequence[str], given: list[Path] | None
) -> AnalysisOptions:
    """`options` with the NCCL logs parsed one by one; a log that cannot be read is skipped and named."""
    logs, skipped = [], []
    for path in nccl_log_paths(spec, given):
        from traceview.parsers import nccl_log  # only when there is a log: its import costs ~10 ms

        try:
            logs.append(nccl_log.parse(path))
        except TraceviewError as exc:
            skipped.append((str(path), str(exc)))
            say(f"traceview: warning: NCCL log skipped: {printable(exc)}")
    return replace(options, nccl_logs=tuple(logs), nccl_skipped=tuple(skipped))


def report_skipped(analysis: RunAnalysis) -> None:
    """Name every input the run was analysed without, one line each, on stderr."""
    for path, reason in analysis.header.skipped:
        say(f"traceview: warning: skipped {printable(path)}: {printable(reason)}")


def write_text(path: Path, text: str) -> None:
    """Write an output file; a path that cannot be written is a usage error naming it."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"-o {printable(path)}: cannot write: {exc.strerror or exc}") from exc


def model_options(comm_pattern: list[str] | None, virtual_stages: int, *model: Any) -> AnalysisOptions:
    """The analysis options of the command line (the model's inputs checked)."""
    return with_model(options_from(comm_pattern, virtual_stages), *model)


@app.command()
def summary(
    runs: RunsArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the versioned JSON summary instead.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    quiet: QuietOpt = False,
    nccl_log: NcclLogOpt = None,
    virtual_stages: VirtualStagesOpt = 1,
    params: ParamsOpt = None,
    local_batch: LocalBatchOpt = None,
    peak_flops: PeakFlopsOpt = None,
    efficiency: EfficiencyOpt = None,
    bandwidth: BandwidthOpt = None,
    alpha: AlphaOpt = None,
    nic: NicOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    dtype: DtypeOpt = None,
) -> None:
    """Terminal summary of a run: the verdict first, then the time budget."""
    check_thresholds(fail_on)
    spec = run_spec(runs)
    model = (params, local_batch, peak_flops, efficiency, bandwidth, alpha, nic, gpus_per_node, dtype)
    options = with_nccl_logs(model_options(comm_pattern, virtual_stages, *model), spec, nccl_log)
    analysis = analyse(spec, options, workers, executor, ray_address, quiet)
    report_skipped(analysis)
    if json_output:
        from traceview.reports.json_out import render_json

        sys.stdout.write(render_json(analysis) + "\n")
    else:
        from traceview.reports.terminal import render_summary

        render_summary(analysis, stdout_console())
    finish(analysis, fail_on)


@app.command()
def report(
    runs: RunsArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the HTML report.")] = Path(
        "report.html"
    ),
    plotlyjs: Annotated[
        str, typer.Option("--plotlyjs", help="'inline' (default, works offline) or 'cdn'.")
    ] = "inline",
    open_page: Annotated[
        bool, typer.Option("--open", help="Open the report in the default browser once written.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    quiet: QuietOpt = False,
    nccl_log: NcclLogOpt = None,
    virtual_stages: VirtualStagesOpt = 1,
    params: ParamsOpt = None,
    local_batch: LocalBatchOpt = None,
    peak_flops: PeakFlopsOpt = None,
    efficiency: EfficiencyOpt = None,
    bandwidth: BandwidthOpt = None,
    alpha: AlphaOpt = None,
    nic: NicOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    dtype: DtypeOpt = None,
) -> None:
    """Write the self-contained HTML report of a run."""
    from traceview.reports.html import render_html

    if plotlyjs not in ("inline", "cdn"):
        raise UsageError(f"--plotlyjs {printable(plotlyjs)!r}: takes 'inline' or 'cdn'")
    check_thresholds(fail_on)
    spec = run_spec(runs)
    model = (params, local_batch, peak_flops, efficiency, bandwidth, alpha, nic, gpus_per_node, dtype)
    options = with_nccl_logs(model_options(comm_pattern, virtual_stages, *model), spec, nccl_log)
    analysis = analyse(spec, options, workers, executor, ray_address, quiet)
    report_skipped(analysis)
    write_text(output, render_html(analysis, plotlyjs=plotlyjs))
    say(
        f"wrote {printable(output)} ({output.stat().st_size / 1e6:.1f} MB): "
        f"{printable(analysis.verdict.sentence, 1000)}"
    )
    if open_page:
        import webbrowser

        webbrowser.open(output.resolve().as_uri())
    finish(analysis, fail_on)


@app.command()
def collectives(
    runs: RunsArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the collectives as JSON instead.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Every communication kernel linked to its collective call: bytes, busbw and the tables per group."""
    from traceview.budget import classified_events
    from traceview.collective_tables import analyze_collectives
    from traceview.kernel_names import user_patterns

    patterns = user_patterns(tuple(comm_pattern or ()))
    loaded = load(run_spec(runs), workers)
    result = analyze_collectives(loaded, classified_events(loaded, patterns))
    if json_output:
        from traceview.reports.json_out import collectives_document

        print_json(collectives_document(result))
    else:
        from traceview.reports.collectives_terminal import render_collectives

        render_collectives(result, stdout_console(200))


@app.command()
def nccl(
    logs: Annotated[list[Path], typer.Argument(help="NCCL_DEBUG=INFO log file(s), plain text or .gz.")],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the logs' summary as JSON instead.")
    ] = False,
) -> None:
    """Summarise NCCL_DEBUG logs: versions, communicators, transports (degraded in red), collectives, warnings."""
    from traceview.nccl_join import join_nccl
    from traceview.parsers import nccl_log

    parsed, skipped = [], []
    for path in logs:
        try:
            parsed.append(nccl_log.parse(path))
        except TraceviewError as exc:
            if len(logs) == 1:
                raise
            skipped.append((str(path), str(exc)))
            say(f"traceview: warning: NCCL log skipped: {printable(exc)}")
    if json_output:
        from traceview.reports.json_out import nccl_document

        print_json(nccl_document(join_nccl(None, parsed, skipped)))
    else:
        from traceview.reports.nccl_terminal import render_nccl

        console = stdout_console(200)
        for log in parsed:
            render_nccl(log, console)
    if skipped:
        raise PartialRun(f"read without {len(skipped)} log(s) that could not be read (listed above)")


@app.command()
def stragglers(
    runs: RunsArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the across-ranks JSON object instead.")
    ] = False,
    ranks_per_host: RanksPerHostOpt = None,
    comm_pattern: CommPatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Across ranks: matched collectives, host clock offsets, skew, wait, and the straggler(s) with a cause."""
    from traceview.budget import all_step_windows, classified_events, time_budget
    from traceview.collectives import comm_kernels
    from traceview.crossrank import run_cross_rank
    from traceview.kernel_names import user_patterns

    check_thresholds(fail_on)
    loaded = load(run_spec(runs), workers)
    events, windows = (
        classified_events(loaded, user_patterns(tuple(comm_pattern or ()))),
        all_step_windows(loaded),
    )
    result = run_cross_rank(
        loaded, comm_kernels(loaded, events), events, windows, time_budget(events, windows), ranks_per_host
    )
    if json_output:
        from traceview.reports.json_out import crossrank_document

        print_json(crossrank_document(result))
    else:
        from traceview.reports.crossrank_terminal import render_crossrank

        render_crossrank(result, stdout_console(200))
    gate(result.gate_figures(), fail_on)


@app.command()
def export(
    runs: RunsArg,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Where to write the trace (.json, or .json.gz compressed).")
    ] = Path("run.perfetto.json.gz"),
    ranks: Annotated[
        str | None, typer.Option("--ranks", help="Ranks to export, e.g. 0-7,12 (default all).")
    ] = None,
    steps: Annotated[
        str | None, typer.Option("--steps", help="Steps to export, e.g. 3-5 (default all).")
    ] = None,
    window: Annotated[
        str | None,
        typer.Option("--window", help="START:END in ms since the run's first step, aligned clock."),
    ] = None,
    max_events: Annotated[
        int, typer.Option("--max-events", min=1, help="Events written at most (Perfetto loads about 2 GB).")
    ] = 5_000_000,
    comm_pattern: CommPatternOpt = None,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
    ranks_per_host: RanksPerHostOpt = None,
) -> None:
    """Write the whole run as one Chrome/Perfetto trace on the aligned clock (open it in ui.perfetto.dev)."""
    from traceview.export import ExportBounds, export_run, parse_ranges, parse_window

    bounds = ExportBounds(
        ranks=parse_ranges(ranks, "--ranks") if ranks else None,
        steps=parse_ranges(steps, "--steps") if steps else None,
        window_ms=parse_window(window) if window else None,
        max_events=max_events,
    )
    options = replace(options_from(comm_pattern), ranks_per_host=ranks_per_host)
    analysis = analyse(run_spec(runs), options, workers, "local", None, quiet)
    report_skipped(analysis)
    try:
        stats = export_run(analysis, output, bounds)
    except OSError as exc:
        raise UsageError(f"-o {printable(output)}: cannot write: {exc.strerror or exc}") from exc
    cut = f"; stopped at --max-events {max_events}" if stats.truncated else ""
    say(
        f"wrote {printable(output)}: {len(stats.ranks)} rank(s), {stats.events} events, "
        f"{stats.flows} collective flows, aligned clock{cut}"
    )
    finish(analysis, None)


def _usage_line(error: Any) -> str:
    command = error.ctx.command_path if error.ctx is not None else "traceview"
    return f"traceview: error: {printable(error.format_message())} (see '{printable(command)} --help')"


def _crash_log(error: BaseException) -> Path:
    """Write the traceback of an internal error to a file of its own; returns its path."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    handle, name = tempfile.mkstemp(prefix=f"traceview-crash-{stamp}-", suffix=".log")
    with os.fdopen(handle, "w", encoding="utf-8") as log:
        log.write(f"traceview {__version__}, {sys.argv!r}\n")
        log.write("".join(traceback.format_exception(error)))
    return Path(name)


def _exit_code(error: BaseException) -> int:
    """Print what `error` means in one line and return the exit code it maps to."""
    if isinstance(error, ThresholdCrossed):
        say(f"traceview: {printable(error)}")
        return EXIT_THRESHOLD
    if isinstance(error, PartialRun):
        say(f"traceview: warning: {printable(error)}")
        return EXIT_PARTIAL
    if isinstance(error, TraceviewError):
        say(f"traceview: error: {printable(error)}")
        return EXIT_INPUT
    if isinstance(error, CommandLineError):
        say(_usage_line(error))
        return EXIT_INPUT
    if isinstance(error, ClickError):
        say(f"traceview: error: {printable(error.format_message())}")
        return EXIT_INPUT
    if isinstance(error, typer.Abort | KeyboardInterrupt):
        say("traceview: interrupted")
        return 130
    log = _crash_log(error)
    say(f"traceview: internal error: {type(error).__name__}: {printable(error, 300)} (traceback in {log})")
    return EXIT_INTERNAL


from traceview import cli_compare  # noqa: E402, F401  (registers `compare` and `trend` on `app`)


def main() -> None:
    """Console entry point: run the app and map errors to exit codes, one line each, never a traceback."""
    try:
        code = app(standalone_mode=False, prog_name="traceview")
    except typer.Exit as done:
        code = done.exit_code
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else EXIT_INPUT
    except BaseException as error:
        if os.environ.get("TRACEVIEW_DEBUG") and not isinstance(error, TraceviewError | ClickError):
            raise
        code = _exit_code(error)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
