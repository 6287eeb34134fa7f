"""Time by kernel class per (rank, step) (docs/metrics.md, "Kernels and operators").

Device events are cut into the step windows as the time budget cuts them (`clip_to_windows`), so the compute
classes describe exactly T_comp. Per (rank, step, class): `time_us`, the union of the class's kernels;
`exclusive_us`, the time only that class runs; `kernels`, the pieces counted; `kernel_sum_us`, the sum of
their durations. The compute classes' `exclusive_us` and the `overlap` row (time two or more compute classes
run at once, on several streams) add up to T_comp exactly; the other classes (communication, memory
operations) are listed beside it (`in_comp` false).

Exclusive time is a sweep over each class's merged segments: +1 and +code at a segment's start, -1 and -code
at its end, so where one class runs the running code is that class's.
"""

from __future__ import annotations

import polars as pl

from traceview.core.intervals import clip_to_windows, merge_intervals, union_length
from traceview.events.kernel_classes import CLASSES, COMPUTE_CLASSES, OVERLAP

CLASS_STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "kernel_class": pl.Utf8(),
    "in_comp": pl.Boolean(),
    "time_us": pl.Float64(),
    "exclusive_us": pl.Float64(),
    "kernels": pl.Int64(),
    "kernel_sum_us": pl.Float64(),
}
KEYS = ["rank", "step"]
_CODES = {name: index + 1 for index, name in enumerate(CLASSES)}


def clipped_events(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Classed device events (`kernel_class`, `name_id`, `key_id`) cut into the step windows, with `step`."""
    columns = ["rank", "name_id", "key_id", "start_us", "end_us", "event_class", "kernel_class"]
    if events.height == 0 or windows.height == 0:
        return pl.DataFrame(schema={**{c: events.schema.get(c, pl.Utf8) for c in columns}, "step": pl.Int64})
    return clip_to_windows(events.select(columns), windows, ["rank"])


def _exclusive(compute: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, class): the time that class alone runs among the compute classes."""
    code = pl.col("kernel_class").replace_strict(_CODES, return_dtype=pl.Int64)
    merged = merge_intervals(compute, [*KEYS, "kernel_class"]).with_columns(code.alias("_code"))
    edges = pl.concat(
        [
            merged.select(*KEYS, pl.col("start_us").alias("_t"), pl.lit(1).alias("_d"), pl.col("_code")),
            merged.select(*KEYS, pl.col("end_us").alias("_t"), pl.lit(-1).alias("_d"), -pl.col("_code")),
        ]
    ).sort([*KEYS, "_t"])
    swept = edges.with_columns(
        pl.col("_d").cum_sum().over(KEYS).alias("_active"),
        pl.col("_code").cum_sum().over(KEYS).alias("_running"),
        (pl.col("_t").shift(-1).over(KEYS) - pl.col("_t")).alias("_length"),
    )
    by_code = {index: name for name, index in _CODES.items()}
    return (
        swept.filter((pl.col("_active") == 1) & pl.col("_length").is_not_null())
        .group_by(*KEYS, "_running")
        .agg(pl.col("_length").sum().alias("exclusive_us"))
        .select(*KEYS, pl.col("_running").replace_strict(by_code).alias("kernel_class"), "exclusive_us")
    )


def _overlap_rows(per_class: pl.DataFrame, compute: pl.DataFrame) -> pl.DataFrame:
    """One `overlap` row per (rank, step): T_comp less the compute classes' exclusive times."""
    comp = union_length(compute, KEYS, "_comp_us")
    exclusive = per_class.filter(pl.col("in_comp")).group_by(KEYS).agg(pl.col("exclusive_us").sum())
    return comp.join(exclusive, on=KEYS, how="left").select(
        *KEYS,
        pl.lit(OVERLAP).alias("kernel_class"),
        pl.lit(True).alias("in_comp"),
        (pl.col("_comp_us") - pl.col("exclusive_us").fill_null(0.0)).clip(lower_bound=0.0).alias("time_us"),
        (pl.col("_comp_us") - pl.col("exclusive_us").fill_null(0.0))
        .clip(lower_bound=0.0)
        .alias("exclusive_us"),
        pl.lit(0, dtype=pl.Int64).alias("kernels"),
        pl.lit(0.0).alias("kernel_sum_us"),
    )


def class_steps(clipped: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, class) the figures of the module docstring (`CLASS_STEP_SCHEMA`), with the `overlap`
    row per (rank, step)."""
    if clipped.height == 0:
        return pl.DataFrame(schema=CLASS_STEP_SCHEMA)
    by = [*KEYS, "kernel_class"]
    compute = clipped.filter(pl.col("event_class") == "compute").select(*by, "start_us", "end_us")
    counted = clipped.group_by(by).agg(
        pl.len().cast(pl.Int64).alias("kernels"),
        (pl.col("end_us") - pl.col("start_us")).sum().alias("kernel_sum_us"),
    )
    per_class = (
        union_length(clipped.select(*by, "start_us", "end_us"), by, "time_us")
        .join(counted, on=by, how="left")
        .join(_exclusive(compute), on=by, how="left")
        .with_columns(
            pl.col("kernel_class").is_in(list(COMPUTE_CLASSES)).alias("in_comp"),
            pl.when(pl.col("kernel_class").is_in(list(COMPUTE_CLASSES)))
            .then(pl.col("exclusive_us").fill_null(0.0))
            .alias("exclusive_us"),
        )
    )
    rows = pl.concat(
        [per_class.select(list(CLASS_STEP_SCHEMA)), _overlap_rows(per_class, compute)], how="diagonal"
    )
    order = pl.col("kernel_class").replace_strict(
        {c: i for i, c in enumerate((*CLASSES, OVERLAP))}, default=99
    )
    return rows.sort([*KEYS, order]).select([pl.col(c).cast(t) for c, t in CLASS_STEP_SCHEMA.items()])
