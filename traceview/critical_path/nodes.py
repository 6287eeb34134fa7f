"""The collectives as open nodes of the path (docs/metrics.md, "Critical path", Collectives as open nodes).

The map knows each rank's path but not its peers: it leaves every collective open and records, per
communication row of a step (a kernel, a copy-engine transfer or a host collective, by its entry and exit on
the rank's clock), how much of the path from the window start to its entry, and to its exit, was compute
(device categories), communication (`comm_transfer`) and host (host categories and `other`). One row per
distinct (rank, step, entry, exit): bounded by the step's collectives. The reduce reads them at each matched
call: the communication on the path between its entry and exit bounds its peer wait (`collective_waits`), and
the path's compute and host time between two collectives splits the replay's segment between them
(`traceview.replay.skeleton`).
"""

from __future__ import annotations

from functools import cache

import polars as pl

from traceview.critical_path.categories import (
    COMM_TRANSFER,
    DEVICE_CATEGORIES,
    IDLE_CATEGORIES,
    PRIORITY,
)

KEYS = ["rank", "step"]
KINDS = ("compute", "host", "comm")
"""The path's time by kind: device compute, communication, host (every other category)."""
ENTRY_COLUMNS = tuple(f"entry_{kind}_us" for kind in KINDS)
EXIT_COLUMNS = tuple(f"exit_{kind}_us" for kind in KINDS)
NODE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "entry_us": pl.Float64(),
    "exit_us": pl.Float64(),
    **{column: pl.Float64() for column in (*ENTRY_COLUMNS, *EXIT_COLUMNS)},
}
"""A node: its step, entry and exit on the rank's clock, and the path's time of each kind from the window's
start to its entry (`entry_<kind>_us`) and to its exit (`exit_<kind>_us`, the window's end at most)."""


@cache
def _kind() -> pl.Expr:
    """A segment's kind as its index in `KINDS` (a byte a segment, not a string: a rank of millions of
    events has millions of segments)."""
    priority = pl.col("priority")
    return (
        pl.when(priority < len(DEVICE_CATEGORIES))
        .then(pl.lit(KINDS.index("compute"), pl.Int8))
        .when(priority == PRIORITY[COMM_TRANSFER])
        .then(pl.lit(KINDS.index("comm"), pl.Int8))
        .otherwise(pl.lit(KINDS.index("host"), pl.Int8))
    )


def _running(segments: pl.LazyFrame) -> pl.LazyFrame:
    """Path segments (rank, step, t, priority, seg_us) with their kind and, per kind, the path's time of
    that kind from the window start to the segment's start (`_before_<kind>`)."""
    ordered = segments.select(*KEYS, "t", "seg_us", _kind().alias("_kind")).sort([*KEYS, "t"])
    return ordered.with_columns(_running_columns())


@cache
def _running_columns() -> tuple[pl.Expr, ...]:
    """Per kind, the window's time of that kind before each segment (its running sum less its own time),
    with no column of each segment's own time kept beside it: built once, at first use (building costs
    more than running on a small rank)."""
    held = [
        pl.when(pl.col("_kind") == code).then(pl.col("seg_us")).otherwise(0.0) for code in range(len(KINDS))
    ]
    return tuple(
        (own.cum_sum().over(KEYS) - own).alias(f"_before_{kind}")
        for own, kind in zip(held, KINDS, strict=True)
    )


def _path_time_at(times: pl.LazyFrame, running: pl.LazyFrame, prefix: str) -> pl.LazyFrame:
    """`times` (rank, step, x) with the path's time of each kind from the window start to x
    (`<prefix>_<kind>_us`): the segment that starts last at or before x, its time before, and the part of it
    up to x."""
    found = times.sort("x").join_asof(
        running, left_on="x", right_on="t", by=KEYS, strategy="backward", check_sortedness=False
    )
    inside = (pl.col("x") - pl.col("t")).clip(lower_bound=0.0)
    partial = pl.min_horizontal(inside, pl.col("seg_us"))
    return found.select(
        *KEYS,
        "x",
        *(
            (pl.col(f"_before_{kind}") + pl.when(pl.col("_kind") == code).then(partial).otherwise(0.0))
            .fill_null(0.0)
            .alias(f"{prefix}_{kind}_us")
            for code, kind in enumerate(KINDS)
        ),
    )


def nodes_plan(segments: pl.LazyFrame, kernels: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """The open nodes of a batch (`NODE_SCHEMA`, module docstring): `segments` the path's (rank, step, t,
    priority, seg_us), `kernels` the communication rows (rank, start_us, end_us, staging_copy), `windows`
    the step windows. A node belongs to the window that holds its entry (as a matched call does)."""
    rows = kernels.filter(~pl.col("staging_copy").fill_null(False)).select(
        pl.col("rank").cast(pl.Int64), pl.col("start_us").alias("entry_us"), pl.col("end_us").alias("exit_us")
    )
    starts = windows.select(
        pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64), "window_start_us", "window_end_us"
    ).sort("window_start_us")
    nodes = (
        rows.unique()
        .sort("entry_us")
        .join_asof(starts, left_on="entry_us", right_on="window_start_us", by="rank", check_sortedness=False)
        .filter(pl.col("step").is_not_null() & (pl.col("entry_us") <= pl.col("window_end_us")))
        .select(*KEYS, "entry_us", "exit_us")
    )
    running = _running(segments).cache()
    entries = _path_time_at(nodes.select(*KEYS, pl.col("entry_us").alias("x")).unique(), running, "entry")
    exits = _path_time_at(nodes.select(*KEYS, pl.col("exit_us").alias("x")).unique(), running, "exit")
    return (
        nodes.join(entries.rename({"x": "entry_us"}), on=[*KEYS, "entry_us"], how="left")
        .join(exits.rename({"x": "exit_us"}), on=[*KEYS, "exit_us"], how="left")
        .select(list(NODE_SCHEMA))
        .sort([*KEYS, "entry_us", "exit_us"])
    )


def at_calls(calls: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """`calls` (rank, step, start_us, end_us on the rank's clock: matched calls) with the path's time of each
    kind at their entry (`ENTRY_COLUMNS`) and exit (`EXIT_COLUMNS`), read off the nodes of their first and
    last rows; null where the map recorded no node."""
    found = nodes.cast(NODE_SCHEMA)  # type: ignore[arg-type]
    entries = found.select(*KEYS, pl.col("entry_us").alias("start_us"), *ENTRY_COLUMNS)
    exits = found.select(*KEYS, pl.col("exit_us").alias("end_us"), *EXIT_COLUMNS)
    keyed = calls.with_columns(pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64))
    return keyed.join(
        entries.unique([*KEYS, "start_us"]), on=[*KEYS, "start_us"], how="left", maintain_order="left"
    ).join(exits.unique([*KEYS, "end_us"]), on=[*KEYS, "end_us"], how="left", maintain_order="left")


def kind_totals(per_step: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step) of the path's `per_step`: its compute (`path_compute_us`: the device categories) and
    host time (`path_host_us`: the host categories and `other`), the kinds the nodes count."""
    compute = pl.sum_horizontal(f"{category}_us" for category in DEVICE_CATEGORIES)
    host = pl.sum_horizontal(f"{category}_us" for category in IDLE_CATEGORIES)
    return per_step.select(
        pl.col("rank").cast(pl.Int64),
        pl.col("step").cast(pl.Int64),
        compute.alias("path_compute_us"),
        host.alias("path_host_us"),
    )


def empty_nodes() -> pl.DataFrame:
    """No node (a summary without communication)."""
    return pl.DataFrame(schema=NODE_SCHEMA)
