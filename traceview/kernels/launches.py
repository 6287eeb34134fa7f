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
    """`frame` with the `step` of the window (columns step, window_start_us, window_end_us) holding `at`."""
    starts = windows.select("step", "window_start_us", "window_end_us").sort("window_start_us")
    placed = frame.sort(at).join_asof(starts, left_on=at, right_on="window_start_us", check_sortedness=False)
    return placed.filter(pl.col("step").is_not_null() & (pl.col(at) < pl.col("window_end_us"))).drop(
        "window_start_us", "window_end_us"
    )


_DURATION = pl.col("end_us") - pl.col("start_us")
_CALL = pl.col("launch_end_us") - pl.col("launch_start_us")
_SINGLE = ~pl.col("graph") & (pl.col("kind") == "kernel")
_HAS_LAUNCH = pl.col("launch_start_us").is_not_null()
_FIRST = (pl.col("start_us") == pl.col("start_us").min().over("correlation")).alias("_first")
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
        per_call.filter(pl.col("_first")).select("correlation", "start_us"), "start_us", windows
    )
    placed = per_call.join(stepped.select("correlation", "step"), on="correlation")
    return placed.group_by("step").agg(_DEVICE_FIGURES)


_IS_CAPTURE = pl.col("graph_role") == "capture"
_IS_KERNEL_LAUNCH = pl.col("graph_role") == "kernel_launch"


def _captures(cpu: pl.DataFrame, linked: pl.LazyFrame, host_windows: pl.LazyFrame) -> pl.LazyFrame:
    """Per host step: `capture_calls` and `captured_launches` (null where none)."""
    found = graph_calls(cpu)
    calls = found.lazy()
    ran = linked.select("correlation").unique()
    captured = calls.filter(_IS_KERNEL_LAUNCH).join(ran, on="correlation", how="anti")
    launches = (
        _in_windows(captured.select("start_us"), "start_us", host_windows)
        .group_by("step")
        .agg(pl.len().cast(pl.Int64).alias("captured_launches"))
    )
    if not (found.get_column("graph_role") == "capture").any():  # most traces capture no graph
        return launches.with_columns(_NO_CAPTURE_CALLS)
    capture_calls = (
        _in_windows(calls.filter(_IS_CAPTURE).select("start_us"), "start_us", host_windows)
        .group_by("step")
        .agg(pl.len().cast(pl.Int64).alias("capture_calls"))
    )
    return capture_calls.join(launches, on="step", how="full", coalesce=True)


_NO_CAPTURE_CALLS = pl.lit(None, pl.Int64).alias("capture_calls")


def _device(linked: pl.DataFrame, windows: pl.DataFrame) -> tuple[pl.LazyFrame, bool]:
    """`_device_side`, and whether it adds `DEVICE_COLUMNS`: only `step` when no device event has a
    launch."""
    if linked.get_column("launch_start_us").null_count() == linked.height:
        return pl.LazyFrame(schema={"step": pl.Int64}), False
    return _device_side(linked.lazy(), windows.lazy()), True


def _finish(with_device: bool) -> tuple[list[pl.Expr], list[pl.Expr]]:
    """The expressions that fill the joined steps (counts 0 where nothing was counted) and give them
    `LAUNCH_SCHEMA` (the device columns null where no device event has a launch), with the device columns
    or without."""
    present = {"rank", "step", "capture_calls", "captured_launches", "capture_step"}
    present |= set(DEVICE_COLUMNS) if with_device else set()
    counts = [c for c, t in LAUNCH_SCHEMA.items() if t == pl.Int64() and c not in ("rank", "step")]
    filled = [
        *[pl.col(c).fill_null(0) if c in present else pl.lit(0).alias(c) for c in counts],
        *[pl.col(c).fill_null(0.0) for c in ("launch_us", "device_us") if c in present],
    ]
    missing = [pl.lit(None, t).alias(c) for c, t in LAUNCH_SCHEMA.items() if c not in {*present, *counts}]
    return filled, [*missing, _CAPTURE_STEP]


_CAPTURE_STEP = ((pl.col("capture_calls") > 0) | (pl.col("captured_launches") > pl.col("kernels"))).alias(
    "capture_step"
)
_FINISHED = {with_device: _finish(with_device) for with_device in (False, True)}
_LAUNCH_COLUMNS = [pl.col(c).cast(t) for c, t in LAUNCH_SCHEMA.items()]


def launch_steps(
    linked: pl.DataFrame, cpu: pl.DataFrame, windows: pl.DataFrame, host_windows: pl.LazyFrame, rank: int
) -> pl.LazyFrame:
    """Per step of `windows` (device windows; `host_windows` for the captures): `LAUNCH_SCHEMA`, as a query
    (`graph_calls` runs first)."""
    if windows.height == 0:
        return pl.LazyFrame(schema=LAUNCH_SCHEMA)
    captures = _captures(cpu, linked.lazy(), host_windows)
    steps = pl.concat([windows.lazy().select("step"), captures.select("step")]).unique()  # a capture step
    device, with_device = _device(linked, windows)  # may run nothing
    filled, finished = _FINISHED[with_device]
    joined = (
        steps.join(device, on="step", how="left")
        .join(captures, on="step", how="left")
        .with_columns(pl.lit(rank, pl.Int64).alias("rank"))
    )
    return joined.with_columns(filled).with_columns(finished).select(_LAUNCH_COLUMNS).sort("step")
