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

import functools

import polars as pl

from traceview.core.intervals import clipped
from traceview.core.records import record
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


_CLIPPED_COLUMNS = ["rank", "name_id", "key_id", "start_us", "end_us", "event_class", "kernel_class"]


def clipped_events(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Classed device events (`kernel_class`, `name_id`, `key_id`) cut into the step windows, with `step`."""
    if events.height == 0 or windows.height == 0:
        schema = events.schema
        return pl.DataFrame(
            schema={**{c: schema.get(c, pl.Utf8) for c in _CLIPPED_COLUMNS}, "step": pl.Int64}
        )
    return clipped(events.lazy().select(_CLIPPED_COLUMNS), windows.lazy(), ["rank"]).collect()


_ALONE = pl.col("_running") == 1
_ORDER = pl.col("kernel_class").replace_strict({c: i for i, c in enumerate((*CLASSES, OVERLAP))}, default=99)
_IS_COMPUTE_EVENT = (pl.col("event_class") == "compute").alias("_compute")
_HAS_COMPUTE = pl.col("_compute").any().alias("_has_compute")
_FLAGGED = [*KEYS, "_has_compute"]
_IS_OVERLAP = pl.col("kernel_class") == OVERLAP
_KEEP = (pl.col("time_us") > 0) | _IS_OVERLAP
_NOT_ALONE = pl.lit(None, pl.Float64)
_OVERLAP_US = pl.col("_len").filter(pl.col("_running") >= 2).sum()
_OVERLAP_FIGURES = pl.struct(_OVERLAP_US.alias("time_us"), _OVERLAP_US.alias("exclusive_us")).alias(OVERLAP)


def _marks(classes: tuple[str, ...], time: str, step: int) -> list[pl.Expr]:
    is_class = [((pl.col("kernel_class") == c).cast(pl.Int32) * step).alias(f"_n_{c}") for c in classes]
    return [*map(pl.col, KEYS), pl.col(time).alias("_t"), _IS_COMPUTE_EVENT, *is_class]


def _figures(kernel_class: str) -> pl.Expr:
    """The class's `time_us` (where it runs) and `exclusive_us` (where it is the only compute class running;
    null for the other classes), one struct per (rank, step)."""
    runs = pl.col(f"_n_{kernel_class}") > 0
    alone = pl.col("_len").filter(runs & _ALONE).sum() if kernel_class in COMPUTE_CLASSES else _NOT_ALONE
    return pl.struct(pl.col("_len").filter(runs).sum().alias("time_us"), alone.alias("exclusive_us"))


@record
class _Sweep:
    """The expressions of one sweep over `classes` (those a rank's events have: a class no event has never
    runs, so its columns would only sum to 0), built once per set of classes (`_sweep_of`)."""

    edges: tuple[list[pl.Expr], list[pl.Expr]]
    running: tuple[pl.Expr, pl.Expr]
    computing: pl.Expr
    figures: tuple[pl.Expr, ...]
    classes: tuple[str, ...]


@functools.cache
def _sweep_of(classes: tuple[str, ...]) -> _Sweep:
    """The `_Sweep` of `classes` (in `CLASSES` order)."""
    compute = [pl.col(f"_n_{c}") > 0 for c in classes if c in COMPUTE_CLASSES]
    return _Sweep(
        edges=(_marks(classes, "start_us", 1), _marks(classes, "end_us", -1)),
        running=(
            pl.col([f"_n_{c}" for c in classes]).cum_sum(),
            (pl.col("_t").shift(-1) - pl.col("_t")).alias("_len"),
        ),
        computing=(pl.sum_horizontal(compute) if compute else pl.lit(0)).alias("_running"),
        figures=(*(_figures(c).alias(c) for c in classes), _OVERLAP_FIGURES, _HAS_COMPUTE),
        classes=(*classes, OVERLAP),
    )


def _sweep(clipped: pl.LazyFrame, classes: tuple[str, ...]) -> pl.LazyFrame:
    """Per (rank, step, class): `time_us` (where the class runs), `exclusive_us` (where it is the only compute
    class running; null for the others) and, as class `overlap`, the time two or more compute classes run.

    One sweep over every interval's start (+1) and end (-1) in its class's column (`classes`: those the
    events have): sorted by (rank, step, time), a class runs where its running count is positive. Each
    (rank, step)'s counts return to 0 at its last end, so one running sum over the whole frame is each
    group's, and a piece's length (to the next edge) is never read across groups (the last edge of a group
    leaves nothing running). A class's figures are a struct column per (rank, step), then a row; a class that
    never runs sums to 0 and its row is dropped. Each row keeps `_has_compute`: whether the (rank, step) has a
    compute event."""
    sweep = _sweep_of(classes)
    edges = pl.concat([clipped.select(*marks) for marks in sweep.edges]).sort([*KEYS, "_t"])
    running = edges.with_columns(*sweep.running).with_columns(sweep.computing)
    wide = running.group_by(KEYS).agg(sweep.figures)
    long = wide.unpivot(sweep.classes, index=_FLAGGED, variable_name="kernel_class", value_name="_figures")
    return long.unnest("_figures").filter(_KEEP)


_BY = [*KEYS, "kernel_class"]
_FIGURES = (
    pl.len().cast(pl.Int64).alias("kernels"),
    (pl.col("end_us") - pl.col("start_us")).sum().alias("kernel_sum_us"),
)
_FILLED = (
    (pl.col("kernel_class").is_in(list(COMPUTE_CLASSES)) | _IS_OVERLAP).alias("in_comp"),
    pl.col("kernels").fill_null(0),
    pl.col("kernel_sum_us").fill_null(0.0),
)
_CLASS_STEP_COLUMNS = [pl.col(c).cast(t) for c, t in CLASS_STEP_SCHEMA.items()]


def class_steps(clipped: pl.DataFrame) -> pl.LazyFrame:
    """Per (rank, step, class) the figures of the module docstring (`CLASS_STEP_SCHEMA`), with the `overlap`
    row per (rank, step) where the step has a compute event, from one sweep (`_sweep`); a query."""
    if clipped.height == 0:
        return pl.LazyFrame(schema=CLASS_STEP_SCHEMA)
    present = set(clipped.get_column("kernel_class").unique().to_list())
    events = clipped.lazy()
    rows = (
        _sweep(events, tuple(c for c in CLASSES if c in present))
        .join(events.group_by(_BY).agg(_FIGURES), on=_BY, how="left")
        .with_columns(_FILLED)
        .filter(~_IS_OVERLAP | pl.col("_has_compute"))
    )
    return rows.sort([*KEYS, _ORDER]).select(_CLASS_STEP_COLUMNS)
