"""The samples a later comparison needs, kept in the JSON summary (docs/metrics.md, "Compare and trend").

A nightly job keeps only `traceview summary --json`; `traceview compare` and `traceview trend` then test a
change against the run's own spread, so the summary carries samples, not just medians:

- `collective_kernels`: per (process group, collective, size bucket) the on-device kernel durations and bus
  bandwidths, all of them up to `SKETCH_POINTS`, else that many evenly spaced order statistics (a quantile
  sketch; `kernels` keeps the true count);
- `kernel_classes`: per (rank, step, kernel class) the summed duration of the compute kernels of that class
  inside the step window (the kernel-class table, `traceview.events.kernel_classes`);
- `class_kernels`: per kernel class the durations of its compute kernels inside step windows (sketched as
  above);
- `algorithms`: per (collective, algorithm, protocol, algorithm_source, kernel_specialization) the number of
  communication kernels: the algorithm and protocol where a kernel name says what ran (`algorithm_source`
  `kernel_name`: NCCL <= 2.18, RCCL specialized), else null with the NCCL >= 2.19 kernel's specialisation;
- `collective_calls`: per (rank, process group, collective, message size in bytes) the number of on-device
  kernels and their median duration: the same call of the same rank in two runs of one job pairs up
  (`traceview.compare.paired`); at most `CALL_SIGNATURES` per rank, those of the largest total time;
- `crossrank_skew`: the arrival skew of the matched collective instances (`across_ranks.instances`), sketched
  as above with the true count, for a summary that lists only some of the instances.

Every sample is bounded by the run's steps, collectives and ranks, never by its events; which test reads each
and what the bound does to it: docs/metrics.md, "Compare and trend".

The per-step budget values (step, compute, communication, exposed, idle per rank and step) are already in
`time_budget.per_step`, and the per-instance arrival skew in `across_ranks.instances`.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.collectives.tables import size_bucket_exprs
from traceview.core.records import record
from traceview.model.stacking import by_rank

SKETCH_POINTS = 512
"""Samples kept per collective group; beyond it, this many evenly spaced order statistics."""

CALL_SIGNATURES = 256
"""(process group, collective, size) signatures kept per rank in `collective_calls`, the largest total first.
"""


@record
class Distributions:
    """Samples of one run for comparisons (see the module docstring)."""

    collective_kernels: list[dict[str, object]]
    kernel_classes: pl.DataFrame
    class_kernels: list[dict[str, object]]
    algorithms: pl.DataFrame
    collective_calls: pl.DataFrame
    crossrank_skew: dict[str, object] | None = None


def sketch(values: list[float], points: int = SKETCH_POINTS) -> list[float]:
    """`values` sorted; more than `points` of them become `points` evenly spaced order statistics."""
    ordered = sorted(values)
    if len(ordered) <= points:
        return ordered
    last = len(ordered) - 1
    return [ordered[round(i * last / (points - 1))] for i in range(points)]


def _collective_kernels(kernels: pl.DataFrame) -> list[dict[str, object]]:
    on_device = kernels.filter(pl.col("on_device") & pl.col("dur_us").is_not_null())
    grouped = (
        on_device.with_columns(size_bucket_exprs(pl.col("size_bytes"))[0])
        .with_columns(pl.col("collective").fill_null("unknown"))
        .group_by("pg_key", "collective", "size_bucket")
        .agg(pl.len().alias("kernels"), pl.col("dur_us"), pl.col("busbw_Bps").drop_nulls())
        .sort("pg_key", "collective", "size_bucket")
    )
    return [
        {
            "pg_key": row["pg_key"],
            "collective": row["collective"],
            "size_bucket": row["size_bucket"],
            "kernels": row["kernels"],
            "dur_us": sketch(row["dur_us"]),
            "busbw_Bps": sketch(row["busbw_Bps"]),
        }
        for row in grouped.to_dicts()
    ]


def _collective_calls(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, pg_key, collective, size_bytes; -1 unknown): kernels and their median duration."""
    keys = ["rank", "pg_key", "collective", "size_bytes"]
    return (
        kernels.filter(pl.col("on_device") & pl.col("dur_us").is_not_null())
        .with_columns(pl.col("collective").fill_null("unknown"), pl.col("size_bytes").fill_null(-1))
        .group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("kernels"),
            pl.col("dur_us").median().alias("median_us"),
            pl.col("dur_us").sum().alias("_total"),
        )
        .filter(pl.col("_total").rank("ordinal", descending=True).over("rank") <= CALL_SIGNATURES)
        .drop("_total")
        .sort(keys)
    )


_COMPUTE = pl.col("event_class") == "compute"
_IN_STEPS = [
    pl.col("rank").cast(pl.Int64),
    pl.col("step").cast(pl.Int64),
    pl.col("kernel_class").cast(pl.Utf8),
    (pl.col("end_us") - pl.col("start_us")).cast(pl.Float64).alias("dur_us"),
]


def _compute_in_steps(clipped: pl.DataFrame) -> pl.LazyFrame:
    """The compute kernels of classed device events cut to the step windows (`traceview.kernels.classes`),
    with `step`, `kernel_class` and `dur_us`."""
    return clipped.lazy().filter(_COMPUTE).select(_IN_STEPS)


_SKETCH_KEPT = pl.min_horizontal(pl.len(), SKETCH_POINTS)
_SKETCH_SPAN = pl.max_horizontal(
    _SKETCH_KEPT - 1, 1
)  # the last index kept: i * (n - 1) / span, exact if n kept
_SKETCH_INDEX = (
    (pl.int_range(_SKETCH_KEPT, dtype=pl.Int64) * (pl.len() - 1) / _SKETCH_SPAN)
    .round(mode="half_to_even")
    .cast(pl.Int64)
)
SKETCHED = pl.col("dur_us").sort().gather(_SKETCH_INDEX)
"""In a group's aggregation: `sketch` of its `dur_us` (the same order statistics, Python's `round` halving to
even), without leaving polars."""
_CLASS_KERNELS = [pl.len().cast(pl.Int64).alias("kernels"), SKETCHED]


def _class_kernels(compute: pl.LazyFrame) -> pl.LazyFrame:
    return compute.group_by("rank", "kernel_class").agg(_CLASS_KERNELS).sort("rank", "kernel_class")


_CLASS_TIME_SCHEMA = {"rank": pl.Int64, "step": pl.Int64, "kernel_class": pl.Utf8, "time_us": pl.Float64}
_CLASS_TIME = [pl.col(c).cast(t) for c, t in _CLASS_TIME_SCHEMA.items()]


def _kernel_classes(compute: pl.LazyFrame) -> pl.LazyFrame:
    return (
        compute.group_by("rank", "step", "kernel_class")
        .agg(pl.col("dur_us").sum().alias("time_us"))
        .sort("rank", "step", "kernel_class")
        .select(_CLASS_TIME)
    )


_ALGORITHM_KEYS = ("collective", "algorithm", "protocol", "algorithm_source", "kernel_specialization")


def _algorithms(kernels: pl.DataFrame) -> pl.DataFrame:
    return (
        kernels.filter(pl.col("on_device"))
        .group_by(*_ALGORITHM_KEYS)
        .agg(pl.len().cast(pl.Int64).alias("kernels"))
        .sort(*_ALGORITHM_KEYS, nulls_last=True)
    )


CLASS_SKETCH_SCHEMA: dict[str, pl.DataType] = {
    "kernel_class": pl.Utf8(),
    "kernels": pl.Int64(),
    "dur_us": pl.List(pl.Float64()),
}


_NO_SKETCHES = pl.DataFrame(schema=CLASS_SKETCH_SCHEMA)


def batch_class_parts(clipped: pl.DataFrame, ranks: Sequence[int]) -> list[tuple[pl.DataFrame, pl.DataFrame]]:
    """The map's part of the kernel-class samples of each of `ranks` (in that order) from their classed device
    events cut to their step windows, stacked (`traceview.kernels.classes.clipped_events`; rows with `rank`):
    per (rank, step, class) the compute time, and per class the kernel count with a sketch of the durations
    (`CLASS_SKETCH_SCHEMA`, no `rank`). One query for the whole batch."""
    compute = _compute_in_steps(clipped)
    kernel_classes, grouped = pl.collect_all([_kernel_classes(compute), _class_kernels(compute)])
    times, sketches = by_rank(kernel_classes, ranks), by_rank(grouped, ranks)
    for sketched in sketches:
        sketched.drop_in_place("rank")  # no query (`drop` runs one a rank)
    return [
        (time, sketched if sketched.height else _NO_SKETCHES)
        for time, sketched in zip(times, sketches, strict=True)
    ]


def merge_sketches(parts: pl.DataFrame) -> list[dict[str, object]]:
    """Per class, the sketches of several ranks merged: every duration when they are complete and together
    no more than `SKETCH_POINTS`, else `SKETCH_POINTS` evenly spaced quantiles of the ranks' samples, each
    sample weighted by the kernels it stands for."""
    merged = []
    for kernel_class, rows in sorted(
        parts.partition_by("kernel_class", as_dict=True).items()
    ):  # a few classes
        counts, samples = rows.get_column("kernels").to_list(), rows.get_column("dur_us").to_list()
        total = sum(counts)
        values = [v for sample in samples for v in sample]
        if len(values) == total:
            merged.append({"kernel_class": kernel_class[0], "kernels": total, "dur_us": sketch(values)})
            continue
        weighted = sorted((v, c / len(s)) for c, s in zip(counts, samples, strict=True) for v in s)
        merged.append(
            {"kernel_class": kernel_class[0], "kernels": total, "dur_us": _weighted_sketch(weighted, total)}
        )
    return merged


def _weighted_sketch(weighted: list[tuple[float, float]], total: float) -> list[float]:
    """`SKETCH_POINTS` evenly spaced quantiles of (value, weight) pairs sorted by value."""
    targets = [i * total / (SKETCH_POINTS - 1) for i in range(SKETCH_POINTS)]
    found, reached, index = [], 0.0, 0
    for target in targets:
        while index < len(weighted) - 1 and reached + weighted[index][1] < target:
            reached += weighted[index][1]
            index += 1
        found.append(weighted[index][0])
    return found


def skew_sample(instances: pl.DataFrame | None) -> dict[str, object] | None:
    """The instances' arrival skews (`skew_us`, sketched) and their count; None without instances."""
    if instances is None or "skew_us" not in instances.columns:
        return None
    skews = instances.get_column("skew_us").drop_nulls().drop_nans()
    return {"instances": skews.len(), "skew_us": sketch(skews.to_list())}


def distributions_from_parts(
    kernel_classes: pl.DataFrame,
    class_sketches: pl.DataFrame,
    kernels: pl.DataFrame,
    instances: pl.DataFrame | None = None,
) -> Distributions:
    """The samples of one run from every rank's `batch_class_parts`, the run's communication kernels and its
    matched collective instances."""
    return Distributions(
        collective_kernels=_collective_kernels(kernels),
        kernel_classes=kernel_classes.sort("rank", "step", "kernel_class"),
        class_kernels=merge_sketches(class_sketches),
        algorithms=_algorithms(kernels),
        collective_calls=_collective_calls(kernels),
        crossrank_skew=skew_sample(instances),
    )
