"""`traceview report RUN -o report.html`: the self-contained HTML report of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traceview.cli.app import (
    analyse,
    app,
    check_thresholds,
    finish,
    model_options,
    report_skipped,
    say,
    with_nccl_logs,
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
    RayAddressOpt,
    RunsArg,
    VirtualStagesOpt,
    WorkersOpt,
    run_spec,
)
from traceview.core.errors import UsageError
from traceview.core.sanitize import printable


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
    from traceview.reports.html.page import render_html

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
