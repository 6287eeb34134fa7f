"""Bubbles (docs/metrics.md, "Bubbles"): the device's idle gaps inside each step, each with its cause, and the
pipeline bubble of pipeline-parallel runs against the theory (P-1)/(M*V+P-1).

Idle gaps. G = the union of every device event (kernels and memory ops) clipped to the step window W; the gaps
are the holes of G inside W plus W's leading and trailing idle, so per (rank, step) they add up to the
budget's `idle_us` = |W| - |G|. The gap's *next event* is the rank's first device event that starts at or
after the gap's end (the one launched first when several start together; for a trailing gap it may lie in a
later step); its *launch* is the start of the runtime call with the same correlation id. `GAP_RULES` names
the cause, first matching rule wins.

Pipeline bubble: see `traceview.bubbles.pipeline_bubble`.
"""

from __future__ import annotations

from dataclasses import field
from functools import cache

import polars as pl

from traceview.bubbles.pipeline_bubble import compute_union, p2p_kernels, pipeline_bubble, pipeline_table
from traceview.collectives.calls import launches
from traceview.core.errors import UsageError
from traceview.core.intervals import clipped
from traceview.core.outliers import rank_outliers
from traceview.core.records import record
from traceview.critical_path.analysis import CriticalPath
from traceview.critical_path.categories import IDLE_CATEGORIES
from traceview.model.trace import Run

KEYS = ["rank", "step"]


@record
class GapRule:
    """One attribution rule: a gap whose row satisfies `when` has cause `cause`."""

    cause: str
    meaning: str
    when: pl.Expr


GAP_RULES: tuple[GapRule, ...] = (
    GapRule(
        "unattributed",
        "no device event follows the gap, or the next event's launch is not in the trace",
        pl.col("next_launch_us").is_null(),
    ),
    GapRule(
        "host-bound",
        "the next event was launched at or after the gap began: the device waited for the host",
        pl.col("next_launch_us") >= pl.col("start_us"),
    ),
    GapRule(
        "comm-wait",
        "the next event is a communication kernel launched before the gap began: it waited to start",
        pl.col("next_class") == "comm",
    ),
    GapRule(
        "dependency-bound",
        "the next event was launched before the gap began: it waited on an event or another stream",
        pl.lit(value=True),
    ),
)
"""The gap attribution table (docs/metrics.md, "Bubbles"): the first rule that holds names the cause."""

GAP_CAUSES = ("host-bound", "dependency-bound", "comm-wait", "unattributed")
CAUSE_COLUMNS = {cause: cause.replace("-", "_") + "_us" for cause in GAP_CAUSES}
"""Per-step column of each cause's idle time (`host_bound_us`, ...)."""

LARGEST_GAPS = 20
"""How many of the longest gaps the report and the JSON summary list."""
LISTED_GAP_MIN_US = 0.001
"""Gaps under 1 ns are float rounding of `ts + dur` (timestamps have ns resolution): counted, never listed."""

GAP_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "dur_us": pl.Float64,
    "position": pl.Utf8,
    "cause": pl.Utf8,
    "next_name": pl.Utf8,
    "next_class": pl.Utf8,
    "next_launch_us": pl.Float64,
}
DEVICE_SCHEMA = {"rank": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64}
NEXT_SCHEMA = {
    "rank": pl.Int64,
    "next_start_us": pl.Float64,
    "next_name": pl.Utf8,
    "next_class": pl.Utf8,
    "next_launch_us": pl.Float64,
}


@record
class BubbleAnalysis:
    """Idle gaps and the pipeline bubble of a run; renderers read it and never compute.

    `gaps`: one row per gap (`GAP_SCHEMA`). `per_cause`: rank, step, cause, gaps, idle_us. `per_step`: rank,
    step, step_us, idle_us, gaps and one `<cause>_us` column per cause; `per_rank`: their medians. `pipeline`:
    one row per (rank, step) of a pipeline rank (`PIPELINE_SCHEMA`), empty when no pipeline was found;
    `pipelines`: pipeline, stages, ranks (text), steps, median micro_batches, bubble_fraction,
    theory_fraction. `unknown_group_p2p`: P2P kernels whose group is unknown (not used as evidence).
    """

    gaps: pl.DataFrame
    per_cause: pl.DataFrame
    per_step: pl.DataFrame
    per_rank: pl.DataFrame
    pipeline: pl.DataFrame
    pipelines: pl.DataFrame
    virtual_stages: int
    unknown_group_p2p: int
    idle_by_path: pl.DataFrame = field(default_factory=pl.DataFrame)

    @property
    def outliers(self) -> pl.DataFrame:
        """The ranks whose median idle time of a cause lies beyond Tukey's fences
        (`traceview.core.outliers`)."""
        return rank_outliers(self.per_rank, ["idle_us", *CAUSE_COLUMNS.values()])

    @property
    def pipeline_detected(self) -> bool:
        """Whether point-to-point kernels linked ranks into at least one pipeline."""
        return self.pipelines.height > 0

    def largest_gaps(self, count: int = LARGEST_GAPS) -> pl.DataFrame:
        """The `count` longest gaps of the run, longest first (none shorter than `LISTED_GAP_MIN_US`)."""
        return (
            self.gaps.filter(pl.col("dur_us") >= LISTED_GAP_MIN_US)
            .sort(["dur_us", "rank", "start_us"], descending=[True, False, False])
            .head(count)
        )

    def gate_figures(self) -> dict[str, float | None]:
        """Figures `--fail-on` can name (docs/metrics.md, "Bubbles"): run medians over (rank, step)."""
        figures = {f"idle_{column}": _median(self.per_step, column) for column in CAUSE_COLUMNS.values()}
        figures["pipeline_bubble"] = _median(self.pipeline, "bubble_fraction")
        figures["pipeline_bubble_excess"] = _median(self.pipeline, "excess")
        return figures


def _median(frame: pl.DataFrame, column: str) -> float | None:
    values = frame.get_column(column).drop_nulls() if frame.height else pl.Series([], dtype=pl.Float64)
    return float(values.median()) if values.len() else None  # type: ignore[arg-type]


# ---------------------------------------------------------------- idle gaps


_BOUNDS = [pl.col("window_start_us"), pl.col("window_end_us")]
_KEY_COLUMNS = [pl.col(key) for key in KEYS]
_EDGES = [[*_KEY_COLUMNS, bound.alias("start_us"), bound.alias("end_us"), *_BOUNDS] for bound in _BOUNDS]
_BUSY = [*_KEY_COLUMNS, pl.col("start_us"), pl.col("end_us"), *_BOUNDS]
_REACH = pl.col("end_us").cum_max().shift(1).over(KEYS).alias("_reach")
_HOLE = pl.col("start_us") > pl.col("_reach")
_HOLE_ROW = [
    *_KEY_COLUMNS,
    pl.col("_reach").alias("start_us"),
    pl.col("start_us").alias("end_us"),
    pl.when(pl.col("_reach") == pl.col("window_start_us"))
    .then(pl.lit("leading"))
    .when(pl.col("start_us") == pl.col("window_end_us"))
    .then(pl.lit("trailing"))
    .otherwise(pl.lit("inner"))
    .alias("position"),
]


def _holes(device: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """The idle gaps of every window: the holes of the union of its device events (clipped to it) and of its
    two edges (zero-length intervals), by sort and cumulative max, with their `position`: a hole starting at
    the window's start is `leading`, one ending at its end `trailing`, any other `inner`."""
    cut = clipped(device, windows, ["rank"], edges=True)
    busy = pl.concat([cut.select(_BUSY), *(windows.select(edge) for edge in _EDGES)], how="vertical_relaxed")
    return busy.sort(*KEYS, "start_us").with_columns(_REACH).filter(_HOLE).select(_HOLE_ROW)


_LAUNCH = [pl.col("rank"), pl.col("correlation"), pl.col("launch_us").alias("next_launch_us")]
_NEXT = [
    pl.col("rank"),
    pl.col("start_us"),
    pl.col("correlation"),
    pl.col("name").alias("next_name"),
    pl.col("event_class").alias("next_class"),
]
_NEXT_ROW = [
    pl.col("rank"),
    pl.col("start_us").alias("next_start_us"),
    pl.col("next_name"),
    pl.col("next_class"),
    pl.col("next_launch_us"),
]


def _next_events(events: pl.LazyFrame, launches: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, start time) the device event that starts then (the earliest launched): `rank`,
    `next_start_us`, `next_name`, `next_class`, `next_launch_us`."""
    launch = launches.select(_LAUNCH).unique(["rank", "correlation"])
    return (
        events.select(_NEXT)
        .join(launch, on=["rank", "correlation"], how="left")
        .sort(["rank", "start_us", "next_launch_us", "next_name"], nulls_last=True)
        .unique(["rank", "start_us"], keep="first", maintain_order=True)
        .select(_NEXT_ROW)
        .sort("next_start_us")
    )


@cache
def _cause() -> pl.Expr:
    """The cause of the first rule of `GAP_RULES` that holds (coalesce: the first non-null); built once."""
    return pl.coalesce([pl.when(rule.when).then(pl.lit(rule.cause)) for rule in GAP_RULES]).alias("cause")


def idle_gaps(events: pl.DataFrame, windows: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Every idle gap of every (rank, step) window with its cause (`GAP_SCHEMA`), from classified device
    events, step windows and launches (`rank`, `correlation`, `launch_us`): one query."""
    return idle_gaps_plan(events, windows, launches).collect()


def idle_gaps_plan(events: pl.DataFrame, windows: pl.DataFrame, launches: pl.DataFrame) -> pl.LazyFrame:
    """`idle_gaps` as a lazy query, for a caller to collect with the queries that read it."""
    if windows.height == 0:
        return pl.LazyFrame(schema=GAP_SCHEMA)
    if events.height:
        device = events.lazy().select(_DEVICE)
        following = _next_events(events.lazy(), launches.lazy())
    else:
        device = pl.LazyFrame(schema=DEVICE_SCHEMA)
        following = pl.LazyFrame(schema=NEXT_SCHEMA)
    return (
        _holes(device, windows.lazy())
        .sort("end_us")
        .join_asof(
            following,
            left_on="end_us",
            right_on="next_start_us",
            by="rank",
            strategy="forward",
            check_sortedness=False,
        )
        .with_columns(_DURATION, _cause())
        .select(_GAP_COLUMNS)
        .sort(["rank", "step", "start_us"])
    )


_DEVICE = [pl.col("rank"), pl.col("start_us"), pl.col("end_us")]
_DURATION = (pl.col("end_us") - pl.col("start_us")).alias("dur_us")
_GAP_COLUMNS = [pl.col(name).cast(dtype) for name, dtype in GAP_SCHEMA.items()]


_TOTALS = [pl.len().cast(pl.Int64).alias("gaps"), pl.col("dur_us").sum().alias("idle_us")]
_CAUSE_SUMS = [
    pl.col("dur_us").filter(pl.col("cause") == cause).sum().alias(column)
    for cause, column in CAUSE_COLUMNS.items()
]
_STEP_US = [*KEYS, (pl.col("window_end_us") - pl.col("window_start_us")).alias("step_us")]
_NONE_IDLE = [pl.col("gaps").fill_null(0), pl.col("idle_us", *CAUSE_COLUMNS.values()).fill_null(0.0)]


def gap_totals(gap_rows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, cause): `gaps` (count) and `idle_us` (their total length)."""
    return gap_totals_plan(gap_rows.lazy()).collect()


def gap_totals_plan(gap_rows: pl.LazyFrame) -> pl.LazyFrame:
    """`gap_totals` as a lazy query."""
    return gap_rows.group_by([*KEYS, "cause"]).agg(_TOTALS).sort([*KEYS, "cause"])


def gap_steps(gap_rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step) window: step_us, idle_us, gaps and one `<cause>_us` column per cause (0 when none)."""
    return gap_steps_plan(gap_rows.lazy(), windows).collect()


def gap_steps_plan(gap_rows: pl.LazyFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """`gap_steps` as a lazy query."""
    totals = gap_rows.group_by(KEYS).agg(*_TOTALS, *_CAUSE_SUMS)
    return (
        windows.lazy().select(_STEP_US).join(totals, on=KEYS, how="left").with_columns(_NONE_IDLE).sort(KEYS)
    )


def gap_ranks(per_step: pl.DataFrame) -> pl.DataFrame:
    """Per rank: `steps` and the median over its steps of `step_us`, `idle_us` and each `<cause>_us`."""
    medians = [pl.col(c).median() for c in ("step_us", "idle_us", *CAUSE_COLUMNS.values())]
    return per_step.group_by("rank").agg(pl.len().cast(pl.Int64).alias("steps"), *medians).sort("rank")


# ---------------------------------------------------------------- the whole analysis


def _check_virtual_stages(virtual_stages: int) -> None:
    if virtual_stages < 1:
        raise UsageError(
            f"--virtual-stages {virtual_stages}: the model chunks per pipeline stage must be >= 1"
        )


def bubbles_from_parts(
    gap_rows: pl.DataFrame,
    per_step: pl.DataFrame,
    per_cause: pl.DataFrame,
    compute: pl.DataFrame,
    windows: pl.DataFrame,
    p2p: pl.DataFrame,
    virtual_stages: int = 1,
    path: CriticalPath | None = None,
    other: pl.DataFrame | None = None,
) -> BubbleAnalysis:
    """The bubble analysis from per-rank parts: gaps (all, or each rank's longest), `gap_steps`, `gap_totals`,
    |C| per (rank, step) (`compute_us`), the step windows, the P2P kernels (`p2p_kernels`) and the exposed
    communication of groups other than the pipeline's (`pipeline_bubble`'s `other`); with the run's critical
    path, what held the idle on it per rank (`idle_by_path`)."""
    _check_virtual_stages(virtual_stages)
    pipeline = pipeline_bubble(compute, windows, p2p, virtual_stages, other)
    return BubbleAnalysis(
        idle_by_path=idle_by_path(path),
        gaps=gap_rows,
        per_cause=per_cause,
        per_step=per_step,
        per_rank=gap_ranks(per_step),
        pipeline=pipeline,
        pipelines=pipeline_table(pipeline),
        virtual_stages=virtual_stages,
        unknown_group_p2p=int(p2p.get_column("members").is_null().sum()),
    )


def idle_by_path(path: CriticalPath | None) -> pl.DataFrame:
    """Per rank, the medians over its steps of each category that holds the idle device on the critical path
    (docs/metrics.md, "Critical path"): the causes of idle, measured."""
    if path is None:
        return pl.DataFrame()
    return path.per_rank.select("rank", *(f"{c}_us" for c in IDLE_CATEGORIES))


def analyze_bubbles(
    events: pl.DataFrame,
    windows: pl.DataFrame,
    launches: pl.DataFrame,
    comm_kernels: pl.DataFrame | None = None,
    virtual_stages: int = 1,
) -> BubbleAnalysis:
    """Idle gaps and the pipeline bubble from classified device events, step windows, launches (`rank`,
    `correlation`, `launch_us`) and, when available, the collectives frame. Raises `UsageError` for
    `virtual_stages` < 1."""
    _check_virtual_stages(virtual_stages)
    gap_rows = idle_gaps(events, windows, launches)
    compute = (
        compute_union(events, windows)
        if events.height
        else pl.DataFrame(schema={"rank": pl.Int64, "step": pl.Int64, "compute_us": pl.Float64})
    )
    return bubbles_from_parts(
        gap_rows,
        gap_steps(gap_rows, windows),
        gap_totals(gap_rows),
        compute,
        windows,
        p2p_kernels(comm_kernels, events),
        virtual_stages,
    )


def run_bubbles(
    run: Run,
    events: pl.DataFrame,
    windows: pl.DataFrame,
    comm_kernels: pl.DataFrame | None = None,
    virtual_stages: int = 1,
) -> BubbleAnalysis:
    """`analyze_bubbles` with the launches read from `run` (on the run's time base)."""
    return analyze_bubbles(events, windows, launches(run), comm_kernels, virtual_stages)
