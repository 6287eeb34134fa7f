"""Tables of the collectives a run made (docs/metrics.md, "Collectives"): per rank and (process group,
collective, message-size bucket), per process group, per rank, from the per-kernel frame of
`traceview.collectives.kernels.comm_kernels`.

A call is counted once however many kernels it launched (`first_in_call`), and its bytes are its size S
(docs/metrics.md, "Collectives"). Times are kernel times (us); the share of T_comm divides a group's kernel
time by the rank's T_comm, the union of its communication kernels over the whole trace (docs/metrics.md
section 4), so the shares of a rank whose kernels overlap on several streams add up to more than 1. A column
that describes the group (`group_size`, `pg_desc`) is null unless all the group's rows agree on it (the
`unknown` process group mixes groups).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace

import polars as pl

from traceview.collectives.kernels import comm_kernels
from traceview.core.costmodel import bus_factor_expr
from traceview.core.intervals import union_length
from traceview.core.records import record
from traceview.core.sanitize import printable
from traceview.events.kernel_table import SUSPECTED_LIBRARY
from traceview.model.trace import Run

SIZE_BUCKETS: tuple[tuple[int, str], ...] = (
    (0, "< 1 KiB"),
    (1 << 10, "1 KiB - 16 KiB"),
    (1 << 14, "16 KiB - 256 KiB"),
    (1 << 18, "256 KiB - 4 MiB"),
    (1 << 22, "4 MiB - 64 MiB"),
    (1 << 26, "64 MiB - 1 GiB"),
    (1 << 30, ">= 1 GiB"),
)
"""Message-size buckets of S: (lower bound in bytes, inclusive; label). Powers of 16 from 1 KiB, so
latency-bound and bandwidth-bound messages fall apart. S unknown: bucket `unknown` (lower bound null)."""

UNKNOWN = "unknown"
SUSPECTED_SCHEMA: Mapping[str, pl.DataType] = {
    "name": pl.Utf8(),
    "ranks": pl.Int64(),
    "kernels": pl.Int64(),
    "total_us": pl.Float64(),
}
"""Columns of `CollectiveAnalysis.suspected_comm_kernels`: per distinct name, how many ranks ran it, how many
kernels, their summed duration (us)."""
SUSPECTS_NAMED = 5
GROUP_KEYS = ("rank", "pg_key", "collective", "size_bucket")


@record
class CollectiveAnalysis:
    """The collectives of a run: every communication kernel linked to its call, and the tables built from it.

    `unknown_comm_kernels`: on-device communication kernels whose collective is unknown (null);
    `linked_share`: share of on-device communication kernels linked to a call (None without kernels);
    `suspected_comm_kernels`: the distinct kernel names counted as communication only because they look like
    it (library `suspected`, `SUSPECTED_SCHEMA`; docs/metrics.md section 2)."""

    kernels: pl.DataFrame
    per_collective: pl.DataFrame
    per_process_group: pl.DataFrame
    per_rank: pl.DataFrame
    unknown_comm_kernels: int
    linked_share: float | None
    suspected_comm_kernels: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=SUSPECTED_SCHEMA)
    )

    @property
    def warnings(self) -> tuple[str, ...]:
        """One run warning naming the suspected communication kernels, when there are any."""
        return suspected_warnings(self.suspected_comm_kernels)

    @property
    def collectives_present(self) -> list[str]:
        """The known collectives that have at least one kernel or CPU call, in first-seen order."""
        return self.kernels.get_column("collective").drop_nulls().unique(maintain_order=True).to_list()


def size_bucket_exprs(size: pl.Expr) -> list[pl.Expr]:
    """`size_bucket` (label) and `size_bucket_bytes` (its lower bound) of a column of sizes S in bytes."""
    bounds = [lower for lower, _ in SIZE_BUCKETS]
    index = pl.lit(0, pl.Int64)
    for lower in bounds[1:]:
        index = index + (size >= lower).cast(pl.Int64)
    labels = {i: label for i, (_, label) in enumerate(SIZE_BUCKETS)}
    lowers = dict(enumerate(bounds))
    known = size.is_not_null()
    return [
        pl.when(known)
        .then(index.replace_strict(labels, return_dtype=pl.Utf8))
        .otherwise(pl.lit(UNKNOWN))
        .alias("size_bucket"),
        pl.when(known).then(index.replace_strict(lowers, return_dtype=pl.Int64)).alias("size_bucket_bytes"),
    ]


def _moving() -> pl.Expr:
    """The rows whose time is communication: every row that moves data (docs/metrics.md section 4)."""
    return pl.col("moves_data").fill_null(True)


def comm_time(kernels: pl.DataFrame) -> pl.DataFrame:
    """T_comm of each rank over the whole trace: `rank`, `comm_us`, the union of its communication intervals
    (device kernels, copy-engine transfers, host collective ops that move data; each moment once)."""
    moving = kernels.filter(_moving()).select("rank", "start_us", "end_us")
    return union_length(moving, ["rank"], "comm_us")


def _agreed(column: str) -> pl.Expr:
    """The group's one value of `column`; null when its rows disagree or some do not say."""
    values = pl.col(column)
    return pl.when((values.null_count() == 0) & (values.n_unique() == 1)).then(values.first()).alias(column)


def _call_figures() -> list[pl.Expr]:
    """Calls, kernels, time and bytes of a group of kernel rows (bytes: S of each call, counted once)."""
    first = pl.col("first_in_call")
    return [
        first.sum().cast(pl.Int64).alias("calls"),
        pl.len().cast(pl.Int64).alias("kernels"),
        pl.col("dur_us").sum().alias("total_us"),
        pl.when((first & pl.col("size_bytes").is_not_null()).any())
        .then(pl.col("size_bytes").filter(first).sum())
        .alias("size_bytes"),
        (first & pl.col("size_bytes").is_null()).sum().cast(pl.Int64).alias("calls_unknown_size"),
    ]


def per_collective_table(kernels: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, process group, collective, size bucket): calls, kernels, total and median kernel time,
    bytes, median and p10/p90 busbw, share of the rank's T_comm (docs/metrics.md, "Collectives" and section
    4)."""
    busbw = pl.col("busbw_Bps")
    return (
        kernels.with_columns(
            pl.col("collective").fill_null(UNKNOWN), *size_bucket_exprs(pl.col("size_bytes"))
        )
        .group_by([*GROUP_KEYS, "size_bucket_bytes"])
        .agg(
            _agreed("pg_name"),
            _agreed("group_size"),
            *_call_figures(),
            pl.col("dur_us").median().alias("median_us"),
            pl.col("size_bytes").min().alias("size_min_bytes"),
            pl.col("size_bytes").max().alias("size_max_bytes"),
            busbw.median().alias("median_busbw_Bps"),
            busbw.quantile(0.1, "linear").alias("p10_busbw_Bps"),
            busbw.quantile(0.9, "linear").alias("p90_busbw_Bps"),
            pl.col("dur_us").filter(_moving()).sum().alias("_device_us"),
        )
        .join(comm, on="rank", how="left")
        .with_columns(
            pl.when(pl.col("comm_us") > 0)
            .then(pl.col("_device_us") / pl.col("comm_us"))
            .alias("share_of_comm")
        )
        .drop("_device_us", "comm_us")
        .sort(["rank", "pg_key", "collective", "size_bucket_bytes"], nulls_last=True)
    )


def with_transfer_busbw(analysis: CollectiveAnalysis, calls: pl.DataFrame) -> CollectiveAnalysis:
    """The analysis with `median_transfer_busbw_Bps` in `per_collective`: the bus bandwidth with the wait for
    later peers removed, S / transfer time x f(n) per call (transfer: the instance's time after its last
    member arrived, `calls` rows of the across-ranks analysis: rank, group, collective, size_bytes,
    transfer_us), median per (rank, process group, collective, size bucket); null where no call was matched
    across ranks (docs/metrics.md, "Collectives")."""
    table = analysis.per_collective.drop("median_transfer_busbw_Bps", strict=False)
    keys = [*GROUP_KEYS]
    sizes = table.select(*keys, "group_size")
    transfer = (
        calls.filter((pl.col("transfer_us") > 0) & pl.col("size_bytes").is_not_null())
        .rename({"group": "pg_key"})
        .with_columns(pl.col("collective").fill_null(UNKNOWN), *size_bucket_exprs(pl.col("size_bytes")))
        .join(sizes, on=keys, how="inner")
        .with_columns(
            (
                pl.col("size_bytes")
                / (pl.col("transfer_us") * 1e-6)
                * bus_factor_expr(pl.col("collective"), pl.col("group_size"))
            ).alias("transfer_busbw_Bps")
        )
        .group_by(keys)
        .agg(pl.col("transfer_busbw_Bps").median().alias("median_transfer_busbw_Bps"))
    )
    joined = table.join(transfer, on=keys, how="left")
    return replace(analysis, per_collective=joined)


def per_process_group_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per process group (`pg_key`): name, description, ranks, size, the ranks of the run seen in it, calls,
    kernels, total kernel time over those ranks, bytes."""
    return (
        kernels.group_by("pg_key")
        .agg(
            *[_agreed(c) for c in ("pg_name", "pg_desc", "pg_ranks", "group_size")],
            pl.col("rank").unique().sort().cast(pl.Utf8).str.join(", ").alias("ranks_seen"),
            pl.col("collective").drop_nulls().unique().sort().str.join(", ").alias("collectives"),
            *_call_figures(),
        )
        .with_columns(pl.concat_str(pl.lit("["), pl.col("ranks_seen"), pl.lit("]")).alias("ranks_seen"))
        .sort("total_us", descending=True)
    )


def _device_kernel() -> pl.Expr:
    """An on-device communication kernel (not a copy-engine transfer, not a host op)."""
    return pl.col("on_device") & (pl.col("comm_kind").fill_null("device") != "copy engine")


def per_rank_table(kernels: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Per rank: communication kernels, copy-engine transfers, CPU-only calls, how many kernels are linked and
    unknown, calls, bytes, kernel time, T_comm."""
    device = _device_kernel()
    linked = device & (pl.col("linked_by") != "unlinked")
    return (
        kernels.group_by("rank")
        .agg(
            device.sum().cast(pl.Int64).alias("comm_kernels"),
            (pl.col("comm_kind") == "copy engine").sum().cast(pl.Int64).alias("copy_transfers"),
            (~pl.col("on_device")).sum().cast(pl.Int64).alias("cpu_calls"),
            linked.sum().cast(pl.Int64).alias("linked_kernels"),
            (device & pl.col("collective").is_null()).sum().cast(pl.Int64).alias("unknown_collective"),
            *[e for e in _call_figures() if e.meta.output_name() != "kernels"],
        )
        .join(comm, on="rank", how="left")
        .with_columns(
            pl.when(pl.col("comm_kernels") > 0)
            .then(pl.col("linked_kernels") / pl.col("comm_kernels"))
            .alias("linked_share"),
            pl.col("comm_us").fill_null(0.0),
        )
        .sort("rank")
    )


def collective_tables(kernels: pl.DataFrame) -> CollectiveAnalysis:
    """The tables and counts of `CollectiveAnalysis` from the per-kernel frame of `comm_kernels`."""
    comm = comm_time(kernels)
    device = kernels.filter(_device_kernel())
    linked = device.filter(pl.col("linked_by") != "unlinked").height
    return CollectiveAnalysis(
        kernels=kernels,
        per_collective=per_collective_table(kernels, comm),
        per_process_group=per_process_group_table(kernels),
        per_rank=per_rank_table(kernels, comm),
        unknown_comm_kernels=device.filter(pl.col("collective").is_null()).height,
        linked_share=linked / device.height if device.height else None,
    )


def suspected_comm_kernels(events: pl.DataFrame) -> pl.DataFrame:
    """The distinct names of the classified events whose library is `suspected` (`SUSPECTED_SCHEMA`), the
    longest total first."""
    if (
        "comm_library" not in events.columns
        or not (events.get_column("comm_library") == SUSPECTED_LIBRARY).any()
    ):
        return pl.DataFrame(schema=dict(SUSPECTED_SCHEMA))
    return (
        events.lazy()
        .filter((pl.col("comm_library") == SUSPECTED_LIBRARY) & (pl.col("event_class") == "comm"))
        .group_by("name")
        .agg(
            pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"),
            pl.len().cast(pl.Int64).alias("kernels"),
            (pl.col("end_us") - pl.col("start_us")).sum().cast(pl.Float64).alias("total_us"),
        )
        .sort(["total_us", "name"], descending=[True, False])
        .select([pl.col(c).cast(t) for c, t in SUSPECTED_SCHEMA.items()])
        .collect()
    )


def merged_suspects(parts: pl.DataFrame) -> pl.DataFrame:
    """Per-rank `suspected_comm_kernels` tables as one (ranks, kernels and times added up by name)."""
    return (
        parts.group_by("name")
        .agg(pl.col("ranks").sum(), pl.col("kernels").sum(), pl.col("total_us").sum())
        .sort(["total_us", "name"], descending=[True, False])
        .select([pl.col(c).cast(t) for c, t in SUSPECTED_SCHEMA.items()])
    )


def suspected_warnings(suspects: pl.DataFrame) -> tuple[str, ...]:
    """The run warning listing suspected communication kernels (the first `SUSPECTS_NAMED` by time)."""
    if suspects.height == 0:
        return ()
    named = "; ".join(
        f"{printable(row['name'], 120)!r} ({row['kernels']} kernels, {row['total_us'] / 1000:.3f} ms)"
        for row in suspects.head(SUSPECTS_NAMED).iter_rows(named=True)
    )
    more = f"; and {suspects.height - SUSPECTS_NAMED} more" if suspects.height > SUSPECTS_NAMED else ""
    return (
        f"{suspects.height} kernel name(s) look like communication but match no known library; counted as "
        f"communication of unknown collective: {named}{more}. If one is compute, pass --compute-pattern "
        f"REGEX",
    )


def analyze_collectives(run: Run, events: pl.DataFrame) -> CollectiveAnalysis:
    """Every communication kernel of `run` linked to its call, the collectives tables, and the suspected
    communication kernels.

    `events` is `traceview.budget.time_budget.classified_events(run, patterns)` (computed once by the caller).
    """
    tables = collective_tables(comm_kernels(run, events))
    return replace(tables, suspected_comm_kernels=suspected_comm_kernels(events))


def gate_figures(analysis: CollectiveAnalysis | None) -> Mapping[str, float | None]:
    """The figures `--fail-on` can name (docs/metrics.md): `comm_linked_share`, `comm_unknown_kernels`."""
    if analysis is None:
        return {}
    return {
        "comm_linked_share": analysis.linked_share,
        "comm_unknown_kernels": float(analysis.unknown_comm_kernels),
    }
