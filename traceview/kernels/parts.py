"""The map's part of the kernels analysis: one rank's trace and classified device events in, bounded frames
out (docs/metrics.md, "Kernels and operators"; `traceview.map.rank_summary` keeps them in the rank's summary).

Every frame grows with the rank's steps and a fixed number of names (`TOP_KERNELS`, `TOP_KEYS`,
`TOP_OPERATORS`, the classes, the host phases), never with its events; none holds a time on the rank's clock,
so a summary moved onto the run's time base needs no change here.

The frames are few fused queries (each part one query, computed together by one `pl.collect_all`), run on
polars' in-memory engine like all of the map (`traceview.core.engine`). They are computed for a batch of
ranks at once (`batch_kernel_parts`: every frame keyed by `rank`, each rank's threads, correlations, windows
and names its own), so a batch of small ranks costs the queries of one; a rank alone is a batch of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

import polars as pl

from traceview.core.frames import vstacked
from traceview.core.records import record
from traceview.events.kernel_classes import kernel_classes_of
from traceview.events.kernel_keys import keys_of
from traceview.kernels.classes import CLASS_STEP_SCHEMA, class_steps
from traceview.kernels.host import HOST_SCHEMA, host_candidates, host_spans, host_steps, host_windows
from traceview.kernels.launches import LAUNCH_SCHEMA, launch_steps, runtime_names
from traceview.kernels.operators import (
    KNOWN_SUMS,
    OPERATOR_SCHEMA,
    link_items,
    linked_events,
    operator_costs_query,
    top_operators,
)
from traceview.kernels.top import KEY_STEP_SCHEMA, TOP_KERNEL_SCHEMA, first_seen, key_steps, top_kernels
from traceview.model.stacking import by_rank, stacked_rows
from traceview.model.trace import RankTrace

RANK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "device": pl.Utf8(),
    "timeline": pl.Utf8(),
    "device_events": pl.Int64(),
    "kernels": pl.Int64(),
    "launched": pl.Int64(),
    "linked": pl.Int64(),
    "linked_kernels": pl.Int64(),
    "linked_share": pl.Float64(),
    "graph_kernels": pl.Int64(),
    "kernel_us": pl.Float64(),
    "linked_kernel_us": pl.Float64(),
}
ROOFLINE_PART_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "op_class": pl.Utf8(),
    "dtype": pl.Utf8(),
    "calls": pl.Int64(),
    "flops": pl.Float64(),
    "flops_kernel_us": pl.Float64(),
    "bytes": pl.Float64(),
    "bytes_kernel_us": pl.Float64(),
}


@record
class KernelParts:
    """One rank's (or, stacked, every rank's) kernels-analysis frames."""

    class_steps: pl.DataFrame
    key_steps: pl.DataFrame
    top_kernels: pl.DataFrame
    operators: pl.DataFrame
    roofline: pl.DataFrame
    launches: pl.DataFrame
    host: pl.DataFrame
    ranks: pl.DataFrame

    @staticmethod
    def empty() -> KernelParts:
        """No rows, every schema."""
        schemas = (
            CLASS_STEP_SCHEMA,
            KEY_STEP_SCHEMA,
            TOP_KERNEL_SCHEMA,
            OPERATOR_SCHEMA,
            ROOFLINE_PART_SCHEMA,
            LAUNCH_SCHEMA,
            HOST_SCHEMA,
            RANK_SCHEMA,
        )
        return KernelParts(*(pl.DataFrame(schema=schema) for schema in schemas))

    @staticmethod
    def stacked(parts: list[KernelParts]) -> KernelParts:
        """Every rank's frames one above the other."""
        if not parts:
            return KernelParts.empty()
        names = [f.name for f in fields(KernelParts)]
        return KernelParts(**{n: vstacked([getattr(p, n) for p in parts]) for n in names})


_IS_COMM = (pl.col("event_class") == "comm").alias("is_comm")
_IDS = ("name", "kind", "is_comm", "name_id", "key_id", "kernel_class")
_KEY_ID = pl.col("key").rank("dense").cast(pl.UInt32).alias("key_id")
_ADDED_TYPES = {"kernel_class": pl.Utf8, "name_id": pl.UInt32, "key_id": pl.UInt32, "key": pl.Utf8}
_ADDED = [pl.lit(None, dtype).alias(column) for column, dtype in _ADDED_TYPES.items()]


def classed_events(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The events with `kernel_class`, `name_id` and `key_id` (integers: the analyses group on them, not on
    names thousands of characters long), and the table of distinct (name, kind) with their class and key."""
    if events.height == 0:
        empty = events.with_columns(_ADDED)
        return empty, empty.select("name", "kind", _IS_COMM, *_ADDED_TYPES)
    frame = events.lazy()
    distinct = kernel_classes_of(frame.select("name", "kind", _IS_COMM).unique(maintain_order=True).collect())
    keys = pl.Series("key", keys_of(distinct.get_column("name").to_list()), dtype=pl.Utf8)
    table = distinct.lazy().with_columns(keys).with_row_index("name_id").with_columns(_KEY_ID).cache()
    classed = (
        frame.with_columns(_IS_COMM)
        .join(table.select(_IDS), on=["name", "kind", "is_comm"], how="left", maintain_order="left")
        .drop("is_comm")
    )
    found, names = pl.collect_all([classed, table])
    return found, names


_KERNEL = pl.col("kind") == "kernel"
_DURATION = pl.col("end_us") - pl.col("start_us")
_HAS_OP = pl.col("op_id").is_not_null()
_COUNTS = (
    pl.len().cast(pl.Int64).alias("device_events"),
    _KERNEL.sum().cast(pl.Int64).alias("kernels"),
    pl.col("launch_start_us").is_not_null().sum().cast(pl.Int64).alias("launched"),
    _HAS_OP.sum().cast(pl.Int64).alias("linked"),
    (_KERNEL & _HAS_OP).sum().cast(pl.Int64).alias("linked_kernels"),
    pl.col("graph").fill_null(False).sum().cast(pl.Int64).alias("graph_kernels"),
    _DURATION.filter(_KERNEL).sum().alias("kernel_us"),
    _DURATION.filter(_KERNEL & _HAS_OP).sum().alias("linked_kernel_us"),
)


_LINKED_SHARE = (
    pl.when(pl.col("kernels") > 0).then(pl.col("linked_kernels") / pl.col("kernels")).alias("linked_share")
)
_RANK_COLUMNS = [pl.col(c).cast(t) for c, t in RANK_SCHEMA.items()]


def _device_name(trace: RankTrace) -> str | None:
    devices, local = trace.meta.devices, trace.meta.local_device
    if not devices:
        return None
    return devices[local] if local is not None and 0 <= local < len(devices) else devices[0]


def _rank_rows(traces: Sequence[RankTrace], linked: pl.DataFrame) -> pl.LazyFrame:
    """Per rank with device events: the counts of `_COUNTS`, its device and timeline."""
    described = pl.DataFrame(
        {
            "rank": [t.rank for t in traces],
            "device": [_device_name(t) for t in traces],
            "timeline": [t.meta.timeline for t in traces],
        },
        schema={"rank": pl.Int64, "device": pl.Utf8, "timeline": pl.Utf8},
    )
    counted = linked.lazy().group_by("rank").agg(_COUNTS)
    return counted.join(described.lazy(), on="rank").with_columns(_LINKED_SHARE).select(_RANK_COLUMNS)


_HAS_CLASS = pl.col("op_class").is_not_null()
_ROOFLINE_BY = ("rank", "op_class", pl.col("op_dtype").alias("dtype"))
_ROOFLINE_SUMS = (pl.len().cast(pl.Int64).alias("calls"), *KNOWN_SUMS)
_ROOFLINE_COLUMNS = [pl.col(c).cast(t) for c, t in ROOFLINE_PART_SCHEMA.items()]


def _roofline_part(costs: pl.LazyFrame) -> pl.LazyFrame:
    return (
        costs.filter(_HAS_CLASS)
        .group_by(*_ROOFLINE_BY)
        .agg(_ROOFLINE_SUMS)
        .sort("rank", "op_class", "dtype", nulls_last=True)
        .select(_ROOFLINE_COLUMNS)
    )


def batch_kernel_parts(
    traces: Sequence[RankTrace],
    classed: pl.DataFrame,
    names: pl.DataFrame,
    clipped: pl.DataFrame,
    windows: pl.DataFrame,
    stacked_host: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> list[KernelParts]:
    """The kernels analysis of a batch of ranks (distinct rank numbers), in the order of `traces`: `classed`
    and `names` their device events stacked (each row with its `rank`, a rank's rows in its own order) and
    classed together (`classed_events`), `clipped` them cut to their step `windows` (stacked;
    `traceview.kernels.classes.clipped_events`). Each rank's parts are what it alone gives; the batch runs
    the queries of one rank: computed together (`pl.collect_all`) once the links, the operators' shapes and
    the host spans cut into the host windows are known (the items the links read, the host rows a phase may
    name and the runtime names computed together first, then the links, the host spans and the graph
    calls). A rank without device events has no rows. `stacked_host`: the batch's host rows and steps already
    stacked (`traceview.model.stacking.stacked_rows`), stacked here when None."""
    if classed.height == 0:
        return [KernelParts.empty() for _ in traces]
    cpu, steps = stacked_host or (
        stacked_rows(traces, lambda t: t.cpu),
        stacked_rows(traces, lambda t: t.steps),
    )
    hosted = host_windows(steps, windows)
    items, candidates, runtime = pl.collect_all(
        [link_items(classed.lazy(), cpu), host_candidates(cpu), runtime_names(cpu)]
    )
    linked, spans = pl.collect_all([linked_events(classed, items), host_spans(candidates, hosted)])
    del items, candidates  # a large rank's items are its host rows' size: freed before the parts run
    costs = operator_costs_query(linked, cpu).cache()
    seen = first_seen(classed).cache()
    parts = (
        class_steps(clipped),
        key_steps(clipped, names, seen),
        top_kernels(classed, names, seen),
        top_operators(costs),
        _roofline_part(costs),
        launch_steps(linked, cpu, runtime, windows, hosted),
        host_steps(spans),
        _rank_rows(traces, linked),
    )
    return _by_rank(pl.collect_all(parts), [t.rank for t in traces])


def _by_rank(frames: Sequence[pl.DataFrame], ranks: Sequence[int]) -> list[KernelParts]:
    """The `KernelParts` of each of `ranks` from the batch's `frames` (in `KernelParts` order; a rank with
    no row in the rank frame has every part empty)."""
    split = [by_rank(frame, ranks) for frame in frames]
    return [
        KernelParts(*parts) if parts[-1].height else KernelParts.empty() for parts in zip(*split, strict=True)
    ]
