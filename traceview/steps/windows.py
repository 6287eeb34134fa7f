"""Step windows on the device clock, per rank (docs/metrics.md section 3).

The parser keeps every `ProfilerStep#N` candidate (`RankTrace.steps`, column `source`: `gpu` for GPU-side
annotations, `cpu` for host ones). `choose_steps` picks one set per rank by evidence:

- GPU annotations are used when their windows hold enough of the reference device activity: at least
  `GPU_COVER_MIN_SHARE_OF_CPU_STEPS` of the device busy time of the events launched inside the CPU steps, or,
  without CPU steps, `GPU_COVER_MIN_SHARE_OF_TRACE` of the whole trace's. Otherwise (ROCm traces carry GPU
  step annotations of a few microseconds) they are rejected, the reason is stated as a run warning, and the
  CPU steps are used, or the whole trace without them.
- CPU `ProfilerStep#N` windows: each device event belongs to the step whose CPU window contains the runtime
  call that launched it (matched by correlation id; an event without a launch falls back to its own start
  time). A step ends when its last device work ends: window N runs from the end of step N-1 to the end of step
  N (the first from its own first device activity). So the device time between steps, the input pipeline's gap
  included, is charged to the step it precedes, pipelined steps (the next step's prefetch running under this
  one) are not cut in two, and nothing is lost between windows.
- No steps: the whole trace is one step, numbered `WHOLE_TRACE`, from its first device activity to its last.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceview.core.intervals import clip_to_windows, merge_intervals, union_length
from traceview.model.trace import RankTrace

WHOLE_TRACE = -1
STEP_MARK = r"^ProfilerStep#\d+$"
"""The name of a host step mark: the profiler's `ProfilerStep#N` annotation."""
GPU_COVER_MIN_SHARE_OF_CPU_STEPS = 0.9
"""GPU step annotations whose windows hold less than this share of the device busy time launched inside the
CPU steps are rejected: a GPU ProfilerStep annotation spans its step's device work, so a faithful set holds
nearly all of it."""
GPU_COVER_MIN_SHARE_OF_TRACE = 0.5
"""Without CPU steps, the reference is the trace's whole device busy time, which may hold work outside every
step (warm-up, the profiler's stop): GPU step annotations holding less than this share of it are rejected."""

WINDOW_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "window_start_us": pl.Float64,
    "window_end_us": pl.Float64,
}


@dataclass(frozen=True)
class StepChoice:
    """The step source used for one rank (`gpu` | `cpu` | `none`) and, when GPU annotations were weighed,
    the device busy time (us) inside their windows and in the reference; `warning` says why they were
    rejected (None when they were not)."""

    rank: int
    source: str
    gpu_covered_us: float | None = None
    reference_us: float | None = None
    warning: str | None = None


def _candidates(trace: RankTrace, source: str) -> pl.LazyFrame:
    return trace.steps.lazy().filter(pl.col("source") == source)


def _has_source(trace: RankTrace, source: str) -> bool:
    """Whether the rank has step candidates of `source` (no query: a column comparison)."""
    return bool((trace.steps.get_column("source") == source).any())


def _device_busy_us(events: pl.DataFrame) -> float:
    """Length of the union of the intervals of `events` (columns `start_us`, `end_us`, others ignored)."""
    if events.height == 0:
        return 0.0
    return float(union_length(events, [], "busy_us")["busy_us"].sum())


def _busy_inside(events: pl.DataFrame, windows: pl.LazyFrame) -> float:
    """Device busy time of `events` inside the union of `windows` (columns `start_us`, `end_us`)."""
    if events.height == 0:
        return 0.0
    key = pl.lit(0, dtype=pl.Int64).alias("_rank")  # clip_to_windows groups by at least one key
    keyed_windows, keyed_events = pl.collect_all(
        [windows.select(key, "start_us", "end_us"), events.lazy().select(key, "start_us", "end_us")],
    )
    if keyed_windows.height == 0:
        return 0.0
    merged = merge_intervals(keyed_windows, ["_rank"]).select(
        "_rank",
        pl.int_range(pl.len()).alias("step"),
        pl.col("start_us").alias("window_start_us"),
        pl.col("end_us").alias("window_end_us"),
    )
    clipped = clip_to_windows(keyed_events, merged, ["_rank"])
    return _device_busy_us(clipped)


def _span(microseconds: float) -> str:
    return f"{microseconds / 1000:.1f} ms" if microseconds >= 1000 else f"{microseconds:.0f} us"


def choose_steps(trace: RankTrace) -> StepChoice:
    """The step source of the rank, by evidence (see the module docstring)."""
    has_gpu, has_cpu = _has_source(trace, "gpu"), _has_source(trace, "cpu")
    fallback = "cpu" if has_cpu else "none"
    if not has_gpu or trace.gpu.height == 0:
        return StepChoice(trace.rank, "gpu" if has_gpu else fallback)
    reference = _device_busy_us(device_event_steps(trace) if has_cpu else trace.gpu)
    covered = _busy_inside(trace.gpu, _candidates(trace, "gpu"))
    share = GPU_COVER_MIN_SHARE_OF_CPU_STEPS if has_cpu else GPU_COVER_MIN_SHARE_OF_TRACE
    if reference <= 0 or covered >= share * reference:
        return StepChoice(trace.rank, "gpu", covered, reference)
    what = "the device activity launched in the CPU steps" if has_cpu else "the trace's device activity"
    instead = "using the CPU ProfilerStep windows" if has_cpu else "analysing the whole trace as one step"
    warning = (
        f"rank {trace.rank}: GPU ProfilerStep annotations cover {covered / reference:.2%} of {what} "
        f"({_span(covered)} of {_span(reference)}); {instead}"
    )
    return StepChoice(trace.rank, fallback, covered, reference, warning)


def step_windows(trace: RankTrace, choice: StepChoice | None = None) -> pl.DataFrame:
    """Device-clock windows of the rank's steps: columns `rank`, `step`, `window_start_us`, `window_end_us`.

    `choice` is `choose_steps(trace)` (computed here when not given)."""
    if trace.gpu.height == 0:
        return pl.DataFrame(schema=WINDOW_SCHEMA)
    source = (choice or choose_steps(trace)).source
    if source == "gpu":
        windows = _candidates(trace, "gpu").select(
            "step", pl.col("start_us").alias("window_start_us"), pl.col("end_us").alias("window_end_us")
        )
    elif source == "cpu":
        windows = _windows_from_launches(trace)
    else:
        windows = trace.gpu.lazy().select(
            pl.lit(WHOLE_TRACE, dtype=pl.Int64).alias("step"),
            pl.col("start_us").min().alias("window_start_us"),
            pl.col("end_us").max().alias("window_end_us"),
        )
    rank = pl.lit(trace.rank, dtype=pl.Int64).alias("rank")
    return windows.with_columns(rank).select(list(WINDOW_SCHEMA)).collect()


def device_event_steps(trace: RankTrace) -> pl.DataFrame:
    """Each device event's CPU step (by its launch), columns `correlation`, `start_us`, `end_us`, `step`;
    events launched outside every CPU step are left out. One query."""
    return _device_event_steps(trace).collect()


def _device_event_steps(trace: RankTrace) -> pl.LazyFrame:
    launches = (
        trace.cpu.lazy()
        .filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("correlation", pl.col("start_us").alias("launch_us"))
        .unique("correlation", keep="first")
    )
    steps = (
        _candidates(trace, "cpu")
        .sort("start_us")
        .select("step", pl.col("start_us").alias("step_start"), pl.col("end_us").alias("step_end"))
    )
    return (
        trace.gpu.lazy()
        .select("correlation", "start_us", "end_us")
        .join(launches, on="correlation", how="left")
        .with_columns(pl.coalesce("launch_us", "start_us").alias("at_us"))
        .sort("at_us")
        .join_asof(steps, left_on="at_us", right_on="step_start")
        .filter(pl.col("step").is_not_null() & (pl.col("at_us") <= pl.col("step_end")))
        .select("correlation", "start_us", "end_us", "step")
    )


def _windows_from_launches(trace: RankTrace) -> pl.LazyFrame:
    ends = (
        _device_event_steps(trace)
        .group_by("step")
        .agg(pl.col("start_us").min().alias("first_start"), pl.col("end_us").max().alias("window_end_us"))
        .sort("step")
        .with_columns(pl.col("window_end_us").cum_max())
    )
    return (
        ends.with_columns(
            pl.col("window_end_us").shift(1).fill_null(pl.col("first_start")).alias("window_start_us")
        )
        .select("step", "window_start_us", "window_end_us")
        .filter(pl.col("window_end_us") > pl.col("window_start_us"))
    )
