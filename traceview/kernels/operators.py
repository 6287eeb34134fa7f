"""Kernels linked to the operators that launched them (docs/metrics.md, "Kernels and operators").

A device event carries the correlation id of the runtime call that launched it (`cudaLaunchKernel`,
`cudaGraphLaunch`, `hipLaunchKernel`, ...); that call runs inside a stack of host operators on its thread
(`aten::linear` > `aten::addmm`). The kernel belongs to the innermost one, so an operator's totals never
count a kernel twice. The innermost operator is found without a loop over rows: on each thread the operators
and the calls are sorted by start (the longer first), each item's depth is the number of items open at its
start (started before it, not ended by its start), and a call's operator is the last item before it one level
up, which must contain it; a call no operator contains (an unnested or badly timed one) is unlinked. The
host rows and events may be several ranks' stacked (each row with its `rank`): a thread is then a (rank, pid,
tid) and a call is found by (rank, correlation).

`TOP_OPERATORS` operators are kept per rank (largest kernel time first); `linked_share` states how many device
events found an operator.
"""

from __future__ import annotations

from typing import TypeVar

import polars as pl

from traceview.core.intervals import group_starts
from traceview.events.cuda_graphs import is_graph_launch
from traceview.events.shape_flops import shape_costs_query
from traceview.model.trace import CALL_KEY

TOP_OPERATORS = 24
"""Operators kept per rank (`top_operators`)."""
THREAD = ["pid", "tid"]
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)

LINK_COLUMNS = ("op_id", "op_name", "launch_name", "launch_start_us", "launch_end_us", "graph")
OPERATOR_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "operator": pl.Utf8(),
    "op_class": pl.Utf8(),
    "calls": pl.Int64(),
    "kernels": pl.Int64(),
    "kernel_us": pl.Float64(),
    "flops": pl.Float64(),
    "flops_kernel_us": pl.Float64(),
    "bytes": pl.Float64(),
    "bytes_kernel_us": pl.Float64(),
    "dtype": pl.Utf8(),
    "achieved_flops": pl.Float64(),
}


_THREAD = pl.struct("rank", *THREAD).hash(seed=7).alias("_thread")
_IS_RUNTIME = pl.col("kind") == "runtime"
_FIRST_OF_ID = pl.struct(CALL_KEY).is_first_distinct()
_IS_OP = pl.col("kind") == "op"
_CALL_ITEM = (
    "rank",
    _THREAD,
    "start_us",
    "end_us",
    pl.lit(None, pl.UInt32).alias("op_id"),
    "correlation",
    "name",
)
_OP_ITEM = (
    "rank",
    _THREAD,
    "start_us",
    "end_us",
    "op_id",
    pl.lit(None, pl.Int64).alias("correlation"),
    "name",
)
_NEXT_CALL = ("_thread", pl.col("start_us").alias("_next_call"))
_CALL_INSIDE = pl.col("_next_call") <= pl.col("end_us")
_IS_CALL = pl.col("op_id").is_null().alias("is_call")
_POSITION = pl.int_range(pl.len()).over("_thread").alias("position")
_ITEM_ORDER = ["_thread", "start_us", "end_us", "is_call"]


def _sorted_items(cpu: pl.DataFrame, launched: pl.LazyFrame) -> pl.LazyFrame:
    """Operators and the calls that launched device work (`launched`: their correlation ids) of the
    threads that launched any, sorted (thread, start, longer first, calls last), with `op_id` (the operator's
    row), `is_call` and `position`. A thread is one integer (`_thread`), so sorting reads no strings."""
    calls = (  # the first call of each id (a flag, not a unique's hash table of rows), then the launched
        cpu.lazy()
        .filter(_IS_RUNTIME)
        .filter(_FIRST_OF_ID)
        .join(launched, on=CALL_KEY, how="semi", maintain_order="left")
        .select(_CALL_ITEM)
        .cache()  # read twice (their starts, then the items): computed once
    )
    call_starts = calls.select(_NEXT_CALL).sort("_next_call")
    ops = (  # an operator no call starts inside is nobody's ancestor: left out (fewer rows to sort)
        cpu.lazy()
        .filter(_IS_OP)
        .with_row_index("op_id")
        .select(_OP_ITEM)
        .sort("start_us", maintain_order=True)
        .join_asof(
            call_starts,
            left_on="start_us",
            right_on="_next_call",
            by="_thread",
            strategy="forward",
            check_sortedness=False,
        )
        .filter(_CALL_INSIDE)
        .drop("_next_call")
    )
    return (  # a stable sort: ties keep the operators' trace order, then the calls'
        pl.concat([ops, calls])
        .with_columns(_IS_CALL)
        .sort(_ITEM_ORDER, descending=[False, False, True, False], maintain_order=True)
        .with_columns(_POSITION)
    )


_ROW = pl.int_range(pl.len())
_THREAD_KEY, _END = pl.col("_thread"), pl.col("_end")
_THREAD_START = pl.when(group_starts(["_thread"])).then(_ROW).forward_fill()
_CLOSED_SO_FAR = (_ROW - _THREAD_START + 1).cast(pl.UInt32).alias("_closed")
"""Per row of ends sorted by (thread, end): the items of its thread ended by its end, itself included."""
_LAST_OF_END = _THREAD_KEY.ne_missing(_THREAD_KEY.shift(-1)) | _END.ne_missing(_END.shift(-1))
_ZERO_LENGTH = (pl.col("end_us") == pl.col("start_us")).fill_null(False).cast(pl.UInt32).alias("_zero_length")
_ZERO_SO_FAR = pl.col("_zero_length").cum_sum().alias("_zero_so_far")
"""Per row of ends sorted by (thread, end): the zero-length items up to it, over the whole frame."""
_ZERO_AT_END = (pl.col("_zero_so_far") - pl.col("_zero_so_far").shift(1).fill_null(0)).alias("_zero_at")
"""Per last row of each (thread, end): the zero-length items ending (and starting) there."""
_ZERO = pl.when(pl.col("_end") == pl.col("start_us")).then(pl.col("_zero_at")).cast(pl.UInt32).alias("_zero")
"""Per item: the zero-length items of its thread at its start (open at it; null when none ends there)."""
_DEPTH = (pl.col("position") - (pl.col("_closed").fill_null(0) - pl.col("_zero").fill_null(0))).alias("depth")


def _items(cpu: pl.DataFrame, launched: pl.LazyFrame) -> pl.LazyFrame:
    """`_sorted_items` with `depth`: the items open at each one's start (started before it, not ended by its
    start). The as-of join by thread needs each side sorted by its key within each thread only: the items
    are (by start), and so are their ends, so neither is sorted again."""
    items = _sorted_items(cpu, launched).cache()
    ends = (  # per thread and end time: how many items have ended by then, how many of them zero-length
        items.select("_thread", pl.col("end_us").alias("_end"), _ZERO_LENGTH)
        .sort("_thread", "_end")
        .with_columns(_CLOSED_SO_FAR, _ZERO_SO_FAR)
        .filter(_LAST_OF_END)
        .with_columns(_ZERO_AT_END)
        .drop("_zero_length", "_zero_so_far")
    )
    counted = items.join_asof(ends, left_on="start_us", right_on="_end", by="_thread", check_sortedness=False)
    return counted.with_columns(_ZERO).with_columns(_DEPTH).drop("_end", "_closed", "_zero_at", "_zero")


def link_items(events: pl.LazyFrame, cpu: pl.DataFrame) -> pl.LazyFrame:
    """The operators and calls of `cpu` that launched the device `events`, with their `depth` (`_items`), as
    a query: `links` reads them twice, so they are computed first (inside one query the optimizer would push
    each reader's filter into them and compute them twice)."""
    return _items(cpu, events.select(CALL_KEY).drop_nulls("correlation"))  # a semi join: no unique


def links(items: pl.DataFrame) -> pl.LazyFrame:
    """Per call that launched device work (`items`: `link_items` computed): its name, start and end, whether
    it replays a graph, and the innermost operator around it (`op_id`, `op_name`; null when none contains
    it)."""
    found = items.lazy()
    ops = found.filter(~pl.col("is_call")).select(_OP_COLUMNS)
    calls = found.filter(pl.col("is_call")).select(_CALL_COLUMNS)
    joined = calls.sort("position").join_asof(
        ops.sort("position"), on="position", by=["_thread", "depth"], check_sortedness=False
    )
    return joined.select(_LINK_COLUMNS)


_OP_COLUMNS = (
    "_thread",
    "depth",
    "position",
    "op_id",
    pl.col("name").alias("_op_name"),
    pl.col("start_us").alias("_op_start"),
    pl.col("end_us").alias("_op_end"),
)
_CALL_COLUMNS = (
    "rank",
    "_thread",
    "position",
    "correlation",
    "name",
    "start_us",
    "end_us",
    pl.col("depth") - 1,
)
_INSIDE = (pl.col("_op_start") <= pl.col("start_us")) & (pl.col("_op_end") >= pl.col("end_us"))
_LINK_COLUMNS: tuple[str | pl.Expr, ...] = (
    *CALL_KEY,
    pl.when(_INSIDE).then(pl.col("op_id")).alias("op_id"),
    pl.when(_INSIDE).then(pl.col("_op_name")).alias("op_name"),
    pl.col("name").alias("launch_name"),
    pl.col("start_us").alias("launch_start_us"),
    pl.col("end_us").alias("launch_end_us"),
    is_graph_launch().alias("graph"),
)


def linked_events(events: pl.DataFrame, items: pl.DataFrame) -> pl.LazyFrame:
    """Device `events` with their launch and operator (`LINK_COLUMNS`; null when not linked), from the
    `link_items` computed (`items`), as a query."""
    return events.lazy().join(links(items), on=CALL_KEY, how="left", maintain_order="left")


def with_links(events: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """One rank's device events with their launch and operator (`LINK_COLUMNS`; null when not linked);
    `cpu` its host rows (their `rank` taken from the events where they have none); two queries."""
    if "rank" not in cpu.columns:
        rank = events.get_column("rank").first() if events.height else None
        cpu = cpu.hstack([pl.repeat(rank, cpu.height, dtype=pl.Int64, eager=True).alias("rank")])
    return linked_events(events, link_items(events.lazy(), cpu).collect()).collect()


def operator_costs(linked: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Per operator instance that launched device work: its kernels, their time, and its FLOPs, bytes and
    class from its shapes (`traceview.events.shape_flops`)."""
    return operator_costs_query(linked, cpu).collect()


_LAUNCHED_BY_OP = (
    pl.col("rank").first(),
    pl.len().cast(pl.Int64).alias("kernels"),
    (pl.col("end_us") - pl.col("start_us")).sum().alias("kernel_us"),
)
_SHAPED = ("rank", "op_id", "name", "input_dims", "input_types", "flops", "kernels", "kernel_us")


def operator_costs_query(linked: pl.DataFrame, cpu: pl.DataFrame) -> pl.LazyFrame:
    """`operator_costs` as a query (computing it runs one query first: the operators and their shapes), in
    the operators' order (`op_id`: their row among the operators of `cpu`, the host rows `link_items`
    read: of one rank, or of several stacked, then each operator's rank comes from its kernels)."""
    ops = cpu.lazy().filter(_IS_OP).with_row_index("op_id").drop("rank", strict=False)
    launched = linked.lazy().filter(pl.col("op_id").is_not_null()).group_by("op_id").agg(_LAUNCHED_BY_OP)
    shaped = ops.join(launched, on="op_id", how="inner", maintain_order="left").select(_SHAPED)
    return shape_costs_query(shaped).sort("op_id")


def _known_sums() -> list[pl.Expr]:
    """FLOPs and bytes summed over the calls that have them, with those calls' kernel time (null: none
    has)."""
    found = []
    for value, name in (("op_flops", "flops"), ("shape_bytes", "bytes")):
        known = pl.col(value).is_not_null()
        found += [
            pl.when(known.any()).then(pl.col(value).filter(known).sum()).alias(name),
            pl.when(known.any()).then(pl.col("kernel_us").filter(known).sum()).alias(f"{name}_kernel_us"),
        ]
    return found


KNOWN_SUMS = tuple(_known_sums())
"""FLOPs and bytes summed over the calls that have them, with those calls' kernel time (null: none has)."""


_ACHIEVED = (
    pl.when(pl.col("flops_kernel_us") > 0)
    .then(pl.col("flops") / (pl.col("flops_kernel_us") * 1e-6))
    .alias("achieved_flops")
)


def with_achieved(frame: Frame) -> Frame:
    """`achieved_flops`: FLOPs over the kernel time of the calls they are known for (FLOP/s)."""
    return frame.with_columns(_ACHIEVED)


_OPERATOR_SUMS = (
    pl.col("op_class").first(),
    pl.len().cast(pl.Int64).alias("calls"),
    pl.col("kernels").sum(),
    pl.col("kernel_us").sum(),
    *KNOWN_SUMS,
    pl.col("op_dtype").drop_nulls().mode().sort().first().alias("dtype"),
)
_OPERATOR_COLUMNS = [pl.col(c).cast(t) for c, t in OPERATOR_SCHEMA.items()]
_OPERATOR_NAMED = (pl.col("name").alias("operator"), pl.exclude("name"))


def top_operators(costs: pl.LazyFrame, bound: int = TOP_OPERATORS) -> pl.LazyFrame:
    """Per (rank, operator name): calls that launched work, kernels, kernel time, and FLOPs and bytes with
    the kernel time they were measured over; the `bound` of largest kernel time per rank (a query)."""
    grouped = costs.group_by("rank", "name").agg(_OPERATOR_SUMS)
    return (
        with_achieved(grouped)
        .sort(["rank", "kernel_us", "name"], descending=[False, True, False])
        .filter(pl.int_range(pl.len()).over("rank") < bound)
        .select(_OPERATOR_NAMED)
        .select(_OPERATOR_COLUMNS)
    )
