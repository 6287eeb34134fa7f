"""The whole run as one Chrome/Perfetto trace on the aligned clock (`traceview export`; docs/metrics.md,
"Export").

Each rank becomes one process (`pid` = rank, named "rank R (host)"), its device streams and host threads its
threads, and its events are the original kernels, memory operations, operators and annotations, each moved by
`shift(rank) = (base(rank) - base(run)) / 1000 - offset(host of rank)`: onto the run's time base
(`baseTimeNanoseconds`), then onto the reference host's clock (the alignment's offset). Matched collective
instances are joined across ranks by flow events (from the first rank to arrive to each other member), the
straggler's process is named as such, and the largest idle gaps are drawn as slices on a "traceview" thread.

Events are bounded (ranks, steps, a time window, a maximum count) so the file stays loadable; what was left
out is stated in the file's `otherData`. Ranks are read one at a time and written as they are read (gzip
stream). The bounds and their parsing are in `traceview.export._bounds`, one rank's events in
`traceview.export._rank_events`; this module joins the ranks, draws the flows and the marks, and writes.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from traceview.core.vocab import CPU_ONLY_CALL
from traceview.export._bounds import (
    DEFAULT_MAX_EVENTS,
    ExportBounds,
    check_selection,
    parse_ranges,
    parse_window,
)
from traceview.export._rank_events import (
    DEVICE_LABEL,
    MARK_TID,
    RankClock,
    RankThreads,
    aligned_window_us,
    rank_clocks,
    rank_events,
)
from traceview.reduce.results import RunAnalysis

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "ExportBounds",
    "ExportStats",
    "check_selection",
    "export_run",
    "parse_ranges",
    "parse_window",
]

FLOW_CATEGORY = "collective"
FLOW_ANCHOR_CATEGORIES = ("kernel", "memcpy")
"""Device events a flow may bind to: communication kernels and copy-engine transfers."""
HOST_COLLECTIVE = re.compile(CPU_ONLY_CALL)
"""Host events a flow may bind to: the host collective ops (gloo, MPI) that are a call's communication."""


@dataclass
class ExportStats:
    """What the export wrote and what it left out."""

    ranks: list[int] = field(default_factory=list)
    events: int = 0
    flows: int = 0
    dropped_by_bound: int = 0
    truncated: bool = False
    window_us: tuple[float, float] | None = None
    """`--window` on the aligned clock (us), as applied."""


def _instance_pairs(
    analysis: RunAnalysis, clocks: dict[int, RankClock], bounds: ExportBounds
) -> pl.DataFrame:
    """Per matched instance within the bounds, one row per member after the first to arrive: `instance`,
    `collective`, the first arrival's (`from_rank`, `from_thread`, `from_start`) and the member's (`rank`,
    `thread`, `aligned_start_us`); a thread is a device stream (`stream N`) or, for a host op, its host
    thread."""
    assert analysis.crossrank is not None
    assert analysis.collectives is not None
    calls = analysis.crossrank.calls
    if bounds.ranks is not None:
        calls = calls.filter(pl.col("rank").is_in(list(bounds.ranks)))
    if bounds.steps is not None:
        calls = calls.filter(pl.col("step").is_in(list(bounds.steps)))
    if bounds.window_ms is not None:
        low, high = aligned_window_us(analysis, clocks, bounds)
        calls = calls.filter(pl.col("aligned_start_us").is_between(low, high))
    kernels = analysis.collectives.kernels
    on_host = (pl.col("comm_kind") == "host") | pl.col("stream").is_null()
    thread = (
        pl.when(on_host).then(pl.format("host thread {}", pl.col("host_tid"))).otherwise(DEVICE_LABEL)
    )  # a host op (gloo, MPI) is on its host thread
    streams = kernels.select("rank", "start_us", thread.alias("thread")).unique(["rank", "start_us"])
    located = calls.join(streams, on=["rank", "start_us"], how="left").sort(
        "instance", "aligned_start_us", "rank"
    )
    first = (
        located.group_by("instance", maintain_order=True)
        .first()
        .select(
            "instance",
            pl.col("rank").alias("from_rank"),
            pl.col("aligned_start_us").alias("from_start"),
            pl.col("thread").alias("from_thread"),
        )
    )
    return located.join(first, on="instance").filter(pl.col("rank") != pl.col("from_rank"))


def _flows(
    analysis: RunAnalysis, clocks: dict[int, RankClock], bounds: ExportBounds, threads: dict[int, RankThreads]
) -> list[dict[str, Any]]:
    """Per matched instance, a flow from the first rank to arrive to each other member, each end on the very
    kernel written for it (a member whose kernel was not written has no flow)."""
    if analysis.crossrank is None or analysis.collectives is None:
        return []
    events: list[dict[str, Any]] = []
    for row in _instance_pairs(analysis, clocks, bounds).iter_rows(named=True):  # one pair per member
        source, target = threads.get(row["from_rank"]), threads.get(row["rank"])
        begin = source.kernel_at(str(row["from_thread"]), row["from_start"]) if source else None
        end = target.kernel_at(str(row["thread"]), row["aligned_start_us"]) if target else None
        if begin is None or end is None:
            continue
        flow = {
            "id": len(events) // 2 + 1,
            "cat": FLOW_CATEGORY,
            "name": f"{row['collective'] or 'collective'} instance {row['instance']}",
        }
        events.append({"ph": "s", "pid": row["from_rank"], "tid": begin[0], "ts": begin[1], **flow})
        events.append({"ph": "f", "bp": "e", "pid": row["rank"], "tid": end[0], "ts": end[1], **flow})
    return events


def _marks(
    analysis: RunAnalysis, clocks: dict[int, RankClock], bounds: ExportBounds, threads: dict[int, RankThreads]
) -> list[dict[str, Any]]:
    """The largest idle gaps within the bounds as slices on each rank's "traceview" thread (gaps are on the
    run's time base)."""
    if analysis.bubbles is None:
        return []
    gaps = analysis.bubbles.largest_gaps().filter(pl.col("rank").is_in(list(threads)))
    if bounds.steps is not None:
        gaps = gaps.filter(pl.col("step").is_in(list(bounds.steps)))
    marks = [
        {
            "ph": "X",
            "pid": row["rank"],
            "tid": threads[row["rank"]].tids[MARK_TID],
            "cat": "bubble",
            "name": f"idle {row['dur_us'] / 1000:.3f} ms ({row['cause']})",
            "ts": row["start_us"] - clocks[row["rank"]].offset_us,
            "dur": row["dur_us"],
        }
        for row in gaps.iter_rows(named=True)  # at most LARGEST_GAPS rows
    ]
    if bounds.window_ms is None:
        return marks
    low, high = aligned_window_us(analysis, clocks, bounds)
    return [mark for mark in marks if mark["ts"] < high and mark["ts"] + mark["dur"] > low]


def _process_names(analysis: RunAnalysis, ranks: Sequence[int]) -> list[dict[str, Any]]:
    hosts: dict[int, str] = {}
    straggling: dict[int, str] = {}
    if analysis.crossrank is not None:
        hosts = dict(analysis.crossrank.hosts.select("rank", "host").iter_rows())
        flagged = analysis.crossrank.per_rank.filter(pl.col("straggler").fill_null(value=False))
        straggling = dict(flagged.select("rank", "cause").iter_rows())
    names = []
    for rank in ranks:  # one metadata event per rank
        label = f"rank {rank} ({hosts.get(rank, 'host unknown')})"
        if rank in straggling:
            label += f": straggler, {straggling[rank] or 'cause unknown'}"
        names.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": label}})
        names.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
    return names


def _events(analysis: RunAnalysis, bounds: ExportBounds, stats: ExportStats) -> Iterator[dict[str, Any]]:
    clocks = rank_clocks(analysis)
    chosen = [r for r in analysis.header.ranks if bounds.ranks is None or r in bounds.ranks]
    stats.ranks = chosen
    stats.window_us = aligned_window_us(analysis, clocks, bounds) if bounds.window_ms is not None else None
    yield from _process_names(analysis, chosen)
    paths = dict(zip(analysis.header.ranks, analysis.header.files, strict=True))
    threads: dict[int, RankThreads] = {}
    for rank in chosen:
        events, threads[rank] = rank_events(paths[rank], rank, analysis, clocks, bounds)
        for event in events:
            if event["ph"] == "M":  # thread names
                yield event
            elif stats.events >= bounds.max_events:
                stats.truncated = True
                stats.dropped_by_bound += 1
            else:
                stats.events += 1
                if event["cat"] in FLOW_ANCHOR_CATEGORIES or HOST_COLLECTIVE.match(event["name"]):
                    threads[rank].kernel_starts.setdefault(event["tid"], []).append(event["ts"])
                yield event
        for starts in threads[rank].kernel_starts.values():
            starts.sort()
    flows = _flows(analysis, clocks, bounds, threads)
    stats.flows = len(flows) // 2
    yield from flows
    yield from _marks(analysis, clocks, bounds, threads)


def export_run(analysis: RunAnalysis, out: str | Path, bounds: ExportBounds | None = None) -> ExportStats:
    """Write the aligned Chrome/Perfetto trace of `analysis`'s run to `out` (gzip when it ends `.gz`)."""
    bounds = bounds or ExportBounds()
    stats = ExportStats()
    target = Path(out)
    encode = msgspec.json.Encoder().encode
    opener = gzip.open if target.name.endswith(".gz") else open
    with opener(target, "wb") as handle:
        handle.write(b'{"displayTimeUnit":"ms","traceEvents":[\n')
        for index, event in enumerate(_events(analysis, bounds, stats)):
            handle.write((b",\n" if index else b"") + encode(event))
        other = {
            "generator": "traceview export",
            "clock": "aligned (reference host's clock)",
            **stats.__dict__,
            "bounds": {
                "ranks": sorted(bounds.ranks) if bounds.ranks else "all",
                "steps": sorted(bounds.steps) if bounds.steps else "all",
                "window_ms": bounds.window_ms,
                "max_events": bounds.max_events,
            },
        }
        handle.write(b'\n],"otherData":' + encode(other) + b"}\n")
    return stats
