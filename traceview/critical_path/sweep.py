"""The map's part of the critical path (docs/metrics.md, "Critical path"): per (rank, step), each moment of
the step window W given to one category, by one sweep over the boundaries of every event, and the events that
held the most time (the holders), named.

The graph is not materialised: its edges decide which node the path passes through at each moment, and the
rules that follow from them are applied to every moment at once. Stream order and launch-to-device edges
make a running device event the path's node while it runs (the device is the step's last dependency while
it works); while the device idles, the next device event waits on its launch, so the path is on the
launching thread: the innermost of its host rows at that moment (a blocking runtime call, a launch, an
operator, an annotation), or on no recorded event (`other`). Host collectives (gloo, MPI) are comm nodes:
open until the reduce resolves which part of them waited for a peer.

The intervals of each priority are first made disjoint (`_extending`: nested ones dropped, overlapping ones
trimmed), then cut to their windows; each becomes two points, its priority's bit (2^priority) added at its
start and taken away at its end; a point's running sum then has the bits of the priorities open from it to
the next point, and the lowest set bit holds that segment. Each window's sum returns to zero, so the running
sum needs no grouping.
"""

from __future__ import annotations

from functools import cache

import polars as pl

from traceview.core.intervals import clipped, sorted_reach
from traceview.critical_path._syncs import replaced_calls, sync_counts, sync_intervals
from traceview.critical_path.categories import (
    CATEGORIES,
    CATEGORY_COLUMNS,
    LONG_LAUNCH_US,
    OTHER,
    PATH_ORDER,
    device_priority,
    host_priorities,
)
from traceview.critical_path.chunks import entries_in, intervals_in, part_bounds, window_parts
from traceview.critical_path.holders import (
    bounded_holders,
    holder_steps_plan,
    holders_of_steps,
    name_code_plans,
)
from traceview.critical_path.nodes import empty_nodes, nodes_plan
from traceview.model.trace import SYNC_SCHEMA, empty_frame

KEYS = ["rank", "step"]
PER_STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "step_us": pl.Float64(),
    **{column: pl.Float64() for column in CATEGORY_COLUMNS},
}
_INTERVAL = ["rank", "start_us", "end_us", "name", "priority"]
PATH_HOST_COLUMNS = ("rank", "kind", "name", "start_us", "end_us", "tid", "correlation")
"""The host rows' columns the path reads."""


def launching_threads(cpu: pl.LazyFrame, device: pl.LazyFrame) -> pl.LazyFrame:
    """(rank, tid) of every thread whose runtime calls launched a device event (by correlation)."""
    launched = device.select("rank", "correlation").drop_nulls()  # a semi join: the ids need no unique
    runtime = cpu.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
    return runtime.join(launched, on=["rank", "correlation"], how="semi").select("rank", "tid").unique()


def read_rows(cpu: pl.LazyFrame, threads: pl.LazyFrame) -> pl.LazyFrame:
    """The host rows the path may pass through: those of the launching threads; every thread's on a rank
    whose launches the trace does not link to device work (an inferred edge, said in the notes)."""
    linked = cpu.join(threads, on=["rank", "tid"], how="semi")
    unlinked = cpu.join(threads.select("rank").unique(), on="rank", how="anti")
    return pl.concat([linked, unlinked])


def host_intervals(rows: pl.LazyFrame) -> pl.LazyFrame:
    """The host rows the path reads (`read_rows`) as path intervals, by `HOST_RULES`."""
    first_rules, priorities = host_priorities()
    names = rows.select("kind", "name").unique().with_columns(first_rules).with_columns(priorities)
    long = (pl.col("end_us") - pl.col("start_us")) >= LONG_LAUNCH_US
    priority = pl.when(long).then(pl.col("_long")).otherwise(pl.col("_short")).alias("priority")
    return (
        rows.join(names, on=["kind", "name"], how="left", maintain_order="left")
        .with_columns(priority)
        .filter(pl.col("priority").is_not_null())
        .select(_INTERVAL)
    )


def device_intervals(events: pl.LazyFrame) -> pl.LazyFrame:
    """Classified device events (with `kernel_class`) and host collectives as path intervals."""
    return events.with_columns(device_priority().alias("priority")).select(_INTERVAL)


@cache
def _bit() -> pl.Expr:
    """A priority's bit, 2^priority (the path's constant expressions are built once, at first use: building
    them costs more than running them on a small rank)."""
    bits = {index: 1 << index for index in range(len(PATH_ORDER))}
    return pl.col("priority").replace_strict(bits, return_dtype=pl.Int64)


def _points(cut: pl.LazyFrame, windows: pl.LazyFrame, one_rank: bool) -> pl.LazyFrame:
    """Two points per disjoint interval (its priority's bit added at its start, taken away at its end) and
    one per window edge (nothing added), in (rank, time) order, a window's points together: a rank's windows
    are disjoint, so its points sorted by time, then by their window's start (two windows touching at a
    moment: the earlier's points first) and step, keep each window's points together and in time order. A
    time is nearly unique, so the sort rarely compares further keys; `one_rank`: no rank key at all."""
    bit, start = _bit(), pl.col("window_start_us").alias("_from")
    return pl.concat(
        [
            cut.select(*KEYS, pl.col("start_us").alias("t"), bit.alias("d"), start),
            cut.select(*KEYS, pl.col("end_us").alias("t"), (-bit).alias("d"), start),
            *(
                windows.select(*KEYS, pl.col(bound).alias("t"), pl.lit(0, pl.Int64).alias("d"), start)
                for bound in ("window_start_us", "window_end_us")
            ),
        ]
    ).sort([*(() if one_rank else ("rank",)), "t", "_from", "step"])


_OPEN = pl.col("d").cum_sum()
_HOLDING = pl.when(_OPEN > 0).then(_OPEN.bitwise_trailing_zeros().cast(pl.Int32)).alias("priority")
"""Per point, the lowest priority open from it on (null when none is): the lowest bit set in the running
sum of the points' bits (each priority's intervals disjoint, `_extending`, so its bit is 0 or 1)."""


def path_segments(intervals: pl.LazyFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """The path of every window: rank, step, t (segment start), priority (null: nothing recorded), seg_us."""
    chosen = windows.lazy()
    cut = clipped(intervals.select("rank", "start_us", "end_us", "priority"), chosen, ["rank"], edges=True)
    points = _points(cut, chosen, windows.get_column("rank").n_unique() == 1)
    same_window = (pl.col("rank") == pl.col("rank").shift(-1)) & (pl.col("step") == pl.col("step").shift(-1))
    length = pl.when(same_window).then(pl.col("t").shift(-1) - pl.col("t")).otherwise(0.0)  # points sorted
    return (
        points.with_columns(_HOLDING, length.alias("seg_us"))
        .filter(pl.col("seg_us") > 0)
        .select(*KEYS, "t", "priority", "seg_us")
    )


def _extending(intervals: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, priority), the intervals that reach past every earlier one, each cut to the part no earlier
    one covers: disjoint intervals whose union is the priority's, each naming the moments it covers
    (docs/metrics.md). Of intervals that start together, the longest comes first (the outer one names the
    moment), then the first given."""
    reach = sorted_reach(["rank", "priority"])  # the rows sorted by (rank, priority), then start
    return (
        intervals.sort(
            ["rank", "priority", "start_us", "end_us"],
            descending=[False, False, False, True],
            maintain_order=True,
        )
        .with_columns(reach.alias("_reach"))
        .filter((pl.col("end_us") > pl.col("_reach")).fill_null(True))
        .select(
            "rank",
            "priority",
            pl.max_horizontal("start_us", "_reach").alias("start_us"),  # the part no earlier one covers
            "end_us",
            "iid",
        )
    )


def named_segments(segments: pl.LazyFrame, extending: pl.LazyFrame) -> pl.LazyFrame:
    """`segments` with the event that held each (`iid`, of the `extending` intervals); its category is read
    from its priority once the segments are summed (`_category`)."""
    named = extending.select("rank", "priority", "start_us", "iid")
    return segments.sort("t").join_asof(
        named.sort("start_us"),
        left_on="t",
        right_on="start_us",
        by=["rank", "priority"],
        strategy="backward",
        check_sortedness=False,
    )


@cache
def _category_sums() -> tuple[pl.Expr, ...]:
    """Per window, each category's time (`CATEGORY_COLUMNS`) from its rows of (priority, seg_us): the row
    of the category's priority (`other`: of none; `peer_wait` holds nothing here)."""
    priority = pl.col("priority")
    held = {category: priority == index for index, category in enumerate(PATH_ORDER)}
    held[OTHER] = priority.is_null()
    return tuple(
        pl.col("seg_us").filter(held[category]).sum().alias(column)
        if category in held
        else pl.lit(0.0, pl.Float64).alias(column)
        for category, column in zip(CATEGORIES, CATEGORY_COLUMNS, strict=True)
    )


def per_step_plan(named: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Per window, its length and the time of each category (`CATEGORY_COLUMNS`; peer waits 0 until the
    reduce resolves them). The segments are summed per (window, priority) first: a category is one priority
    (`other` none), so each column then reads one row per window."""
    held = named.group_by(*KEYS, "priority").agg(pl.col("seg_us").sum())
    table = held.group_by(KEYS).agg(_category_sums())
    step = (pl.col("window_end_us") - pl.col("window_start_us")).alias("step_us")
    return (
        windows.select(*KEYS, step)
        .join(table, on=KEYS, how="left")
        .with_columns(pl.col(CATEGORY_COLUMNS).fill_null(0.0))
        .select(list(PER_STEP_SCHEMA))
        .sort(KEYS)
    )


_CLASSES = ("event_class", "kernel_class")
_NO_SYNCS = empty_frame({"rank": pl.Int64(), **SYNC_SCHEMA})
_NO_NODES = empty_nodes()  # a batch without communication rows: no node, and no query for them
_NO_SYNC_COUNTS = empty_frame({"rank": pl.Int64(), "host_waits": pl.Int64(), "stream_waits": pl.Int64()})


def path_intervals(
    events: pl.DataFrame, cpu: pl.DataFrame, syncs: pl.DataFrame
) -> tuple[pl.LazyFrame, pl.LazyFrame, pl.LazyFrame]:
    """Every interval the path may pass through, numbered (`iid`): device events, the host rows of the
    launching threads and the recorded host waits (`traceview.critical_path._syncs`); those threads; and the
    host rows read (`PATH_HOST_COLUMNS`)."""
    device = events.lazy().select(
        "rank", "kind", "name", "start_us", "end_us", "correlation", "stream", *_CLASSES
    )
    host = cpu.lazy().select(PATH_HOST_COLUMNS)
    threads = launching_threads(host, device).cache()
    rows = read_rows(host, threads)
    parts = [device_intervals(device), host_intervals(rows)]
    if syncs.height:  # recorded sync edges: their queries only where a trace has them
        unread = host.filter(pl.col("kind") == "runtime").join(rows, on=["rank", "tid"], how="anti")
        work = device.filter(pl.col("kind") != "host").select("rank", "stream", "end_us", "name")
        waits = sync_intervals(syncs.lazy(), work, unread)  # what a wait names: device work
        parts = [device_intervals(device), host_intervals(replaced_calls(rows, syncs.lazy())), waits]
    return pl.concat(parts).with_row_index("iid"), threads, host


SMALL_BATCH_ROWS = 2000
"""A batch of fewer device events and host rows than this runs the path's queries with only projection
pushdown of polars' optimisations (`path_optimizations`)."""


def path_optimizations(events: pl.DataFrame, cpu: pl.DataFrame) -> pl.QueryOptFlags:
    """The optimisations the path's queries run with: all of polars' on a large batch; on a small one
    (`SMALL_BATCH_ROWS`) only projection pushdown, the other passes costing more than they save there
    (about a sixth of the path's query time on a one-step rank of a hundred rows; neutral near 5,000 rows;
    the passes save a quarter of it on a 54 MB rank). The results are the same either way."""
    if events.height + cpu.height >= SMALL_BATCH_ROWS:
        return pl.QueryOptFlags()
    flags = pl.QueryOptFlags.none()
    flags.projection_pushdown = True
    return flags


def critical_path_plans(
    events: pl.DataFrame,
    cpu: pl.DataFrame,
    windows: pl.DataFrame,
    kernels: pl.DataFrame,
    syncs: pl.DataFrame | None = None,
) -> tuple[pl.LazyFrame, ...]:
    """The queries of a batch's path: per (rank, step) rows, holders (`bounded_holders`), the ranks whose
    host rows could not be tied to their launches (every thread read), the collectives' open nodes
    (`traceview.critical_path.nodes`) and the recorded sync events per rank (`sync_counts`). `events` are
    classified with `kernel_class`; `cpu` the batch's host rows with `rank` (`PATH_HOST_COLUMNS`);
    `kernels` its communication rows (`comm_kernels`); `syncs` its CUDA sync events (`SYNC_SCHEMA`), each
    with `rank`. The intervals and the named segments are collected here, one query each (three plans
    sharing cached parts cost more to plan and run than the parts collected in turn: a third of the path's
    CPU on a tiny rank), with `path_optimizations`, as the returned plans are to be; a large batch's
    windows are walked in parts (`traceview.critical_path.chunks`), each collected here."""
    syncs = _NO_SYNCS if syncs is None else syncs
    optimizations = path_optimizations(events, cpu)
    planned, threads, host = path_intervals(events, cpu, syncs)
    unlinked = host.select("rank").unique().join(threads.select("rank").unique(), on="rank", how="anti")
    coded, table = name_code_plans(planned.cache())  # each interval's name by code (its iid: its row)
    intervals, unlinked_ranks, named_codes = pl.collect_all(
        [coded, unlinked.sort("rank"), table], optimizations=optimizations
    )
    codes, names = intervals.get_column("code"), named_codes.get_column("_name")
    parts = window_parts(windows, intervals.height)
    extending = _extending(intervals.lazy())  # nested rows of a priority: same union, names
    del intervals  # their times and priorities read: only their names' codes kept, for the holders
    rows = _node_rows(kernels) if kernels.height else None
    if len(parts) == 1:
        per_step, holder_steps, nodes = _path_of(extending.cache(), windows, rows, codes, optimizations)
    else:
        per_step, holder_steps, nodes = _path_in_parts(extending, parts, rows, codes, optimizations)
    return (
        per_step,
        bounded_holders(holders_of_steps(holder_steps, names)),
        unlinked_ranks.lazy(),
        nodes,
        sync_counts(syncs.lazy()) if syncs.height else _NO_SYNC_COUNTS.lazy(),
    )


Parts = tuple[pl.LazyFrame, pl.LazyFrame, pl.LazyFrame]
"""A part of a batch's path: its per-step rows, holders per step (`holder_steps_plan`) and open nodes."""


def _path_of(
    extending: pl.LazyFrame,
    windows: pl.DataFrame,
    rows: pl.LazyFrame | None,
    codes: pl.Series,
    optimizations: pl.QueryOptFlags,
) -> Parts:
    """The path of `windows` from the disjoint intervals reaching into them (`extending`) and the
    communication rows whose entries they own (`rows`; None: none): its named segments collected, the
    rest planned."""
    named = named_segments(path_segments(extending, windows), extending).collect(optimizations=optimizations)
    nodes = _NO_NODES.lazy() if rows is None else nodes_plan(named.lazy(), rows, windows.lazy())
    return per_step_plan(named.lazy(), windows.lazy()), holder_steps_plan(named.lazy(), codes), nodes


def _path_in_parts(
    extending: pl.LazyFrame,
    parts: list[pl.DataFrame],
    rows: pl.LazyFrame | None,
    codes: pl.Series,
    optimizations: pl.QueryOptFlags,
) -> Parts:
    """`_path_of` each part of the windows in turn (`traceview.critical_path.chunks`), collected; the
    parts' rows stacked in the order one walk gives them."""
    whole = extending.collect(optimizations=optimizations).lazy()
    done = []
    for part, bounds in zip(parts, part_bounds(parts), strict=True):
        owned = None if rows is None else entries_in(rows, bounds)
        plans = _path_of(intervals_in(whole, bounds).cache(), part, owned, codes, optimizations)
        done.append(pl.collect_all(plans, optimizations=optimizations))
    per_step, holder_steps, nodes = (pl.concat(frames) for frames in zip(*done, strict=True))
    node_order = [*KEYS, "entry_us", "exit_us"]
    return per_step.sort(KEYS).lazy(), holder_steps.lazy(), nodes.sort(node_order).lazy()


def _node_rows(kernels: pl.DataFrame) -> pl.LazyFrame:
    """The communication rows the nodes are made of (`staging_copy` false where the frame lacks it)."""
    staging = pl.col("staging_copy") if "staging_copy" in kernels.columns else pl.lit(False)
    return kernels.lazy().select("rank", "start_us", "end_us", staging.alias("staging_copy"))
