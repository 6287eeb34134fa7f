"""The `traceview` command: the analysis commands (each a thin parse -> analyse -> render), every command module
registered, and the one place errors become exit codes (docs/metrics.md, "Errors and exit codes").

Exit codes: 0 ok; 1 a `--fail-on` threshold was crossed; 2 bad input or usage (one line, naming the file or the
option, and for a usage error the help hint); 3 an internal error (one line naming a log file that holds the
traceback); 4 the run was analysed but some inputs were skipped (each named). Precedence when several hold:
2 (nothing analysed) is final; otherwise 1 outranks 4. Bare `traceview` is a usage error (2) that lists the
commands' help hint; `traceview --help` exits 0.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from traceview import __version__
from traceview.cli.app import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_THRESHOLD,
    ClickError,
    CommandLineError,
    analyse,
    app,
    check_thresholds,
    command_names,
    finish,
    gate,
    load,
    model_options,
    partial,
    print_json,
    report_skipped,
    report_warnings,
    say,
    stdout_console,
    with_nccl_logs,
    write_json_text,
    write_text,
)
from traceview.cli.options import (
    AlphaOpt,
    BandwidthOpt,
    CommPatternOpt,
    ComputePatternOpt,
    DtypeOpt,
    EfficiencyOpt,
    ExecutorOpt,
    FailOnOpt,
    GpusPerNodeOpt,
    LocalBatchOpt,
    MaxTraceBytesOpt,
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
    run_spec,
)
from traceview.core.errors import PartialRun, ThresholdCrossed, TraceviewError, UsageError
from traceview.core.sanitize import printable

__all__ = [  # the shared helpers stay importable from here, where they used to live
    "EXIT_OK",
    "EXIT_PARTIAL",
    "analyse",
    "app",
    "check_thresholds",
    "finish",
    "gate",
    "load",
    "main",
    "print_json",
    "stdout_console",
    "with_nccl_logs",
]

COMMAND_MODULES: tuple[str, ...] = (
    # Modules whose commands join `traceview.cli.app.app` when imported; one line each.
    "traceview.cli.export",
    "traceview.cli.compare",
    "traceview.cli.record",
)


@app.command()
def summary(
    runs: RunsArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the versioned JSON summary instead.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
    max_trace_bytes: MaxTraceBytesOpt = None,
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
    options = with_nccl_logs(
        model_options(comm_pattern, virtual_stages, *model, compute_pattern=compute_pattern), spec, nccl_log
    )
    analysis = analyse(spec, options, workers, executor, ray_address, quiet, max_trace_bytes)
    report_skipped(analysis)
    if json_output:
        from traceview.reports.json_out import render_json

        write_json_text(render_json(analysis))
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
    compute_pattern: ComputePatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
    max_trace_bytes: MaxTraceBytesOpt = None,
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
    options = with_nccl_logs(
        model_options(comm_pattern, virtual_stages, *model, compute_pattern=compute_pattern), spec, nccl_log
    )
    analysis = analyse(spec, options, workers, executor, ray_address, quiet, max_trace_bytes)
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
    compute_pattern: ComputePatternOpt = None,
    workers: WorkersOpt = None,
    max_trace_bytes: MaxTraceBytesOpt = None,
) -> None:
    """Every communication kernel linked to its collective call: bytes, busbw and the tables per group."""
    from traceview.budget.time_budget import classified_events
    from traceview.collectives.tables import analyze_collectives
    from traceview.events.kernel_names import user_patterns

    patterns = user_patterns(tuple(comm_pattern or ()), tuple(compute_pattern or ()))
    loaded = load(run_spec(runs), workers, max_trace_bytes)
    report_skipped(loaded)
    report_warnings(loaded)
    result = analyze_collectives(loaded, classified_events(loaded, patterns))
    if json_output:
        from traceview.reports.json_out import collectives_document

        print_json(collectives_document(result))
    else:
        from traceview.reports.collectives_terminal import render_collectives

        render_collectives(result, stdout_console(200))
    partial(loaded)


@app.command()
def nccl(
    logs: Annotated[list[Path], typer.Argument(help="NCCL_DEBUG=INFO log file(s), plain text or .gz.")],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the logs' summary as JSON instead.")
    ] = False,
) -> None:
    """Summarise NCCL_DEBUG logs: versions, communicators, transports (degraded in red), collectives, warnings."""
    from traceview.nccl.join import join_nccl
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
    compute_pattern: ComputePatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
    max_trace_bytes: MaxTraceBytesOpt = None,
) -> None:
    """Across ranks: matched collectives, host clock offsets, skew, wait, and the straggler(s) with a cause."""
    from traceview.across_ranks.analysis import run_cross_rank
    from traceview.budget.time_budget import all_step_windows, classified_events, time_budget
    from traceview.collectives.kernels import comm_kernels
    from traceview.events.kernel_names import user_patterns

    check_thresholds(fail_on)
    loaded = load(run_spec(runs), workers, max_trace_bytes)
    report_skipped(loaded)
    report_warnings(loaded)
    events, windows = (
        classified_events(loaded, user_patterns(tuple(comm_pattern or ()), tuple(compute_pattern or ()))),
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
    partial(loaded)


for _module in COMMAND_MODULES:
    importlib.import_module(_module)


def _usage_line(error: Any) -> str:
    command = error.ctx.command_path if error.ctx is not None else "traceview"
    return f"traceview: error: {printable(error.format_message())} (see '{printable(command)} --help')"


def _command_path() -> str:
    """`traceview COMMAND` as the command line named it (for a usage error's help hint)."""
    named = next((arg for arg in sys.argv[1:] if arg in command_names()), None)
    return f"traceview {named}" if named else "traceview"


def _environment_problem(error: OSError | MemoryError) -> str:
    """What an error of the operating system says, in one line naming the file where it has one."""
    if isinstance(error, MemoryError):
        return "out of memory (use --max-trace-bytes, or fewer --workers)"
    where = f"{printable(error.filename)}: " if error.filename is not None else ""
    return f"{where}{printable(error.strerror or error)}"


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
    if isinstance(error, UsageError):
        say(f"traceview: error: {printable(error)} (see '{_command_path()} --help')")
        return EXIT_INPUT
    if isinstance(error, TraceviewError):
        say(f"traceview: error: {printable(error)}")
        return EXIT_INPUT
    if isinstance(error, OSError | MemoryError):  # the machine refused (a path too long, a full disk, memory)
        say(f"traceview: error: {_environment_problem(error)}")
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
