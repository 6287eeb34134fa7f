"""CUDA and HIP graphs in a trace (docs/metrics.md, "Kernels and operators", "Graphs"): the one place graph
launches and captures are recognised, for every analysis that needs them.

A replayed graph's kernels carry the correlation id of the runtime call that launched the graph
(`cudaGraphLaunch`, `hipGraphLaunch`), which PyTorch records inside the operator that replays it
(`CompiledFunction`, a CUDA-graph tree's replay): linked by correlation like any kernel, they belong to that
launch and that operator. A step that captures a graph (`cudaStreamBeginCapture` ... `cudaStreamEndCapture`,
`cudaGraphInstantiate`) records launches whose kernels did not run: they were captured, not executed, so that
step's launches are not its work.
"""

from __future__ import annotations

import functools

import polars as pl

GRAPH_LAUNCH = r"^(?:cuda|hip|cu)GraphLaunch(?:_v\d+)?$"
"""Runtime calls that replay a graph."""
CAPTURE_CALLS = (
    r"^(?:cuda|hip|cu)(?:StreamBeginCapture|StreamEndCapture|GraphInstantiate|GraphInstantiateWithFlags"
    r"|StreamBeginCaptureToGraph)(?:_v\d+)?$"
)
"""Runtime calls that capture or instantiate a graph."""
KERNEL_LAUNCH = (
    r"^(?:cuda|hip|cu)(?:LaunchKernel|LaunchKernelExC|LaunchKernelEx|LaunchCooperativeKernel"
    r"|ModuleLaunchKernel"
    r"|ExtModuleLaunchKernel|ExtLaunchKernel)(?:_v\d+|_ptsz)?$"
)
"""Runtime calls that launch one kernel (a captured one has no kernel in the trace)."""


def is_graph_launch() -> pl.Expr:
    """Is the runtime call (column `name`) a graph launch?"""
    return pl.col("name").str.contains(GRAPH_LAUNCH)


def graph_calls(cpu: pl.DataFrame) -> pl.DataFrame:
    """The rank's runtime calls that matter to graphs: `start_us`, `correlation`, `graph_role` (launch |
    capture | kernel_launch)."""
    return (
        cpu.lazy()
        .filter(pl.col("kind") == "runtime")
        .select("start_us", "correlation", _graph_role())
        .drop_nulls("graph_role")
        .collect()
    )


@functools.cache
def _graph_role() -> pl.Expr:
    return (
        pl.when(is_graph_launch())
        .then(pl.lit("launch"))
        .when(pl.col("name").str.contains(CAPTURE_CALLS))
        .then(pl.lit("capture"))
        .when(pl.col("name").str.contains(KERNEL_LAUNCH))
        .then(pl.lit("kernel_launch"))
        .alias("graph_role")
    )
