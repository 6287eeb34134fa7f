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

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceview.core.intervals import clipped
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


_REACH = pl.col("end_us").cum_max().shift(1)
_UNCOVERED = (
    pl.col("end_us") - pl.max_horizontal(pl.col("start_us"), _REACH.fill_null(pl.col("start_us")))
).clip(lower_bound=0.0)
"""Per interval (sorted by start): the part of it no earlier interval covers."""
_NEW_SEGMENT = (pl.col("start_us") > _REACH).fill_null(True).cast(pl.Int64).cum_sum()
_BUSY = pl.col("busy_us").sum()


def _busy_us(events: pl.LazyFrame) -> pl.LazyFrame:
    """Length of the union of the intervals of `events` (columns `start_us`, `end_us`, others ignored), as one
    row `busy_us` (0 without events); the sums of `traceview.core.intervals.union_length`."""
    per_group = events.sort("start_us").with_columns(_UNCOVERED.alias("busy_us")).group_by([]).agg(_BUSY)
    return per_group.select(_BUSY)


def _busy_inside(
    events: pl.LazyFrame, windows: pl.LazyFrame, one: tuple[float, float] | None
) -> pl.LazyFrame:
    """Device busy time of `events` inside the union of `windows` (columns `start_us`, `end_us`), as
    `_busy_us`: the events clipped to the merged windows (`traceview.core.intervals.clipped`); to the only
    window, `one` (start, end), directly."""
    if one is not None:
        start, end = (pl.lit(edge, pl.Float64) for edge in one)
        cut = events.select(
            pl.max_horizontal(pl.col("start_us"), start).alias("start_us"),
            pl.min_horizontal(pl.col("end_us"), end).alias("end_us"),
        )
        return _busy_us(cut.filter(pl.col("end_us") > pl.col("start_us")))
    key = pl.lit(0, dtype=pl.Int64).alias("_rank")  # clipped groups by at least one key
    merged = (
        windows.select(key, "start_us", "end_us")
        .sort("_rank", "start_us")
        .with_columns(_NEW_SEGMENT.alias("_segment"))
        .group_by("_rank", "_segment")
        .agg(pl.col("start_us").min(), pl.col("end_us").max())
        .sort("_rank", "start_us")
        .select(
            "_rank",
            pl.int_range(pl.len()).alias("step"),
            pl.col("start_us").alias("window_start_us"),
            pl.col("end_us").alias("window_end_us"),
        )
    )
    return _busy_us(clipped(events.select(key, "start_us", "end_us"), merged, ["_rank"]))


def _span(microseconds: float) -> str:
    return f"{microseconds / 1000:.1f} ms" if microseconds >= 1000 else f"{microseconds:.0f} us"


def _weighed(trace: RankTrace, stepped: pl.LazyFrame | None, gpu: pl.Series) -> list[pl.LazyFrame]:
    """The device busy time of the reference (the events launched in the CPU steps, `stepped`, else every
    device event) and inside the GPU step annotations (`gpu`: which steps are; `_busy_us` rows)."""
    reference = trace.gpu.lazy() if stepped is None else stepped
    one = None
    if gpu.sum() == 1:
        start, end = (float(trace.steps.get_column(c).filter(gpu)[0]) for c in ("start_us", "end_us"))
        one = (start, end)
    return [_busy_us(reference), _busy_inside(trace.gpu.lazy(), _candidates(trace, "gpu"), one)]


def choose_steps(trace: RankTrace) -> StepChoice:
    """The step source of the rank, by evidence (see the module docstring). One query when GPU annotations
    are weighed, none otherwise."""
    return chosen_windows(trace, windows=False)[0]


def chosen_windows(
    trace: RankTrace, windows: bool = True, also: Sequence[pl.LazyFrame] = ()
) -> tuple[StepChoice, pl.DataFrame, list[pl.DataFrame]]:
    """`choose_steps(trace)`, when `windows` `step_windows(trace, choice)` (else an empty frame), and the
    queries `also` collected: the evidence, the windows of each source it may choose and `also` in one query.
    """
    return chosen_windows_of([trace], [also], windows)[0]


def chosen_windows_of(
    traces: Sequence[RankTrace], also: Sequence[Sequence[pl.LazyFrame]], windows: bool = True
) -> list[tuple[StepChoice, pl.DataFrame, list[pl.DataFrame]]]:
    """`chosen_windows` of each trace (with its `also`), every trace's queries in one `pl.collect_all`."""
    asked = [_WindowQueries.of(trace, windows, extra) for trace, extra in zip(traces, also, strict=True)]
    queries = [query for one in asked for query in one.queries]
    found = iter(pl.collect_all(queries) if queries else [])
    return [one.answer([next(found) for _ in one.queries]) for one in asked]


@dataclass(frozen=True)
class _WindowQueries:
    """What `chosen_windows` asks of one trace, and how it reads the answers."""

    rank: int
    has_gpu: bool
    has_cpu: bool
    evidence: list[pl.LazyFrame]
    plans: dict[str, pl.LazyFrame]
    also: Sequence[pl.LazyFrame]

    @staticmethod
    def of(trace: RankTrace, windows: bool, also: Sequence[pl.LazyFrame]) -> _WindowQueries:
        source = trace.steps.get_column("source")
        gpu = source == "gpu"
        has_gpu, has_cpu = bool(gpu.any()), bool((source == "cpu").any())
        fallback = "cpu" if has_cpu else "none"
        weigh = has_gpu and trace.gpu.height > 0
        stepped = _device_event_steps(trace) if has_cpu and trace.gpu.height else None  # one plan, shared
        evidence = _weighed(trace, stepped, gpu) if weigh else []
        choices = ("gpu", fallback) if weigh else ("gpu" if has_gpu else fallback,)
        plans = {s: _windows(trace, s, stepped) for s in choices} if windows and trace.gpu.height else {}
        return _WindowQueries(trace.rank, has_gpu, has_cpu, evidence, plans, also)

    @property
    def queries(self) -> list[pl.LazyFrame]:
        return [*self.evidence, *self.plans.values(), *self.also]

    def answer(self, found: list[pl.DataFrame]) -> tuple[StepChoice, pl.DataFrame, list[pl.DataFrame]]:
        evidence, plans = len(self.evidence), len(self.plans)
        busy = [float(frame.item()) for frame in found[:evidence]]
        framed = dict(zip(self.plans, found[evidence : evidence + plans], strict=True))
        fallback = "cpu" if self.has_cpu else "none"
        choice = _choice(self.rank, self.has_gpu, fallback, self.has_cpu, busy)
        chosen = framed.get(choice.source, pl.DataFrame(schema=WINDOW_SCHEMA))
        return choice, chosen, found[evidence + plans :]


def _choice(rank: int, has_gpu: bool, fallback: str, has_cpu: bool, busy: list[float]) -> StepChoice:
    """The choice from the busy time of the reference and inside the GPU annotations (`busy`, empty when they
    were not weighed)."""
    if not busy:
        return StepChoice(rank, "gpu" if has_gpu else fallback)
    reference, covered = busy
    share = GPU_COVER_MIN_SHARE_OF_CPU_STEPS if has_cpu else GPU_COVER_MIN_SHARE_OF_TRACE
    if reference <= 0 or covered >= share * reference:
        return StepChoice(rank, "gpu", covered, reference)
    what = "the device activity launched in the CPU steps" if has_cpu else "the trace's device activity"
    instead = "using the CPU ProfilerStep windows" if has_cpu else "analysing the whole trace as one step"
    warning = (
        f"rank {rank}: GPU ProfilerStep annotations cover {covered / reference:.2%} of {what} "
        f"({_span(covered)} of {_span(reference)}); {instead}"
    )
    return StepChoice(rank, fallback, covered, reference, warning)


def step_windows(trace: RankTrace, choice: StepChoice | None = None) -> pl.DataFrame:
    """Device-clock windows of the rank's steps: columns `rank`, `step`, `window_start_us`, `window_end_us`.

    `choice` is `choose_steps(trace)` (computed here when not given)."""
    if trace.gpu.height == 0:
        return pl.DataFrame(schema=WINDOW_SCHEMA)
    return _windows(trace, (choice or choose_steps(trace)).source).collect()


def _windows(trace: RankTrace, source: str, stepped: pl.LazyFrame | None = None) -> pl.LazyFrame:
    """The windows of `source` (`step_windows`), lazily; `stepped`: `_device_event_steps(trace)` if built."""
    if source == "gpu":
        windows = _candidates(trace, "gpu").select(
            "step", pl.col("start_us").alias("window_start_us"), pl.col("end_us").alias("window_end_us")
        )
    elif source == "cpu":
        windows = _windows_from_launches(_device_event_steps(trace) if stepped is None else stepped)
    else:
        windows = trace.gpu.lazy().select(
            pl.lit(WHOLE_TRACE, dtype=pl.Int64).alias("step"),
            pl.col("start_us").min().alias("window_start_us"),
            pl.col("end_us").max().alias("window_end_us"),
        )
    rank = pl.lit(trace.rank, dtype=pl.Int64).alias("rank")
    return windows.with_columns(rank).select(list(WINDOW_SCHEMA))


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


def _windows_from_launches(stepped: pl.LazyFrame) -> pl.LazyFrame:
    ends = (
        stepped.group_by("step")
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
