"""Whether the run's collectives cost their bytes or their calls (docs/metrics.md section 5, "bytes or
calls"): the alpha-beta model's two terms, T = k alpha + f S / B, summed over the priced calls.

`comm_bw_term_share` = sum f S / B over sum (k alpha + f S / B) of the calls the prediction priced (their
links known: datasheet, stated or measured). Where no call's link is known (host collectives without
`--host-bandwidth`), `comm_bw_term_floor` is the same share with every call on the slowest link of the
hardware table (`floor_bandwidth`) and the scope's default alpha: B can only be faster, so a floor under
one half proves the calls latency-bound, and one above it proves nothing. `comm_call_bytes` is the median
call's size.
"""

from __future__ import annotations

import polars as pl

from traceview.core.costmodel import bus_factor_expr, latency_steps_expr
from traceview.core.hardware import table
from traceview.prediction.links import DEFAULT_ALPHA_S
from traceview.verdict._facts_base import Found, Measured, finite


def floor_bandwidth() -> float:
    """The slowest link of the hardware table (one direction, bytes/s): no real link is slower."""
    return min(spec.bandwidth_bytes_per_s for spec in table().links.values())


def _scope_alpha_s() -> pl.Expr:
    """The default alpha of each call's scope: across nodes, on the host (gloo, MPI), else inside a node."""
    return (
        pl.when(pl.col("spans_nodes").fill_null(False))
        .then(pl.lit(DEFAULT_ALPHA_S["inter"]))
        .when((pl.col("comm_kind") == "host").fill_null(False))
        .then(pl.lit(DEFAULT_ALPHA_S["host"]))
        .otherwise(pl.lit(DEFAULT_ALPHA_S["intra"]))
    )


def _bw_share(terms: pl.DataFrame) -> float | None:
    """sum t_bw over sum (t_bw + t_lat), None without a term."""
    bandwidth, latency = terms.select(pl.col("t_bw").sum(), pl.col("t_lat").sum()).row(0)
    total = float(bandwidth) + float(latency)
    return float(bandwidth) / total if total > 0 else None


def comm_term_facts(measured: Measured) -> Found:
    """`comm_bw_term_share` (links known) or `comm_bw_term_floor` (none known), and `comm_call_bytes`."""
    prediction = measured.prediction
    calls = prediction.calls if prediction is not None else pl.DataFrame()
    if calls.height == 0 or "size_bytes" not in calls.columns:
        return {}, {}
    sized = calls.filter(pl.col("size_bytes").is_not_null() & (pl.col("size_bytes") > 0))
    if sized.height == 0:
        return {}, {}
    numbers = finite({"comm_call_bytes": sized.get_column("size_bytes").median()})
    priced = sized.filter(pl.col("t_bw_us").is_not_null() & pl.col("t_lat_us").is_not_null())
    if priced.height:
        terms = priced.select(pl.col("t_bw_us").alias("t_bw"), pl.col("t_lat_us").alias("t_lat"))
        return numbers | finite({"comm_bw_term_share": _bw_share(terms)}), {}
    n = pl.col("group_size")
    floor = sized.select(
        (bus_factor_expr(pl.col("collective"), n) * pl.col("size_bytes") / floor_bandwidth()).alias("t_bw"),
        (latency_steps_expr(pl.col("collective"), n) * _scope_alpha_s()).alias("t_lat"),
    ).drop_nulls()
    return numbers | finite({"comm_bw_term_floor": _bw_share(floor) if floor.height else None}), {}
