"""The recorded sync edges of the critical path (docs/metrics.md, "Critical path"): the profiler's CUDA sync
events (`RankTrace.syncs`, written with `enable_cuda_sync_events`) as path intervals.

A host wait (`Stream Sync`, `Event Sync`, `Context Sync`) is an edge from the device work it waited for to
the host: while the device idles inside it, the path is on the wait, named by what it waited for (the last
device event on the stream it names, the event's recording stream for an event sync, any stream for a
context sync, that ended inside the wait). It replaces the runtime call it correlates with (the call's name
no longer stands in for the wait: the inferred edge). A cross-stream wait (`Stream Wait Event`) is the
device's, not the host's: the producer stream runs while the consumer waits, so it holds no time of its own;
it is counted.
"""

from __future__ import annotations

import polars as pl

from traceview.critical_path.categories import PRIORITY

STREAM_WAIT = "Stream Wait Event"
EVENT_SYNC = "Event Sync"
_WAITED = ["rank", "start_us", "end_us", "name", "correlation", "_stream"]


def host_waits(syncs: pl.LazyFrame) -> pl.LazyFrame:
    """The host's waits on the device, with the stream each waited on (`_stream`; null: any stream)."""
    stream = pl.when(pl.col("name") == EVENT_SYNC).then(pl.col("wait_on_stream")).otherwise(pl.col("stream"))
    stream = pl.when(stream >= 0).then(stream)
    return syncs.filter(pl.col("name") != STREAM_WAIT).with_columns(stream.alias("_stream"))


def _last_ended(waits: pl.LazyFrame, device: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """Per wait, the name of the last device event (on its stream when `by` has `_stream`) ended by the
    wait's end and after its start (null when none)."""
    ends = device.select(*by, pl.col("end_us").alias("_ended"), pl.col("name").alias("_waited"))
    found = waits.sort("end_us").join_asof(
        ends.drop_nulls(by).sort("_ended"),
        left_on="end_us",
        right_on="_ended",
        by=by,
        strategy="backward",
        check_sortedness=False,
    )
    inside = pl.col("_ended") > pl.col("start_us")
    return found.with_columns(pl.when(inside).then(pl.col("_waited")).alias("_waited")).select(
        *_WAITED, "_waited"
    )


def sync_intervals(syncs: pl.LazyFrame, device: pl.LazyFrame, unread: pl.LazyFrame) -> pl.LazyFrame:
    """The host waits of `syncs` (rank, name, start_us, end_us, stream, correlation, wait_on_stream) as
    `blocking_sync` intervals named by what they waited for; a wait correlated with a runtime call of
    `unread` (a thread the path does not read: it launches nothing) is left out."""
    waits = host_waits(syncs).join(
        unread.select("rank", "correlation"), on=["rank", "correlation"], how="anti"
    )
    on_stream = _last_ended(
        waits.filter(pl.col("_stream").is_not_null()),
        device.rename({"stream": "_stream"}),
        ["rank", "_stream"],
    )
    anywhere = _last_ended(waits.filter(pl.col("_stream").is_null()), device, ["rank"])
    waited = pl.col("_waited").fill_null("nothing still running")
    name = pl.format("{} (waits for {})", pl.col("name"), waited).alias("name")
    priority = pl.lit(PRIORITY["blocking_sync"], pl.Int32).alias("priority")
    return pl.concat([on_stream, anywhere]).select("rank", "start_us", "end_us", name, priority)


def replaced_calls(host: pl.LazyFrame, syncs: pl.LazyFrame) -> pl.LazyFrame:
    """`host` without the runtime calls a recorded host wait stands for (same rank and correlation)."""
    waits = host_waits(syncs).select("rank", "correlation").drop_nulls().unique()
    replaced = pl.col("kind") == "runtime"
    kept = host.join(
        waits.with_columns(pl.lit(True).alias("_replaced")), on=["rank", "correlation"], how="left"
    )
    return kept.filter(~(replaced & pl.col("_replaced").fill_null(False))).drop("_replaced")


def sync_counts(syncs: pl.LazyFrame) -> pl.LazyFrame:
    """Per rank, its recorded host waits and cross-stream waits (the run's notes say them)."""
    cross = pl.col("name") == STREAM_WAIT
    return syncs.group_by("rank").agg(
        (~cross).sum().cast(pl.Int64).alias("host_waits"), cross.sum().cast(pl.Int64).alias("stream_waits")
    )
