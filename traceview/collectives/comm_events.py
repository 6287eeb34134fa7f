"""Communication wherever it runs (docs/metrics.md section 4): the classified device events of a rank made to
hold every interval of its communication, once the calls are linked (`traceview.collectives.kernels`).

`comm_events(events, kernels)` returns the events with

- each copy-engine transfer of a collective (a memory copy `comm_kernels` linked to a collective call, by the
  call around its launch or by the stream of a communication kernel) classed `comm`, `comm_kind` copy engine;
- each host collective op that moves the data on the host (`gloo:*`, `mpi:*` on a rank with device events)
  appended as a row of kind `host`, class `comm`, `comm_kind` host, "launched" at its own start on its
  thread (a launch row with a fresh correlation id, returned beside the events, so an idle gap before it has
  a cause);
- every host op that moves nothing (a group of one rank) left out: on a host timeline it is no compute either;
  a copy that moves nothing stays a memory op.

Device work and host ops of one call may overlap: every analysis reads unions, so each moment counts once.
"""

from __future__ import annotations

import polars as pl

from traceview.events.classify import HOST_KIND
from traceview.events.host_timeline import CORRELATION_BASE

LAUNCH_SCHEMA = {
    "rank": pl.Int64,
    "correlation": pl.Int64,
    "pid": pl.Utf8,
    "tid": pl.Utf8,
    "launch_us": pl.Float64,
}


def _host_rows(kernels: pl.DataFrame) -> pl.LazyFrame:
    """The host collective ops of ranks with device events, as event rows with correlation ids from
    `CORRELATION_BASE` (a host timeline's own rows are events already: `event_row` set)."""
    host = (
        kernels.lazy()
        .filter((pl.col("comm_kind") == "host") & pl.col("moves_data") & pl.col("event_row").is_null())
        .sort("rank", "start_us")
    )
    return host.select(
        "rank",
        pl.lit(HOST_KIND).alias("kind"),
        "name",
        "start_us",
        "end_us",
        (pl.int_range(pl.len(), dtype=pl.Int64) + CORRELATION_BASE).alias("correlation"),
        pl.lit("comm").alias("event_class"),
        pl.lit("host").alias("comm_kind"),
        pl.col("collective").alias("kernel_collective"),
        pl.col("pg_name"),
        pl.col("pg_desc"),
        pl.col("host_tid").alias("tid"),
    )


def _kept(events: pl.DataFrame, kernels: pl.DataFrame) -> pl.LazyFrame:
    """The events with the copy-engine transfers classed `comm` and the host ops that move nothing left
    out (module docstring)."""
    marks = (
        kernels.lazy()
        .filter(pl.col("event_row").is_not_null())
        .select("event_row", "moves_data", (pl.col("comm_kind") == "copy engine").alias("_copy"))
    )
    indexed = events.lazy().with_row_index("event_row").with_columns(pl.col("event_row").cast(pl.Int64))
    marked = indexed.join(marks, on="event_row", how="left", maintain_order="left")
    moving = pl.col("moves_data").fill_null(True)
    copy = pl.col("_copy").fill_null(False) & moving
    silent = (pl.col("event_class") == "comm") & ~moving  # a host timeline's op that moves nothing
    return (
        marked.filter(~silent)
        .with_columns(
            pl.when(copy).then(pl.lit("comm")).otherwise(pl.col("event_class")).alias("event_class"),
            pl.when(copy).then(pl.lit("copy engine")).otherwise(pl.col("comm_kind")).alias("comm_kind"),
        )
        .drop("event_row", "moves_data", "_copy")
    )


def comm_events(events: pl.DataFrame, kernels: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the events with every communication interval, module docstring; the launch rows of the host rows
    added: `rank`, `correlation`, `pid`, `tid`, `launch_us`). `kernels` is `comm_kernels(run, events)` of the
    same `events` (its `event_row` are their positions). One query, a second when host rows are added."""
    if events.height == 0 or kernels.height == 0:
        return events, pl.DataFrame(schema=LAUNCH_SCHEMA)
    kept, host = pl.collect_all([_kept(events, kernels), _host_rows(kernels)])
    if host.height == 0:
        return kept, pl.DataFrame(schema=LAUNCH_SCHEMA)
    launches = (
        host.lazy()
        .select(
            "rank",
            "correlation",
            pl.lit(None, pl.Utf8).alias("pid"),
            "tid",
            pl.col("start_us").alias("launch_us"),
        )
        .cast(LAUNCH_SCHEMA)  # type: ignore[arg-type]
    )
    rows = host.lazy().drop("tid")
    merged = pl.concat([kept.lazy(), rows], how="diagonal_relaxed").sort("rank", "start_us")
    merged_events, launched = pl.collect_all([merged, launches])
    return merged_events, launched
