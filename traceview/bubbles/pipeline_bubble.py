"""The pipeline bubble of docs/metrics.md, "Bubbles" (pipeline-parallel runs), against the theory
(P-1)/(M*V+P-1).

Pipeline bubble. Point-to-point kernels (`SendRecv`, `Send`, `Recv`, from the collective call where linked)
whose process group lists its ranks link those ranks; a pipeline is a connected set of linked ranks, its stage
count P is the number of ranks in it and a rank's stage is its ordinal there (lowest rank first). A P2P kernel
with an unknown group is no evidence (all-to-all calls often run as `SendRecv` kernels). Per (rank, step):
M = ceil(P2P kernels / (2 * boundaries)), boundaries = 2V - [first stage] - [last stage] (the stage
boundaries the rank's V model chunks touch, each crossed by one forward activation and one backward gradient
per micro-batch); measured fraction = pipeline idle / |W|, pipeline idle = |W| - |C| - X with C the union of
compute kernels and X the communication of the rank's other groups that no compute hides (the DP all-reduce's
exposed time: it is not the pipeline's bubble; summed over those groups, `other_exposed_us`, from the map's
time per group; zero when not given). X summed per group can count twice a moment two other groups share, so
the idle is a lower bound there.
"""

from __future__ import annotations

import polars as pl

from traceview.core.intervals import clip_to_windows, union_length
from traceview.core.vocab import canonical_collective_expr

KEYS = ["rank", "step"]
P2P_COLLECTIVES = ("SendRecv", "Send", "Recv")
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
    "other_exposed_us": pl.Float64,
    "bubble_us": pl.Float64,
    "bubble_fraction": pl.Float64,
    "theory_fraction": pl.Float64,
    "excess": pl.Float64,
}


def p2p_kernels(comm_kernels: pl.DataFrame | None, events: pl.DataFrame) -> pl.DataFrame:
    """Point-to-point kernels: `rank`, `start_us`, `pg_key`, `members` (list of ranks; null when unknown).

    From the collectives frame (`traceview.collectives.kernels`: the collective of the call) when given; else
    from the classified events (the kernel's own args, else its name)."""
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


def compute_union(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """|C| per (rank, step): the union of compute kernels inside each window (`rank`, `step`, `compute_us`);
    the time budget's `comp_us`."""
    compute = clip_to_windows(
        events.filter(pl.col("event_class") == "compute").select("rank", "start_us", "end_us"),
        windows,
        ["rank"],
    )
    return union_length(compute, KEYS, "compute_us")


def pipeline_bubble(
    compute: pl.DataFrame,
    windows: pl.DataFrame,
    p2p: pl.DataFrame,
    virtual_stages: int = 1,
    other: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (rank, step) of every pipeline rank: the measured bubble fraction against (P-1)/(M*V+P-1)
    (`PIPELINE_SCHEMA`) from |C| per (rank, step) (`compute_union`, or the budget's `comp_us` as
    `compute_us`), the step windows, the P2P kernels and `other` (`rank`, `step`, `other_exposed_us`: the
    exposed communication of the rank's groups that are not its pipeline's); empty when no known P2P group
    links two ranks."""
    stages = pipeline_stages(p2p)
    if stages.height == 0 or windows.height == 0:
        return pl.DataFrame(schema=PIPELINE_SCHEMA)
    counts = (
        _in_windows(p2p.drop_nulls("members"), windows)
        .group_by(KEYS)
        .agg(pl.len().cast(pl.Int64).alias("p2p_kernels"))
    )
    if other is None:
        other = pl.DataFrame(schema={"rank": pl.Int64, "step": pl.Int64, "other_exposed_us": pl.Float64})
    table = (
        windows.join(stages, on="rank", how="inner")
        .join(counts, on=KEYS, how="left")
        .join(compute.select(*KEYS, "compute_us"), on=KEYS, how="left")
        .join(other.select(*KEYS, "other_exposed_us"), on=KEYS, how="left")
        .with_columns(
            (pl.col("window_end_us") - pl.col("window_start_us")).alias("step_us"),
            pl.col("p2p_kernels").fill_null(0),
            pl.col("compute_us").fill_null(0.0),
            pl.col("other_exposed_us").fill_null(0.0),
            pl.lit(virtual_stages, pl.Int64).alias("virtual_stages"),
        )
    )
    idle = (
        (pl.col("step_us") - pl.col("compute_us") - pl.col("other_exposed_us")).clip(lower_bound=0.0).round(3)
    )
    p_minus_1 = pl.col("stages") - 1
    return (
        table.with_columns(_micro_batches(virtual_stages), idle.alias("bubble_us"))
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
