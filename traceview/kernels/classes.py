"""Time by kernel class per (rank, step) (docs/metrics.md, "Kernels and operators").

Device events are cut into the step windows as the time budget cuts them (`clip_to_windows`), so the compute
classes describe exactly T_comp. Per (rank, step, class): `time_us`, the union of the class's kernels;
`exclusive_us`, the time only that class runs; `kernels`, the pieces counted; `kernel_sum_us`, the sum of
their durations. The compute classes' `exclusive_us` and the `overlap` row (time two or more compute classes
run at once, on several streams) add up to T_comp exactly; the other classes (communication, memory
operations) are listed beside it (`in_comp` false).

Times come from one sweep over every piece's start (+1) and end (-1), in a column per class (`_sweep`): a
class runs where its running count is positive; where it is the only compute class running, that time is its
exclusive time; where two or more compute classes run, the overlap. One query computes the frame.
"""

from __future__ import annotations

import polars as pl

from traceview.core.intervals import clip_to_windows
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


def clipped_events(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Classed device events (`kernel_class`, `name_id`, `key_id`) cut into the step windows, with `step`."""
    columns = ["rank", "name_id", "key_id", "start_us", "end_us", "event_class", "kernel_class"]
    if events.height == 0 or windows.height == 0:
        return pl.DataFrame(schema={**{c: events.schema.get(c, pl.Utf8) for c in columns}, "step": pl.Int64})
    return clip_to_windows(events.select(columns), windows, ["rank"])


_COMPUTE = [c for c in CLASSES if c in COMPUTE_CLASSES]
_RUNS = {c: pl.col(f"_n_{c}") > 0 for c in CLASSES}
_ALONE = pl.col("_running") == 1
_SUMS = [
    *(pl.col("_len").filter(_RUNS[c]).sum().alias(f"time:{c}") for c in CLASSES),
    *(pl.col("_len").filter(_RUNS[c] & _ALONE).sum().alias(f"alone:{c}") for c in _COMPUTE),
    pl.col("_len").filter(pl.col("_running") >= 2).sum().alias(f"time:{OVERLAP}"),
]
_ORDER = pl.col("kernel_class").replace_strict({c: i for i, c in enumerate((*CLASSES, OVERLAP))}, default=99)


def _marks(time: str, step: int) -> list[pl.Expr]:
    is_class = [((pl.col("kernel_class") == c).cast(pl.Int32) * step).alias(f"_n_{c}") for c in CLASSES]
    return [*map(pl.col, KEYS), pl.col(time).alias("_t"), *is_class]


_EDGES = (_marks("start_us", 1), _marks("end_us", -1))


def _sweep(clipped: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, step, class): `time_us` (where the class runs), `exclusive_us` (where it is the only compute
    class running; null for the others) and, as class `overlap`, the time two or more compute classes run.

    One sweep over every interval's start (+1) and end (-1) in its class's column: sorted by (rank, step,
    time), a class runs where its running count is positive. Each (rank, step)'s counts return to 0 at its
    last end, so one running sum over the whole frame is each group's, and a piece's length (to the next edge)
    is never read across groups (the last edge of a group leaves nothing running). Every class has its
    column; one that never runs sums to 0 and is dropped with the rows of no time (`_long`)."""
    counts = [f"_n_{c}" for c in CLASSES]
    edges = pl.concat([clipped.select(*marks) for marks in _EDGES]).sort([*KEYS, "_t"])
    running = edges.with_columns(
        pl.col(counts).cum_sum(), (pl.col("_t").shift(-1) - pl.col("_t")).alias("_len")
    ).with_columns(pl.sum_horizontal(_RUNS[c] for c in _COMPUTE).alias("_running"))
    return _long(running.group_by(KEYS).agg(_SUMS))


def _long(wide: pl.LazyFrame) -> pl.LazyFrame:
    """`time:<class>` and `alone:<class>` columns per (rank, step) as rows (rank, step, kernel_class,
    time_us, exclusive_us)."""
    long = wide.unpivot(index=KEYS, variable_name="_what", value_name="_us").with_columns(
        pl.col("_what").str.extract(r"^(\w+):", 1).alias("_kind"),
        pl.col("_what").str.extract(r":(.+)$", 1).alias("kernel_class"),
    )
    times = long.filter(pl.col("_kind") == "time").select(
        *KEYS, "kernel_class", pl.col("_us").alias("time_us")
    )
    alone = long.filter(pl.col("_kind") == "alone").select(
        *KEYS, "kernel_class", pl.col("_us").alias("exclusive_us")
    )
    found = times.join(alone, on=[*KEYS, "kernel_class"], how="left")
    keep = (pl.col("time_us") > 0) | (pl.col("kernel_class") == OVERLAP)
    overlap = pl.col("kernel_class") == OVERLAP
    exclusive = pl.when(overlap).then(pl.col("time_us")).otherwise(pl.col("exclusive_us"))
    return found.filter(keep).with_columns(exclusive.alias("exclusive_us"))


def class_steps(clipped: pl.DataFrame) -> pl.LazyFrame:
    """Per (rank, step, class) the figures of the module docstring (`CLASS_STEP_SCHEMA`), with the `overlap`
    row per (rank, step), from one sweep (`_sweep`); a query."""
    if clipped.height == 0:
        return pl.LazyFrame(schema=CLASS_STEP_SCHEMA)
    by = [*KEYS, "kernel_class"]
    events = clipped.lazy()
    figures = events.group_by(by).agg(
        pl.len().cast(pl.Int64).alias("kernels"),
        (pl.col("end_us") - pl.col("start_us")).sum().alias("kernel_sum_us"),
    )
    compute = pl.col("kernel_class").is_in(list(COMPUTE_CLASSES))
    has_compute = (
        events.filter(pl.col("event_class") == "compute")
        .select(KEYS)
        .unique()
        .with_columns(pl.lit(True).alias("_has_compute"))
    )
    rows = (
        _sweep(events)
        .join(figures, on=by, how="left")
        .with_columns(
            (compute | (pl.col("kernel_class") == OVERLAP)).alias("in_comp"),
            pl.col("kernels").fill_null(0),
            pl.col("kernel_sum_us").fill_null(0.0),
        )
        .join(has_compute, on=KEYS, how="left")
        .filter((pl.col("kernel_class") != OVERLAP) | pl.col("_has_compute").fill_null(False))
    )
    return rows.sort([*KEYS, _ORDER]).select([pl.col(c).cast(t) for c, t in CLASS_STEP_SCHEMA.items()])
