"""One rank's communication time per (step, group), the part of it no compute hides, and where its calls
fall in the step's compute (the map's share of docs/metrics.md, "Parallelism dimensions").

Per (rank, step, group): `comm_us` = |M_g|, the union of the group's communication kernels clipped to the step
window; `exposed_us` = |M_g \\ C| = |M_g ∪ C| - |C|, C the union of the step's compute kernels. The reduce
sums them over the groups of one dimension. Per (rank, step, group, collective): `calls` and `early_calls`,
`bytes` and `early_bytes` (their S where known), the calls that start before `EARLY_COMPUTE` of the step's
compute has run (the forward pass takes about a
third of a step's compute: a call that early carries activations, not gradients); measured on compute, not
on time, so waiting for peers does not move a call.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from traceview.across_ranks.matching import group_expr
from traceview.core.intervals import clipped, merged, union_lengths
from traceview.dimensions.features import communicated

EARLY_COMPUTE = 0.3
"""A call is early when less than this share of its step's compute precedes it."""
GROUP_PHASE_SCHEMA: Mapping[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "group": pl.Utf8(),
    "collective": pl.Utf8(),
    "calls": pl.Int64(),
    "early_calls": pl.Int64(),
    "bytes": pl.Float64(),
    "early_bytes": pl.Float64(),
}
GROUP_TIME_SCHEMA: Mapping[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "group": pl.Utf8(),
    "comm_us": pl.Float64(),
    "exposed_us": pl.Float64(),
}


_WINDOWS = [pl.col("rank"), pl.col("step"), pl.col("window_start_us"), pl.col("window_end_us")]
_COMPUTE = [pl.col("rank"), pl.col("start_us"), pl.col("end_us")]


def _clipped_inputs(
    events: pl.DataFrame, kernels: pl.LazyFrame, windows: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The step windows, `kernels` cut into them and the compute events cut into them: one query for the
    three."""
    bounds = windows.lazy().select(_WINDOWS)
    compute = events.lazy().filter(pl.col("event_class") == "compute").select(_COMPUTE)
    windows_kept, comm, computed = pl.collect_all(
        [bounds, clipped(kernels, bounds, ["rank"]), clipped(compute, bounds, ["rank"])]
    )
    return windows_kept, comm, computed


def group_step_time(events: pl.DataFrame, kernels: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, group): comm_us and exposed_us (module docstring); `GROUP_TIME_SCHEMA`. Two
    queries."""
    if kernels.height == 0 or windows.height == 0:
        return pl.DataFrame(schema=GROUP_TIME_SCHEMA)
    found = (
        kernels.lazy()
        .filter(communicated())
        .select("rank", group_expr().alias("group"), "start_us", "end_us")
    )
    _, comm, compute = _clipped_inputs(events, found, windows)
    keys = ["rank", "step", "group"]
    cells = comm.lazy().select(keys).unique()
    both = pl.concat(
        [
            comm.lazy().select(*keys, "start_us", "end_us"),
            compute.lazy().join(cells, on=["rank", "step"]).select(*keys, "start_us", "end_us"),
        ],
        rechunk=True,
    )
    own = union_lengths(comm.lazy(), keys, "comm_us")
    covered = union_lengths(both, keys, "_with_compute")
    compute_us = union_lengths(compute.lazy(), ["rank", "step"], "_compute")
    return (
        own.join(covered, on=keys)
        .join(compute_us, on=["rank", "step"], how="left")
        .select(
            *keys,
            "comm_us",
            (pl.col("_with_compute") - pl.col("_compute").fill_null(0.0))
            .clip(lower_bound=0.0)
            .alias("exposed_us"),
        )
        .select([pl.col(c).cast(t) for c, t in GROUP_TIME_SCHEMA.items()])
        .sort(keys)
        .collect()
    )


def group_phases(events: pl.DataFrame, kernels: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, group, collective): calls and early calls (module docstring); `GROUP_PHASE_SCHEMA`.
    Two queries."""
    if kernels.height == 0 or windows.height == 0:
        return pl.DataFrame(schema=GROUP_PHASE_SCHEMA)
    found = (
        kernels.lazy()
        .filter(communicated() & pl.col("first_in_call"))
        .select("rank", group_expr().alias("group"), "collective", "start_us", "size_bytes")
    )
    bounds = windows.lazy().select(_WINDOWS)
    compute = events.lazy().filter(pl.col("event_class") == "compute").select(_COMPUTE)
    bounds_kept, calls, cut = pl.collect_all([bounds, found, clipped(compute, bounds, ["rank"])])
    if calls.height == 0:
        return pl.DataFrame(schema=GROUP_PHASE_SCHEMA)
    return _phases(calls, merged(cut.lazy(), ["rank", "step"]), bounds_kept)


def _phases(calls: pl.DataFrame, compute: pl.LazyFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, group, collective) of the `calls`: calls, and those early in the step's merged
    `compute` segments."""
    done = (pl.col("end_us") - pl.col("start_us")).cum_sum().over("rank", "step")
    segments = compute.with_columns(
        (done - (pl.col("end_us") - pl.col("start_us"))).alias("_before"), done.alias("_done")
    ).with_columns(pl.col("_done").max().over("rank", "step").alias("_total"))
    placed = (
        calls.lazy()
        .sort("start_us")
        .join_asof(
            bounds.lazy().sort("window_start_us"),
            left_on="start_us",
            right_on="window_start_us",
            by="rank",
            check_sortedness=False,
        )
        .filter(pl.col("step").is_not_null() & (pl.col("start_us") < pl.col("window_end_us")))
    )
    found = placed.join_asof(
        segments.select("rank", "step", "start_us", "end_us", "_before", "_total")
        .rename({"start_us": "_seg_start", "end_us": "_seg_end"})
        .sort("_seg_start"),
        left_on="start_us",
        right_on="_seg_start",
        by=["rank", "step"],
        check_sortedness=False,
    )
    before = (pl.col("_before") + pl.min_horizontal("start_us", "_seg_end") - pl.col("_seg_start")).fill_null(
        0.0
    )
    early = (before < EARLY_COMPUTE * pl.col("_total")).fill_null(False)
    return (
        found.group_by("rank", "step", "group", "collective")
        .agg(
            pl.len().alias("calls"),
            early.sum().alias("early_calls"),
            pl.col("size_bytes").sum().alias("bytes"),
            pl.col("size_bytes").filter(early).sum().alias("early_bytes"),
        )
        .select([pl.col(c).cast(t) for c, t in GROUP_PHASE_SCHEMA.items()])
        .sort("rank", "step", "group", "collective")
        .collect()
    )
