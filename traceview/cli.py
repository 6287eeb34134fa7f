"""The `traceview` command: each subcommand is a thin parse -> analyse -> render.

Exit codes: 0 ok; 1 a `--fail-on` threshold was crossed; 2 bad input or usage; 3 an internal error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from traceview.analysis import AnalysisOptions, RunAnalysis, analyze
from traceview.errors import ThresholdCrossed, TraceviewError
from traceview.inputs import load_run
from traceview.model import Run
from traceview.thresholds import crossings, parse_threshold

EXIT_OK, EXIT_THRESHOLD, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Where the time went in a distributed training job."
)
stderr = Console(stderr=True, soft_wrap=True)  # one line per message, never wrapped

RunArg = Annotated[str, typer.Argument(help="A trace file, a folder of per-rank traces, or a glob.")]
CommPatternOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--comm-pattern", help="Extra regex (or LIBRARY=REGEX) naming communication kernels; repeatable."
    ),
]
FailOnOpt = Annotated[
    list[str] | None,
    typer.Option("--fail-on", help="Exit 1 when a figure crosses it, e.g. 'exposed_gamma>0.5'; repeatable."),
]
WorkersOpt = Annotated[
    int | None, typer.Option("--workers", help="Processes for parsing ranks (default: CPUs).")
]


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


VirtualStagesOpt = Annotated[
    int, typer.Option("--virtual-stages", help="Model chunks per pipeline stage (V of the bubble theory).")
]


def options_from(comm_pattern: list[str] | None, virtual_stages: int = 1) -> AnalysisOptions:
    """Analysis options from the command line."""
    return AnalysisOptions(comm_patterns=tuple(comm_pattern or ()), virtual_stages=virtual_stages)


ParamsOpt = Annotated[
    float | None,
    typer.Option("--params", help="Model parameters P (default: gradient all-reduce elements per step)."),
]
LocalBatchOpt = Annotated[
    float | None,
    typer.Option("--local-batch", help="Local batch b per worker: examples, or tokens for a transformer."),
]
PeakFlopsOpt = Annotated[
    str | None,
    typer.Option(
        "--peak-flops", help="Peak dense FLOP/s per GPU, e.g. 312T or 312e12 (default: the hardware table)."
    ),
]
EfficiencyOpt = Annotated[
    float | None,
    typer.Option("--efficiency", help="Share of peak FLOP/s sustained: R = peak x efficiency (default 0.5)."),
]
BandwidthOpt = Annotated[
    str | None,
    typer.Option("--bandwidth", help="B per GPU, one direction, bytes/s: INTRA[,INTER], e.g. 300G,25G."),
]
AlphaOpt = Annotated[
    str | None,
    typer.Option("--alpha", help="Link latency per step in microseconds: INTRA[,INTER], e.g. 1,5."),
]
NicOpt = Annotated[
    str | None,
    typer.Option("--nic", help="NIC of groups spanning nodes, e.g. ib_ndr, roce_400 (default ib_hdr)."),
]
GpusPerNodeOpt = Annotated[
    int | None,
    typer.Option(
        "--gpus-per-node",
        min=1,
        help="GPUs per node: which groups span nodes (default: trace hostnames, else 8).",
    ),
]
DtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        help="Compute dtype for the peak FLOP/s: fp32, tf32, bf16, fp16, fp8 (default: the gradients').",
    ),
]


def with_model(
    options: AnalysisOptions,
    params: float | None = None,
    local_batch: float | None = None,
    peak_flops: str | None = None,
    efficiency: float | None = None,
    bandwidth: str | None = None,
    alpha: str | None = None,
    nic: str | None = None,
    gpus_per_node: int | None = None,
    dtype: str | None = None,
) -> AnalysisOptions:
    """`options` with the alpha-beta model's inputs from the command line (docs/metrics.md, "Predicted gamma")."""
    from dataclasses import replace

    from traceview.prediction_inputs import PredictionOptions, parse_pair, parse_quantity

    intra_b, inter_b = parse_pair(bandwidth, "--bandwidth") if bandwidth else (None, None)
    intra_a, inter_a = parse_pair(alpha, "--alpha", 1e-6) if alpha else (None, None)
    for value, name in ((params, "--params"), (local_batch, "--local-batch")):
        if value is not None and value <= 0:
            raise typer.BadParameter(f"{name} must be positive, got {value}")
    if efficiency is not None and not 0 < efficiency <= 1:
        raise typer.BadParameter(f"--efficiency must be in (0, 1], got {efficiency}")
    model = PredictionOptions(
        params=params, local_batch=local_batch, peak_flops=parse_quantity(peak_flops, "--peak-flops") if peak_flops else None,
        efficiency=efficiency, bandwidth_Bps=intra_b, inter_bandwidth_Bps=inter_b, alpha_s=intra_a, inter_alpha_s=inter_a,
        nic=nic, dtype=dtype, link_overrides=options.prediction.link_overrides,
    )  # fmt: skip
    return replace(options, prediction=model, ranks_per_host=gpus_per_node or options.ranks_per_host)


def gate(analysis: RunAnalysis, fail_on: list[str] | None) -> None:
    """Raise `ThresholdCrossed` when a `--fail-on` threshold fires."""
    thresholds = [parse_threshold(text) for text in fail_on or ()]
    fired = crossings(thresholds, analysis.gate_figures())
    if fired:
        detail = "; ".join(f"{c.threshold} (measured {c.measured:.4g})" for c in fired)
        raise ThresholdCrossed(f"threshold crossed: {detail}")


NcclLogOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--nccl-log",
        help="An NCCL_DEBUG=INFO log to join to the traces; repeatable (logs in the run folder are found too).",
    ),
]
NCCL_LOG_SUFFIXES, NCCL_LOG_PROBE_BYTES = (".log", ".txt", ".out"), 64 * 1024


def nccl_log_paths(run_spec: str, given: list[Path] | None) -> list[Path]:
    """The logs given, then the run folder's files ending .log/.txt/.out whose first 64 KB say `NCCL INFO`."""
    found = list(given or ())
    folder = Path(run_spec)
    if folder.is_dir():
        for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in NCCL_LOG_SUFFIXES):
            with path.open("rb") as handle:
                if b"NCCL INFO" in handle.read(NCCL_LOG_PROBE_BYTES) and path not in found:
                    found.append(path)
    return found


def with_nccl_logs(options: AnalysisOptions, run_spec: str, given: list[Path] | None) -> AnalysisOptions:
    """`options` with the NCCL logs parsed one by one; a log that cannot be read is skipped with a warning."""
    from dataclasses import replace

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
    for text in fail_on or ():
        parse_threshold(text)
    model = (params, local_batch, peak_flops, efficiency, bandwidth, alpha, nic, gpus_per_node, dtype)
    options = with_model(options_from(comm_pattern, virtual_stages), *model)
    analysis = analyze(load(run, workers), with_nccl_logs(options, run, nccl_log))
    if json_output:
        from traceview.reports.json_out import render_json

        sys.stdout.write(render_json(analysis) + "\n")
    else:
        from traceview.reports.terminal import render_summary

        render_summary(analysis, Console(width=None if sys.stdout.isatty() else 160))
    gate(analysis, fail_on)


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
    for text in fail_on or ():
        parse_threshold(text)
    model = (params, local_batch, peak_flops, efficiency, bandwidth, alpha, nic, gpus_per_node, dtype)
    options = with_model(options_from(comm_pattern, virtual_stages), *model)
    analysis = analyze(load(run, workers), with_nccl_logs(options, run, nccl_log))
    output.write_text(render_html(analysis, plotlyjs=plotlyjs), encoding="utf-8")
    stderr.print(
        f"wrote {output} ({output.stat().st_size / 1e6:.1f} MB): {analysis.verdict.sentence}",
        highlight=False,
        markup=False,
    )
    gate(analysis, fail_on)


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
        import msgspec

        from traceview.reports.json_out import collectives_document

        sys.stdout.write(
            msgspec.json.format(msgspec.json.encode(collectives_document(result)), indent=2).decode() + "\n"
        )
    else:
        from traceview.reports.collectives_terminal import render_collectives

        render_collectives(result, Console(width=None if sys.stdout.isatty() else 200))


@app.command()
def nccl(
    logs: Annotated[list[Path], typer.Argument(help="NCCL_DEBUG=INFO log file(s), plain text or .gz.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print the logs' summary as JSON instead.")] = False,
) -> None:
    """Summarise NCCL_DEBUG logs: versions, communicators, transports (degraded in red), collectives, warnings."""
    from traceview.nccl_join import join_nccl
    from traceview.parsers import nccl_log

    parsed = [nccl_log.parse(path) for path in logs]
    if json_output:
        import msgspec

        from traceview.reports.json_out import nccl_document

        document = nccl_document(join_nccl(None, parsed))
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(document), indent=2).decode() + "\n")
        return
    from traceview.reports.nccl_terminal import render_nccl

    console = Console(width=None if sys.stdout.isatty() else 200)
    for log in parsed:
        render_nccl(log, console)


RanksPerHostOpt = Annotated[
    int | None,
    typer.Option(
        "--ranks-per-host", min=1, help="Ranks per host for clock alignment when traces name no host."
    ),
]


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

    for text in fail_on or ():
        parse_threshold(text)
    loaded = load(run, workers)
    events, windows = (
        classified_events(loaded, user_patterns(tuple(comm_pattern or ()))),
        all_step_windows(loaded),
    )
    result = run_cross_rank(
        loaded, comm_kernels(loaded, events), events, windows, time_budget(events, windows), ranks_per_host
    )
    if json_output:
        import msgspec

        from traceview.reports.json_out import crossrank_document

        document = crossrank_document(result)
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(document), indent=2).decode() + "\n")
    else:
        from traceview.reports.crossrank_terminal import render_crossrank

        render_crossrank(result, Console(width=None if sys.stdout.isatty() else 200))
    fired = crossings([parse_threshold(text) for text in fail_on or ()], result.gate_figures())
    if fired:
        detail = "; ".join(f"{c.threshold} (measured {c.measured:.4g})" for c in fired)
        raise ThresholdCrossed(f"threshold crossed: {detail}")


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
