"""The `traceview` command: each subcommand is a thin parse -> analyse -> render.

Exit codes: 0 ok; 1 a `--fail-on` threshold was crossed; 2 bad input or usage; 3 an internal error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from traceview.analysis import AnalysisOptions, analyze
from traceview.cli_options import (
    AlphaOpt,
    BandwidthOpt,
    CommPatternOpt,
    DtypeOpt,
    EfficiencyOpt,
    FailOnOpt,
    GpusPerNodeOpt,
    LocalBatchOpt,
    NcclLogOpt,
    NicOpt,
    ParamsOpt,
    PeakFlopsOpt,
    RanksPerHostOpt,
    RunArg,
    VirtualStagesOpt,
    WorkersOpt,
    nccl_log_paths,
    options_from,
    with_model,
)
from traceview.errors import ThresholdCrossed, TraceviewError
from traceview.inputs import load_run
from traceview.model import Run
from traceview.thresholds import crossings, parse_threshold

EXIT_OK, EXIT_THRESHOLD, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Where the time went in a distributed training job."
)
stderr = Console(stderr=True, soft_wrap=True)  # one line per message, never wrapped


def stdout_console(width_when_piped: int = 160) -> Console:
    """A console for tables on stdout: the terminal's width, or a fixed one when piped."""
    return Console(width=None if sys.stdout.isatty() else width_when_piped)


def print_json(document: Any) -> None:
    """Write `document` to stdout as indented JSON."""
    import msgspec

    sys.stdout.write(msgspec.json.format(msgspec.json.encode(document), indent=2).decode() + "\n")


def load(run_spec: str, workers: int | None = None) -> Run:
    """Parse the run, with a progress bar on stderr when it is a terminal."""
    if not stderr.is_terminal:
        return load_run(run_spec, workers=workers)
    from rich.progress import Progress

    with Progress(console=stderr, transient=True) as progress:
        task = progress.add_task("reading traces", total=None)
        return load_run(
            run_spec,
            workers=workers,
            progress=lambda done, total: progress.update(task, completed=done, total=total),
        )


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


def with_nccl_logs(options: AnalysisOptions, run_spec: str, given: list[Path] | None) -> AnalysisOptions:
    """`options` with the NCCL logs parsed one by one; a log that cannot be read is skipped with a warning."""
    logs, skipped = [], []
    for path in nccl_log_paths(run_spec, given):
        from traceview.parsers import nccl_log  # only when there is a log: its import costs ~10 ms

        try:
            logs.append(nccl_log.parse(path))
        except TraceviewError as exc:
            skipped.append((str(path), str(exc)))
            stderr.print(f"traceview: warning: NCCL log skipped: {exc}", markup=False, highlight=False)
    return replace(options, nccl_logs=tuple(logs), nccl_skipped=tuple(skipped))


@app.command()
def summary(
    run: RunArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the versioned JSON summary instead.")
    ] = False,
    comm_pattern: CommPatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
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
    model = (params, local_batch, peak_flops, efficiency, bandwidth, alpha, nic, gpus_per_node, dtype)
    options = with_model(options_from(comm_pattern, virtual_stages), *model)
    analysis = analyze(load(run, workers), with_nccl_logs(options, run, nccl_log))
    if json_output:
        from traceview.reports.json_out import render_json

        sys.stdout.write(render_json(analysis) + "\n")
    else:
        from traceview.reports.terminal import render_summary

        render_summary(analysis, stdout_console())
    gate(analysis.gate_figures(), fail_on)


@app.command()
def report(
    run: RunArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the HTML report.")] = Path(
        "report.html"
    ),
    plotlyjs: Annotated[
        str, typer.Option("--plotlyjs", help="'inline' (default, works offline) or 'cdn'.")
    ] = "inline",
    comm_pattern: CommPatternOpt = None,
    fail_on: FailOnOpt = None,
    workers: WorkersOpt = None,
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
        raise typer.BadParameter("--plotlyjs takes 'inline' or 'cdn'")
    check_thresholds(fail_on)
    model = (params, local_batch, peak_flops, efficiency, bandwidth, alpha, nic, gpus_per_node, dtype)
    options = with_model(options_from(comm_pattern, virtual_stages), *model)
    analysis = analyze(load(run, workers), with_nccl_logs(options, run, nccl_log))
    output.write_text(render_html(analysis, plotlyjs=plotlyjs), encoding="utf-8")
    stderr.print(
        f"wrote {output} ({output.stat().st_size / 1e6:.1f} MB): {analysis.verdict.sentence}",
        highlight=False,
        markup=False,
    )
    gate(analysis.gate_figures(), fail_on)


@app.command()
def collectives(
    run: RunArg,
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
    loaded = load(run, workers)
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

    parsed = [nccl_log.parse(path) for path in logs]
    if json_output:
        from traceview.reports.json_out import nccl_document

        print_json(nccl_document(join_nccl(None, parsed)))
        return
    from traceview.reports.nccl_terminal import render_nccl

    console = stdout_console(200)
    for log in parsed:
        render_nccl(log, console)


@app.command()
def stragglers(
    run: RunArg,
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
    loaded = load(run, workers)
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


from traceview import cli_compare  # noqa: E402, F401  (registers `compare` and `trend` on `app`)


def main() -> None:
    """Console entry point: run the app and map errors to exit codes, one line each, never a traceback."""
    try:
        app(standalone_mode=False)
    except ThresholdCrossed as exc:
        stderr.print(f"traceview: {exc}", markup=False, highlight=False)
        sys.exit(EXIT_THRESHOLD)
    except TraceviewError as exc:
        stderr.print(f"traceview: error: {exc}", markup=False, highlight=False)
        sys.exit(EXIT_INPUT)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code if isinstance(code, int) else EXIT_INPUT)
    except (typer.BadParameter, typer.Abort) as exc:
        stderr.print(f"traceview: error: {exc}", markup=False, highlight=False)
        sys.exit(EXIT_INPUT)
    except Exception as exc:
        if os.environ.get("TRACEVIEW_DEBUG"):
            raise
        stderr.print(
            f"traceview: internal error: {type(exc).__name__}: {exc} (TRACEVIEW_DEBUG=1 shows the traceback)",
            markup=False,
            highlight=False,
        )
        sys.exit(EXIT_INTERNAL)
