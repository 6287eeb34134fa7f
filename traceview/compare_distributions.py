"""The samples a later comparison needs, kept in the JSON summary (docs/metrics.md, "Compare and trend").

A nightly job keeps only `traceview summary --json`; `traceview compare` and `traceview trend` then test a
change against the run's own spread, so the summary carries samples, not just medians:

- `collective_kernels`: per (process group, collective, size bucket) the on-device kernel durations and bus
  bandwidths, all of them up to `SKETCH_POINTS`, else that many evenly spaced order statistics (a quantile
  sketch; `kernels` keeps the true count);
- `kernel_classes`: per (rank, step, kernel class) the summed duration of the compute kernels of that class
  inside the step window (`KERNEL_CLASSES`, a table of name patterns, first match wins);
- `class_kernels`: per kernel class the durations of its compute kernels inside step windows (sketched as
  above);
- `algorithms`: per (collective, algorithm, protocol) the number of communication kernels (NCCL's choice as
  the kernel name spells it).

The per-step budget values (step, compute, communication, exposed, idle per rank and step) are already in
`time_budget.per_step`, and the per-instance arrival skew in `across_ranks.instances`.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceview.collective_tables import size_bucket_exprs
from traceview.intervals import clip_to_windows

SKETCH_POINTS = 512
"""Samples kept per collective group; beyond it, this many evenly spaced order statistics."""

KERNEL_CLASSES: tuple[tuple[str, str], ...] = (
    ("convolution", r"conv|winograd|cudnn"),
    ("gemm", r"gemm|cutlass|cublas|matmul|xmma|wgmma"),
    ("attention", r"flash|fmha|attention|attn|sdpa"),
    ("normalization", r"norm"),
    ("softmax", r"softmax"),
    ("optimizer", r"adam|sgd|multi_tensor|optimizer"),
    ("reduction", r"reduce|triton_red|sum_kernel"),
    ("embedding", r"embedding|index_select|gather|scatter"),
    ("elementwise", r"elementwise|vectorized|unrolled|triton_poi|fill|copy"),
)
"""Compute kernel classes: (class, case-insensitive regex on the kernel name); the first match wins, no match
is `other`."""

OTHER_CLASS = "other"


@dataclass(frozen=True)
class Distributions:
    """Samples of one run for comparisons (see the module docstring)."""

    collective_kernels: list[dict[str, object]]
    kernel_classes: pl.DataFrame
    class_kernels: list[dict[str, object]]
    algorithms: pl.DataFrame


def kernel_class_expr(name: pl.Expr) -> pl.Expr:
    """The class of each compute kernel name, from `KERNEL_CLASSES`."""
    expr: pl.Expr = pl.lit(OTHER_CLASS)
    for kernel_class, pattern in reversed(KERNEL_CLASSES):
        expr = pl.when(name.str.contains(f"(?i){pattern}")).then(pl.lit(kernel_class)).otherwise(expr)
    return expr


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


def _compute_in_steps(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Compute kernels cut to the step windows, with `step`, `kernel_class` and `dur_us`."""
    if events.height == 0 or windows.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "step": pl.Int64, "kernel_class": pl.Utf8,
                                    "dur_us": pl.Float64})  # fmt: skip
    compute = events.filter(pl.col("event_class") == "compute").select("rank", "name", "start_us", "end_us")
    return clip_to_windows(compute, windows, ["rank"]).select(
        "rank", "step", kernel_class_expr(pl.col("name")).alias("kernel_class"),
        (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
    )  # fmt: skip


def _class_kernels(compute: pl.DataFrame) -> list[dict[str, object]]:
    grouped = (
        compute.group_by("kernel_class").agg(pl.len().alias("kernels"), pl.col("dur_us")).sort("kernel_class")
    )
    return [
        {"kernel_class": row["kernel_class"], "kernels": row["kernels"], "dur_us": sketch(row["dur_us"])}
        for row in grouped.to_dicts()
    ]


def _kernel_classes(compute: pl.DataFrame) -> pl.DataFrame:
    schema = {"rank": pl.Int64, "step": pl.Int64, "kernel_class": pl.Utf8, "time_us": pl.Float64}
    return (
        compute.group_by("rank", "step", "kernel_class")
        .agg(pl.col("dur_us").sum().alias("time_us"))
        .sort("rank", "step", "kernel_class")
        .select([pl.col(c).cast(t) for c, t in schema.items()])
    )


def _algorithms(kernels: pl.DataFrame) -> pl.DataFrame:
    return (
        kernels.filter(pl.col("on_device"))
        .group_by("collective", "algorithm", "protocol")
        .agg(pl.len().cast(pl.Int64).alias("kernels"))
        .sort("collective", "algorithm", "protocol", nulls_last=True)
    )


def sample_distributions(events: pl.DataFrame, windows: pl.DataFrame, kernels: pl.DataFrame) -> Distributions:
    """The samples of one run: `events` are classified device events, `windows` the step windows, `kernels`
    the per-kernel frame of `traceview.collectives.comm_kernels`."""
    compute = _compute_in_steps(events, windows)
    return Distributions(
        collective_kernels=_collective_kernels(kernels),
        kernel_classes=_kernel_classes(compute),
        class_kernels=_class_kernels(compute),
        algorithms=_algorithms(kernels),
    )
