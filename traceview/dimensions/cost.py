"""What each dimension costs per (rank, step) and per run (docs/metrics.md, "Parallelism dimensions", cost).

Per (dimension, rank, step), over the groups of that dimension: `calls`, `bytes` (sum of S), `bus_bytes` (sum
of f(n) S: what the ring puts on each rank's links), `comm_us` and `exposed_us` (the map's union per group,
`traceview.dimensions.group_time`, summed), `wait_us` and `transfer_us` (of its calls matched across ranks:
the member's wait for peers, the instance's transfer time; "Across ranks"), `matched_calls` and their
`matched_bus_bytes`. Per dimension: the medians over its (rank, step) cells, the achieved busbw (its matched
bus bytes over their transfer time: waits removed), its groups, sizes, links and the lowest confidence of its
groups.
"""

from __future__ import annotations

import polars as pl

from traceview.core.costmodel import bus_factor_expr
from traceview.dimensions.classify import UNKNOWN

STEP_FIGURES = ("calls", "bytes", "bus_bytes", "comm_us", "exposed_us", "wait_us", "transfer_us")
"""Figures per (dimension, rank, step); their medians are the dimension's."""
KEYS = ["dimension", "rank", "step"]


def _labelled(frame: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each group's (or line's: `labels` keyed by group and kind) dimension; a group the
    classification never saw (no call of it on the device, such as a host collective's) is `unknown`."""
    keys = [c for c in ("group", "kind") if c in labels.columns]
    return frame.join(labels, on=keys, how="left").with_columns(pl.col("dimension").fill_null(UNKNOWN))


def _bus(size: pl.Expr) -> pl.Expr:
    return (bus_factor_expr(pl.col("collective"), pl.col("group_size")).fill_null(1.0) * size).fill_null(0.0)


def call_figures(calls: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """Per (dimension, rank, step): calls, `unsized_calls` (of unknown S), bytes and bus_bytes (null when a
    call's S is unknown: a sum missing parts is no figure; `calls`: `features.calls_in_steps`)."""
    sized = pl.col("size_bytes").is_null().sum() == 0
    return (
        _labelled(calls, labels)
        .group_by(KEYS)
        .agg(
            pl.len().cast(pl.Float64).alias("calls"),
            pl.col("size_bytes").is_null().sum().cast(pl.Float64).alias("unsized_calls"),
            pl.when(sized).then(pl.col("size_bytes").sum().cast(pl.Float64)).alias("bytes"),
            pl.when(sized).then(_bus(pl.col("size_bytes").cast(pl.Float64)).sum()).alias("bus_bytes"),
        )
    )


def matched_figures(
    crossrank_calls: pl.DataFrame, instances: pl.DataFrame, labels: pl.DataFrame
) -> pl.DataFrame:
    """Per (dimension, rank, step): wait_us, transfer_us, matched_calls, matched_bus_bytes of its calls
    matched
    across ranks (usable instances: a transfer time)."""
    usable = instances.filter(pl.col("transfer_us").is_not_null()).select(
        "instance",
        "group",
        *([] if "kind" not in instances.columns else ["kind"]),
        "step",
        "collective",
        "size_bytes",
        pl.col("members").alias("group_size"),
        "transfer_us",
    )
    joined = _labelled(
        crossrank_calls.select("instance", "rank", "wait_us").join(usable, on="instance"), labels
    )
    return joined.group_by(KEYS).agg(
        pl.col("wait_us").sum(),
        pl.col("transfer_us").sum(),
        pl.len().cast(pl.Float64).alias("matched_calls"),
        _bus(pl.col("size_bytes").cast(pl.Float64)).sum().alias("matched_bus_bytes"),
    )


def time_figures(group_time: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """Per (dimension, rank, step): comm_us and exposed_us summed over its groups."""
    return (
        _labelled(group_time, labels).group_by(KEYS).agg(pl.col("comm_us").sum(), pl.col("exposed_us").sum())
    )


def per_step(calls: pl.DataFrame, times: pl.DataFrame, matched: pl.DataFrame) -> pl.DataFrame:
    """Every (dimension, rank, step) with all its figures (0 where it made no call of that kind; bytes and
    bus bytes stay null where a call's size is unknown)."""
    cells = pl.concat([frame.select(KEYS) for frame in (calls, times, matched)]).unique()
    table = (
        cells.join(calls, on=KEYS, how="left")
        .join(times, on=KEYS, how="left")
        .join(matched, on=KEYS, how="left")
    )
    unknown = pl.col("unsized_calls").fill_null(0.0) > 0
    sized = [c for c in ("bytes", "bus_bytes") if c in table.columns]
    filled = [c for c in table.columns if c not in KEYS and c not in sized]
    return table.with_columns(
        pl.col(filled).fill_null(0.0),
        *[pl.when(unknown).then(pl.col(c)).otherwise(pl.col(c).fill_null(0.0)).alias(c) for c in sized],
    ).sort(KEYS)


def per_dimension(steps: pl.DataFrame, groups: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """Per dimension: its groups and sizes, confidence, links, the medians of `STEP_FIGURES` over its (rank,
    step) cells, and its achieved busbw."""
    medians = steps.group_by("dimension").agg(
        pl.len().alias("rank_steps"),
        pl.col("rank").n_unique().alias("ranks"),
        *[pl.col(c).median().alias(c) for c in STEP_FIGURES],
        pl.col("matched_bus_bytes").sum().alias("_bus"),
        pl.col("unsized_calls").sum().alias("_unsized"),
        pl.col("calls").sum().alias("_calls"),
        pl.col("transfer_us").sum().alias("_transfer"),
    )
    described = groups.group_by("dimension").agg(
        pl.col("group").unique().sort().alias("groups"),
        pl.col("n").drop_nulls().median().alias("group_size"),
        pl.col("confidence").min().alias("confidence"),
        pl.col("desc").drop_nulls().unique().sort().alias("names"),
    )
    busbw = pl.when(pl.col("_transfer") > 0).then(pl.col("_bus") / (pl.col("_transfer") * 1e-6))
    return (
        medians.join(described, on="dimension", how="left")
        .join(links, on="dimension", how="left")
        .with_columns(busbw.alias("busbw_Bps"), _bytes_unknown())
        .drop("_bus", "_transfer", "_unsized", "_calls")
        .sort("exposed_us", "dimension", descending=[True, False])
    )


def _bytes_unknown() -> pl.Expr:
    """Why a dimension's bytes are null: how many of its calls carry no size (null when all do)."""
    return (
        pl.when(pl.col("_unsized") > 0)
        .then(
            pl.format(
                "the trace records no size for {} of its {} calls (bytes unknown, not zero)",
                pl.col("_unsized").cast(pl.Int64),
                pl.col("_calls").cast(pl.Int64),
            )
        )
        .alias("bytes_unknown")
    )


def dimension_links(calls: pl.DataFrame, priced: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """Per dimension: the links its priced calls ran on (`link`, the commonest; `links`, all; `link_Bps`, the
    median B; `spans_nodes`, whether most of its calls cross nodes; `on_host`, whether most ran on the host:
    gloo, MPI), and the model's latency share (k alpha over T_pred, summed over its calls)."""
    keys = [c for c in ("group", "kind") if c in labels.columns]
    joined = (
        calls.select(
            "rank", "start_us", *keys, (pl.col("comm_kind") == "host").fill_null(False).alias("_host")
        )
        .join(
            priced.select(
                "rank", "start_us", "link", "t_lat_us", "t_pred_us", "bandwidth_Bps", "spans_nodes"
            ),
            on=["rank", "start_us"],
        )
        .join(labels, on=keys, how="left")
    )
    return joined.group_by("dimension").agg(
        pl.col("link").drop_nulls().mode().sort().first().alias("link"),
        pl.col("link").drop_nulls().unique().sort().alias("links"),
        pl.col("bandwidth_Bps").median().alias("link_Bps"),
        (pl.col("spans_nodes").cast(pl.Float64).mean() > 0.5).alias("spans_nodes"),
        (pl.col("_host").cast(pl.Float64).mean() > 0.5).alias("on_host"),
        pl.when(pl.col("t_pred_us").sum() > 0)
        .then(pl.col("t_lat_us").sum() / pl.col("t_pred_us").sum())
        .alias("latency_share"),
    )
