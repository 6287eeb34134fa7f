"""Launch statistics per (rank, step) (docs/metrics.md, "Kernels and operators", "Launches").

Over the device events linked to their launching call (`traceview.kernels.operators.with_links`), each in the
step window holding its start:

- `launches`: launching calls (one per correlation id), `graph_launches` of them replaying a graph;
- `launch_us`: the calls' time on the CPU; `device_us`: the summed duration of the device work they launched;
- `kernels`: kernels launched one per call; `short_kernels`: those shorter than their own launch call (the
  host cannot keep such kernels back to back: launch-bound);
- `queue_median_us`, `queue_p99_us`: from a call's return to its work's start (for a graph, its first kernel);
- `graph_kernels`: device events replayed by graph launches (not counted in `kernels` nor `short_kernels`);
- `capture_calls`, `captured_launches`: calls that capture or instantiate a graph, and kernel launches with no
  kernel in the trace (captured, not run), counted in the host step windows: a step with either is marked
  `capture_step` (captured launches outnumbering the kernels that ran).
"""

from __future__ import annotations

import polars as pl

from traceview.events.cuda_graphs import graph_calls
from traceview.model.trace import CALL_KEY

LAUNCH_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "launches": pl.Int64(),
    "graph_launches": pl.Int64(),
    "launch_us": pl.Float64(),
    "device_us": pl.Float64(),
    "kernels": pl.Int64(),
    "short_kernels": pl.Int64(),
    "graph_kernels": pl.Int64(),
    "queue_median_us": pl.Float64(),
    "queue_p99_us": pl.Float64(),
    "capture_calls": pl.Int64(),
    "captured_launches": pl.Int64(),
    "capture_step": pl.Boolean(),
}


DEVICE_COLUMNS = (
    "launches",
    "graph_launches",
    "launch_us",
    "device_us",
    "kernels",
    "short_kernels",
    "graph_kernels",
    "queue_median_us",
    "queue_p99_us",
)
"""The columns `_device_side` adds (absent, so null and not 0, when no device event has a launch)."""


def _in_windows(frame: pl.LazyFrame, at: str, windows: pl.LazyFrame) -> pl.LazyFrame:
    """`frame` with the `step` of its rank's window (columns rank, step, window_start_us, window_end_us)
    holding `at`."""
    starts = windows.select("rank", "step", "window_start_us", "window_end_us").sort("window_start_us")
    placed = frame.sort(at).join_asof(
        starts, left_on=at, right_on="window_start_us", by="rank", check_sortedness=False
    )
    return placed.filter(pl.col("step").is_not_null() & (pl.col(at) < pl.col("window_end_us"))).drop(
        "window_start_us", "window_end_us"
    )


_DURATION = pl.col("end_us") - pl.col("start_us")
_CALL = pl.col("launch_end_us") - pl.col("launch_start_us")
_SINGLE = ~pl.col("graph") & (pl.col("kind") == "kernel")
_HAS_LAUNCH = pl.col("launch_start_us").is_not_null()
_FIRST = (pl.col("start_us") == pl.col("start_us").min().over(CALL_KEY)).alias("_first")
_QUEUE = (pl.col("start_us") - pl.col("launch_end_us")).alias("_queue")
_QUEUED = pl.col("_queue").filter(_SINGLE | (pl.col("graph") & pl.col("_first")))
_DEVICE_FIGURES = (
    pl.col("correlation").n_unique().cast(pl.Int64).alias("launches"),
    pl.col("correlation").filter(pl.col("graph")).n_unique().cast(pl.Int64).alias("graph_launches"),
    _CALL.filter(pl.col("_first")).sum().alias("launch_us"),
    _DURATION.sum().alias("device_us"),
    _SINGLE.sum().cast(pl.Int64).alias("kernels"),
    (_SINGLE & (_DURATION < _CALL)).sum().cast(pl.Int64).alias("short_kernels"),
    pl.col("graph").sum().cast(pl.Int64).alias("graph_kernels"),
    _QUEUED.median().alias("queue_median_us"),
    _QUEUED.quantile(0.99, "linear").alias("queue_p99_us"),
)


def _device_side(linked: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Per step: `DEVICE_COLUMNS` of the device events with a launch (at least one has)."""
    per_call = linked.filter(_HAS_LAUNCH).with_columns(_FIRST).with_columns(_QUEUE)
    stepped = _in_windows(
        per_call.filter(pl.col("_first")).select(*CALL_KEY, "start_us"), "start_us", windows
    )
    placed = per_call.join(stepped.select(*CALL_KEY, "step"), on=CALL_KEY)
    return placed.group_by(_STEP).agg(_DEVICE_FIGURES)


_STEP = ["rank", "step"]


_IS_CAPTURE = pl.col("graph_role") == "capture"
_IS_KERNEL_LAUNCH = pl.col("graph_role") == "kernel_launch"
_IS_RUNTIME = pl.col("kind") == "runtime"
_NAME_ROW = (pl.lit(0.0).alias("start_us"), pl.int_range(pl.len(), dtype=pl.Int64).alias("correlation"))


def runtime_names(cpu: pl.DataFrame) -> pl.LazyFrame:
    """The distinct names of the runtime calls of `cpu`, as a query: `launch_steps` finds the graph calls
    among them (`traceview.events.cuda_graphs.graph_calls`), each name once (`correlation`: its row)."""
    distinct = cpu.lazy().filter(_IS_RUNTIME).select("kind", "name").unique(maintain_order=True)
    return distinct.with_columns(_NAME_ROW)


def _graph_calls(cpu: pl.DataFrame, names: pl.DataFrame) -> tuple[pl.LazyFrame, bool]:
    """The runtime calls of `cpu` that matter to graphs (`rank`, `start_us`, `correlation`, `graph_role`),
    their roles read on their distinct `names` (`runtime_names`: one query), and whether any captures."""
    found = graph_calls(names)
    named = found.lazy().join(names.lazy().select("correlation", "name"), on="correlation")
    calls = cpu.lazy().filter(_IS_RUNTIME).join(named.select("name", "graph_role"), on="name")
    capturing = bool((found.get_column("graph_role") == "capture").any())
    return calls.select("rank", "start_us", "correlation", "graph_role"), capturing


def _captures(
    cpu: pl.DataFrame, names: pl.DataFrame, linked: pl.LazyFrame, host_windows: pl.LazyFrame
) -> pl.LazyFrame:
    """Per (rank, host step): `capture_calls` and `captured_launches` (null where none)."""
    calls, capturing = _graph_calls(cpu, names)
    ran = linked.select(CALL_KEY)  # an anti join: the ids need no unique
    captured = calls.filter(_IS_KERNEL_LAUNCH).join(ran, on=CALL_KEY, how="anti")
    launches = (
        _in_windows(captured.select("rank", "start_us"), "start_us", host_windows)
        .group_by(_STEP)
        .agg(pl.len().cast(pl.Int64).alias("captured_launches"))
    )
    if not capturing:  # most traces capture no graph
        return launches.with_columns(_NO_CAPTURE_CALLS)
    capture_calls = (
        _in_windows(calls.filter(_IS_CAPTURE).select("rank", "start_us"), "start_us", host_windows)
        .group_by(_STEP)
        .agg(pl.len().cast(pl.Int64).alias("capture_calls"))
    )
    return capture_calls.join(launches, on=_STEP, how="full", coalesce=True)


_NO_CAPTURE_CALLS = pl.lit(None, pl.Int64).alias("capture_calls")


def _finish() -> tuple[list[pl.Expr], list[pl.Expr]]:
    """The expressions that fill the joined steps (counts 0 where nothing was counted) and give them
    `LAUNCH_SCHEMA`; a rank none of whose device events has a launch (`_with_device` false) has its launch
    and device times null, not 0."""
    counts = [c for c, t in LAUNCH_SCHEMA.items() if t == pl.Int64() and c not in ("rank", "step")]
    filled = [
        *[pl.col(c).fill_null(0) for c in counts],
        *[pl.when(pl.col("_with_device")).then(pl.col(c).fill_null(0.0)).alias(c) for c in _TIMES],
    ]
    return filled, [_CAPTURE_STEP]


_TIMES = ("launch_us", "device_us")
_CAPTURE_STEP = ((pl.col("capture_calls") > 0) | (pl.col("captured_launches") > pl.col("kernels"))).alias(
    "capture_step"
)
_FILLED, _FINISHED = _finish()
_WITH_DEVICE = _HAS_LAUNCH.any().alias("_with_device")
_LAUNCH_COLUMNS = [pl.col(c).cast(t) for c, t in LAUNCH_SCHEMA.items()]


def launch_steps(
    linked: pl.DataFrame,
    cpu: pl.DataFrame,
    names: pl.DataFrame,
    windows: pl.DataFrame,
    host_windows: pl.LazyFrame,
) -> pl.LazyFrame:
    """Per (rank, step) of `windows` (device windows; `host_windows` for the captures): `LAUNCH_SCHEMA`, as
    a query (`linked`: the ranks' device events with their links; `cpu`: their host rows; `names`:
    `runtime_names(cpu)` computed; the graph calls are found first, one query). A rank without windows has
    no rows."""
    if windows.height == 0:
        return pl.LazyFrame(schema=LAUNCH_SCHEMA)
    events = linked.lazy()
    captures = _captures(cpu, names, events, host_windows)
    stepped = windows.lazy().select(_STEP)
    steps = (
        pl.concat([stepped, captures.select(_STEP)]).unique().join(stepped.select("rank").unique(), on="rank")
    )
    joined = (
        steps.join(_device_side(events, windows.lazy()), on=_STEP, how="left")
        .join(captures, on=_STEP, how="left")
        .join(events.group_by("rank").agg(_WITH_DEVICE), on="rank", how="left")
    )
    return joined.with_columns(_FILLED).with_columns(_FINISHED).select(_LAUNCH_COLUMNS).sort(_STEP)
