"""`traceview summary RUN [--json]`: the verdict, the advice and the time budget in the terminal, or the versioned
JSON summary (docs/json-schema.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from traceview.cli.app import (
    analyse,
    app,
    check_thresholds,
    finish,
    model_options,
    report_skipped,
    stdout_console,
    with_nccl_logs,
    write_json_text,
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


@app.command()
def summary(
    runs: RunsArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the versioned JSON summary instead.")
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="With --json: list every collective instance (by default: those of largest skew).",
        ),
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
        from traceview.reports.json.summary import render_json

        write_json_text(render_json(analysis, full=full))
    else:
        from traceview.reports.text.summary import render_summary

        render_summary(analysis, stdout_console())
    finish(analysis, fail_on)
