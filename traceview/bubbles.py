"""Bubbles (SPEC section 7): the device's idle gaps inside each step, each with its cause, and the pipeline
bubble of pipeline-parallel runs against the theory (P-1)/(M*V+P-1).

Idle gaps. G = the union of every device event (kernels and memory ops) clipped to the step window W; the gaps
are the holes of G inside W plus W's leading and trailing idle, so per (rank, step) they add up to the
budget's `idle_us` = |W| - |G|. The gap's *next event* is the rank's first device event that starts at or
after the gap's end (the one launched first when several start together; for a trailing gap it may lie in a
later step); its *launch* is the start of the runtime call with the same correlation id. `GAP_RULES` names
the cause, first matching rule wins.

Pipeline bubble. Point-to-point kernels (`SendRecv`, `Send`, `Recv`, from the collective call where linked)
whose process group lists its ranks link those ranks; a pipeline is a connected set of linked ranks, its stage
count P is the number of ranks in it and a rank's stage is its ordinal there (lowest rank first). A P2P kernel
with an unknown group is no evidence (all-to-all calls often run as `SendRecv` kernels). Per (rank, step):
M = ceil(P2P kernels / (2 * boundaries)), boundaries = 2V - [first stage] - [last stage] (the stage
boundaries the rank's V model chunks touch, each crossed by one forward activation and one backward gradient
per micro-batch); measured fraction = (|W| - |C|) / |W| with C the union of compute kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceview.errors import UsageError
from traceview.intervals import clip_to_windows, gaps, merge_intervals, union_length
from traceview.vocab import canonical_collective_expr

KEYS = ["rank", "step"]
P2P_COLLECTIVES = ("SendRecv", "Send", "Recv")


@dataclass(frozen=True)
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
SEGMENT_SCHEMA = {"rank": pl.Int64, "step": pl.Int64, "start_us": pl.Float64, "end_us": pl.Float64}
NEXT_SCHEMA = {
    "rank": pl.Int64,
    "next_start_us": pl.Float64,
    "next_name": pl.Utf8,
    "next_class": pl.Utf8,
    "next_launch_us": pl.Float64,
}
PIPELINE_SCHEMA = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "pipeline": pl.Int64,
    "stages": pl.Int64,
    "stage": pl.Int64,
    "virtual_stages": pl.Int64,
    "p2p_kernels": pl.Int64,
    "micro_batches": pl.Int64,
    "step_us": pl.Float64,
    "compute_us": pl.Float64,
    "bubble_us": pl.Float64,
    "bubble_fraction": pl.Float64,
    "theory_fraction": pl.Float64,
    "excess": pl.Float64,
}


@dataclass(frozen=True)
class BubbleAnalysis:
    """Idle gaps and the pipeline bubble of a run; renderers read it and never compute.

    `gaps`: one row per gap (`GAP_SCHEMA`). `per_cause`: rank, step, cause, gaps, idle_us. `per_step`: rank,
    step, step_us, idle_us, gaps and one `<cause>_us` column per cause. `pipeline`: one row per (rank, step) of
    a pipeline rank (`PIPELINE_SCHEMA`), empty when no pipeline was found; `pipelines`: pipeline, stages,
    ranks (text), steps, median micro_batches, bubble_fraction, theory_fraction. `unknown_group_p2p`: P2P
    kernels whose group is unknown (not used as evidence).
    """

    gaps: pl.DataFrame
    per_cause: pl.DataFrame
    per_step: pl.DataFrame
    pipeline: pl.DataFrame
    pipelines: pl.DataFrame
    virtual_stages: int
    unknown_group_p2p: int

    @property
    def pipeline_detected(self) -> bool:
        """Whether point-to-point kernels linked ranks into at least one pipeline."""
        return self.pipelines.height > 0

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


def device_segments(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The union of every device event inside each window: disjoint `rank`, `step`, `start_us`, `end_us`."""
    clipped = clip_to_windows(events.select("rank", "start_us", "end_us"), windows, ["rank"])
    return merge_intervals(clipped.select("rank", "step", "start_us", "end_us"), KEYS)


def _edge_gaps(segments: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Each window's leading idle (to its first activity, or all of it) and trailing idle (after its last)."""
    bounds = segments.group_by(KEYS).agg(
        pl.col("start_us").min().alias("first"), pl.col("end_us").max().alias("last")
    )
    table = windows.join(bounds, on=KEYS, how="left")
    leading = table.select(
        *KEYS,
        pl.col("window_start_us").alias("start_us"),
        pl.coalesce("first", "window_end_us").alias("end_us"),
        pl.lit("leading").alias("position"),
    )
    trailing = table.filter(pl.col("last").is_not_null()).select(
        *KEYS,
        pl.col("last").alias("start_us"),
        pl.col("window_end_us").alias("end_us"),
        pl.lit("trailing").alias("position"),
    )
    return pl.concat([leading, trailing]).filter(pl.col("end_us") > pl.col("start_us"))


def _next_events(events: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, start time) the device event that starts then (the earliest launched): `rank`,
    `next_start_us`, `next_name`, `next_class`, `next_launch_us`."""
    launch = launches.select("rank", "correlation", pl.col("launch_us").alias("next_launch_us")).unique(
        ["rank", "correlation"]
    )
    return (
        events.select(
            "rank",
            "start_us",
            "correlation",
            pl.col("name").alias("next_name"),
            pl.col("event_class").alias("next_class"),
        )
        .join(launch, on=["rank", "correlation"], how="left")
        .sort(["rank", "start_us", "next_launch_us", "next_name"], nulls_last=True)
        .unique(["rank", "start_us"], keep="first", maintain_order=True)
        .select(
            "rank", pl.col("start_us").alias("next_start_us"), "next_name", "next_class", "next_launch_us"
        )
        .sort("next_start_us")
    )


def _cause() -> pl.Expr:
    """The cause of the first rule of `GAP_RULES` that holds (coalesce takes the first non-null)."""
    return pl.coalesce([pl.when(rule.when).then(pl.lit(rule.cause)) for rule in GAP_RULES]).alias("cause")


def idle_gaps(events: pl.DataFrame, windows: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Every idle gap of every (rank, step) window with its cause (`GAP_SCHEMA`), from classified device events,
    step windows and launches (`rank`, `correlation`, `launch_us`)."""
    if windows.height == 0:
        return pl.DataFrame(schema=GAP_SCHEMA)
    has_events = events.height > 0
    segments = device_segments(events, windows) if has_events else pl.DataFrame(schema=SEGMENT_SCHEMA)
    inner = gaps(segments, KEYS).with_columns(pl.lit("inner").alias("position"))
    holes = pl.concat([_edge_gaps(segments, windows), inner], how="vertical_relaxed").sort("end_us")
    following = _next_events(events, launches) if has_events else pl.DataFrame(schema=NEXT_SCHEMA)
    return (
        holes.join_asof(
            following,
            left_on="end_us",
            right_on="next_start_us",
            by="rank",
            strategy="forward",
            check_sortedness=False,
        )
        .with_columns((pl.col("end_us") - pl.col("start_us")).alias("dur_us"), _cause())
        .select([pl.col(name).cast(dtype) for name, dtype in GAP_SCHEMA.items()])
        .sort(["rank", "step", "start_us"])
    )


def gap_totals(gap_rows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, cause): `gaps` (count) and `idle_us` (their total length)."""
    return (
        gap_rows.group_by([*KEYS, "cause"])
        .agg(pl.len().cast(pl.Int64).alias("gaps"), pl.col("dur_us").sum().alias("idle_us"))
        .sort([*KEYS, "cause"])
    )


def gap_steps(gap_rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step) window: step_us, idle_us, gaps and one `<cause>_us` column per cause (0 when none)."""
    by_cause = [
        pl.col("dur_us").filter(pl.col("cause") == cause).sum().alias(column)
        for cause, column in CAUSE_COLUMNS.items()
    ]
    totals = gap_rows.group_by(KEYS).agg(
        pl.len().cast(pl.Int64).alias("gaps"), pl.col("dur_us").sum().alias("idle_us"), *by_cause
    )
    return (
        windows.select(*KEYS, (pl.col("window_end_us") - pl.col("window_start_us")).alias("step_us"))
        .join(totals, on=KEYS, how="left")
        .with_columns(pl.col("gaps").fill_null(0), pl.col("idle_us", *CAUSE_COLUMNS.values()).fill_null(0.0))
        .sort(KEYS)
    )


# ---------------------------------------------------------------- pipeline bubble


def p2p_kernels(comm_kernels: pl.DataFrame | None, events: pl.DataFrame) -> pl.DataFrame:
    """Point-to-point kernels: `rank`, `start_us`, `pg_key`, `members` (list of ranks; null when unknown).

    From the collectives frame (`traceview.collectives`: the collective of the call) when given; else from
    the classified events (the kernel's own args, else its name)."""
    if comm_kernels is not None:
        frame = comm_kernels.filter(pl.col("on_device")).select(
            "rank", "start_us", "collective", "pg_key", "pg_ranks"
        )
    elif events.height:
        collective = pl.coalesce(
            canonical_collective_expr(pl.col("collective_name")), pl.col("kernel_collective")
        )
        frame = events.filter(pl.col("event_class") == "comm").select(
            "rank", "start_us", collective.alias("collective"), pl.col("pg_name").alias("pg_key"), "pg_ranks"
        )
    else:
        return pl.DataFrame(
            schema={"rank": pl.Int64, "start_us": pl.Float64, "pg_key": pl.Utf8, "members": pl.List(pl.Int64)}
        )
    members = (
        pl.col("pg_ranks")
        .str.extract_all(r"-?\d+")
        .list.eval(pl.element().cast(pl.Int64))
        .list.unique()
        .list.sort()
    )
    return (
        frame.filter(pl.col("collective").is_in(P2P_COLLECTIVES))
        .with_columns(members.alias("members"))
        .with_columns(pl.when(pl.col("members").list.len() >= 2).then(pl.col("members")).alias("members"))
        .select("rank", "start_us", "pg_key", "members")
    )


def pipeline_stages(p2p: pl.DataFrame) -> pl.DataFrame:
    """Every rank a known P2P group names: `rank`, `pipeline` (its lowest rank), `stages` (P), `stage`.

    Pipelines are the connected components of the P2P groups, found by propagating the lowest rank label
    through the groups until nothing changes (at most one round per group)."""
    groups = p2p.drop_nulls("members").select("members").unique().with_row_index("group").explode("members")
    groups = groups.rename({"members": "rank"}).with_columns(pl.col("group").cast(pl.Int64))
    labels = groups.select("rank").unique().with_columns(pl.col("rank").alias("pipeline"))
    for _ in range(groups.get_column("group").n_unique()):
        low = groups.join(labels, on="rank").group_by("group").agg(pl.col("pipeline").min())
        updated = groups.join(low, on="group").group_by("rank").agg(pl.col("pipeline").min())
        if updated.sort("rank").equals(labels.sort("rank")):
            break
        labels = updated
    return (
        labels.with_columns(
            pl.len().over("pipeline").cast(pl.Int64).alias("stages"),
            pl.col("rank").rank("ordinal").over("pipeline").cast(pl.Int64).sub(1).alias("stage"),
        )
        .select("rank", pl.col("pipeline").cast(pl.Int64), "stages", "stage")
        .sort("rank")
    )


def _in_windows(frame: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Rows of `frame` with the `step` of the window of their rank that contains their `start_us`."""
    starts = windows.select("rank", "step", "window_start_us", "window_end_us").sort("window_start_us")
    return (
        frame.sort("start_us")
        .join_asof(starts, left_on="start_us", right_on="window_start_us", by="rank", check_sortedness=False)
        .filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("window_end_us")))
    )


def _micro_batches(virtual_stages: int) -> pl.Expr:
    boundaries = (
        2 * virtual_stages
        - (pl.col("stage") == 0).cast(pl.Int64)
        - (pl.col("stage") == pl.col("stages") - 1).cast(pl.Int64)
    )
    per_boundary = pl.col("p2p_kernels") / (2 * boundaries)
    return pl.when(pl.col("p2p_kernels") > 0).then(per_boundary.ceil().cast(pl.Int64)).alias("micro_batches")


def pipeline_bubble(
    events: pl.DataFrame, windows: pl.DataFrame, p2p: pl.DataFrame, virtual_stages: int = 1
) -> pl.DataFrame:
    """Per (rank, step) of every pipeline rank: the measured bubble fraction against (P-1)/(M*V+P-1)
    (`PIPELINE_SCHEMA`); empty when no known P2P group links two ranks."""
    stages = pipeline_stages(p2p)
    if stages.height == 0 or windows.height == 0:
        return pl.DataFrame(schema=PIPELINE_SCHEMA)
    counts = (
        _in_windows(p2p.drop_nulls("members"), windows)
        .group_by(KEYS)
        .agg(pl.len().cast(pl.Int64).alias("p2p_kernels"))
    )
    compute = clip_to_windows(
        events.filter(pl.col("event_class") == "compute").select("rank", "start_us", "end_us"),
        windows,
        ["rank"],
    )
    table = (
        windows.join(stages, on="rank", how="inner")
        .join(counts, on=KEYS, how="left")
        .join(union_length(compute, KEYS, "compute_us"), on=KEYS, how="left")
        .with_columns(
            (pl.col("window_end_us") - pl.col("window_start_us")).alias("step_us"),
            pl.col("p2p_kernels").fill_null(0),
            pl.col("compute_us").fill_null(0.0),
            pl.lit(virtual_stages, pl.Int64).alias("virtual_stages"),
        )
    )
    p_minus_1 = pl.col("stages") - 1
    return (
        table.with_columns(
            _micro_batches(virtual_stages), (pl.col("step_us") - pl.col("compute_us")).alias("bubble_us")
        )
        .with_columns(
            pl.when(pl.col("step_us") > 0)
            .then(pl.col("bubble_us") / pl.col("step_us"))
            .alias("bubble_fraction"),
            (p_minus_1 / (pl.col("micro_batches") * virtual_stages + p_minus_1)).alias("theory_fraction"),
        )
        .with_columns((pl.col("bubble_fraction") - pl.col("theory_fraction")).alias("excess"))
        .select([pl.col(name).cast(dtype) for name, dtype in PIPELINE_SCHEMA.items()])
        .sort(KEYS)
    )


def pipeline_table(pipeline: pl.DataFrame) -> pl.DataFrame:
    """One row per pipeline: stages, its ranks present (text), steps, medians of M, measured and theory."""
    return (
        pipeline.group_by("pipeline")
        .agg(
            pl.col("stages").first(),
            pl.col("rank").unique().sort().cast(pl.Utf8).str.join(", ").alias("ranks"),
            pl.col("step").n_unique().cast(pl.Int64).alias("steps"),
            pl.col("micro_batches").median(),
            pl.col("bubble_fraction").median(),
            pl.col("theory_fraction").median(),
        )
        .sort("pipeline")
    )


# ---------------------------------------------------------------- the whole analysis


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
    if virtual_stages < 1:
        raise UsageError(f"virtual stages: {virtual_stages} is not a positive whole number")
    gap_rows = idle_gaps(events, windows, launches)
    p2p = p2p_kernels(comm_kernels, events)
    pipeline = pipeline_bubble(events, windows, p2p, virtual_stages)
    return BubbleAnalysis(
        gaps=gap_rows,
        per_cause=gap_totals(gap_rows),
        per_step=gap_steps(gap_rows, windows),
        pipeline=pipeline,
        pipelines=pipeline_table(pipeline),
        virtual_stages=virtual_stages,
        unknown_group_p2p=int(p2p.get_column("members").is_null().sum()),
    )
