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
stream).
"""

from __future__ import annotations

import bisect
import gzip
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from traceview.core.errors import UsageError
from traceview.core.sanitize import printable
from traceview.core.vocab import CPU_ONLY_CALL
from traceview.parsers import kineto
from traceview.reduce.results import RunAnalysis

DEFAULT_MAX_EVENTS = 5_000_000
"""Events written at most (about 1 GB of JSON): Perfetto's UI loads traces up to about 2 GB."""
MARK_TID = "traceview"
FLOW_CATEGORY = "collective"
FLOW_ANCHOR_CATEGORIES = ("kernel", "memcpy")
"""Device events a flow may bind to: communication kernels and copy-engine transfers."""
HOST_COLLECTIVE = re.compile(CPU_ONLY_CALL)
"""Host events a flow may bind to: the host collective ops (gloo, MPI) that are a call's communication."""


@dataclass(frozen=True)
class ExportBounds:
    """What to export: ranks and steps (None: all), a window in ms on the aligned clock since the run's first
    step, and the most events to write."""

    ranks: frozenset[int] | None = None
    steps: frozenset[int] | None = None
    window_ms: tuple[float, float] | None = None
    max_events: int = DEFAULT_MAX_EVENTS


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


MAX_LISTED = 2**20
"""Ranks or steps a `--ranks` / `--steps` list may name at most (a million: more than any job has)."""
RANGE_PART = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?")


def parse_ranges(text: str, what: str) -> frozenset[int]:
    """ "0-7,12" -> {0, ..., 7, 12}; a malformed list, a range that ends before it starts or one naming more
     than
    `MAX_LISTED` values is a `UsageError` naming the option."""
    found: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        matched = RANGE_PART.fullmatch(part)
        low, high = (int(matched[1]), int(matched[2] or matched[1])) if matched else (1, 0)
        if high < low or len(found) + high - low >= MAX_LISTED:
            raise UsageError(
                f"{what} {printable(text)!r}: expected numbers and ranges LOW-HIGH (LOW <= HIGH), "
                f"at most {MAX_LISTED} values, e.g. 0-7,12"
            )
        found.update(range(low, high + 1))
    if not found:
        raise UsageError(f"{what} {printable(text)!r}: names nothing; expected e.g. 0-7,12")
    return frozenset(found)


def parse_window(text: str) -> tuple[float, float]:
    """ "START:END" in ms -> (start, end), both finite; a malformed window is a `UsageError`."""
    start, sep, end = text.partition(":")
    try:
        window = (float(start), float(end))
    except ValueError:
        window = (1.0, 0.0)
    if not sep or not all(map(math.isfinite, window)) or window[1] <= window[0]:
        raise UsageError(
            f"--window {printable(text)!r}: expected START:END in ms, finite, with END > START, e.g. 0:250"
        )
    return window


@dataclass(frozen=True)
class RankClock:
    """How one rank's times reach the aligned clock: `base_us` moves its own clock onto the run's time base,
    `offset_us` (its host's alignment offset) is then subtracted."""

    base_us: float
    offset_us: float

    @property
    def shift_us(self) -> float:
        """From the rank's own clock to the aligned clock."""
        return self.base_us - self.offset_us


def rank_clocks(analysis: RunAnalysis) -> dict[int, RankClock]:
    """Per rank, its `RankClock` (module docstring)."""
    header = analysis.header
    shifts = dict(zip(header.ranks, header.base_shifts_us or [0.0] * len(header.ranks), strict=True))
    offsets: dict[int, float] = {}
    if analysis.crossrank is not None:
        from traceview.across_ranks.clocks import rank_offsets

        table = rank_offsets(analysis.crossrank.hosts, analysis.crossrank.clocks)
        offsets = dict(zip(table["rank"].to_list(), table["offset_us"].to_list(), strict=True))
    return {rank: RankClock(shifts[rank], offsets.get(rank, 0.0)) for rank in header.ranks}


@dataclass
class RankThreads:
    """One rank's threads in the export: thread label -> integer `tid` (Chrome trace format), and per tid the
    sorted start times of the kernels written (flows bind only to those; filled as they are written)."""

    tids: dict[str, int]
    kernel_starts: dict[int, list[float]] = field(default_factory=dict)

    def kernel_at(self, label: str, ts: float, tolerance_us: float = 1e-3) -> tuple[int, float] | None:
        """(tid, exact start) of the kernel written on thread `label` that starts at `ts`, if any."""
        tid = self.tids.get(label)
        starts = self.kernel_starts.get(tid, []) if tid is not None else []
        index = bisect.bisect_left(starts, ts - tolerance_us)
        if tid is None or index == len(starts) or starts[index] > ts + tolerance_us:
            return None
        return tid, starts[index]


def _window_us(
    analysis: RunAnalysis, clocks: dict[int, RankClock], bounds: ExportBounds
) -> tuple[float, float]:
    """The `--window` on the aligned clock (us), from the run's first step window there."""
    assert bounds.window_ms is not None
    windows = analysis.budget.per_step.select("rank", "window_start_us")
    aligned = [start - clocks[rank].offset_us for rank, start in windows.iter_rows() if rank in clocks]
    origin = min(aligned) if aligned else 0.0
    return origin + bounds.window_ms[0] * 1000, origin + bounds.window_ms[1] * 1000


def _kept(
    frame: pl.DataFrame, rank: int, analysis: RunAnalysis, clocks: dict[int, RankClock], bounds: ExportBounds
) -> pl.DataFrame:
    """Rows of `frame` (own clock) moved onto the aligned clock, those inside the chosen steps and window."""
    clock = clocks[rank]
    moved = frame.drop_nulls(["start_us", "end_us"]).with_columns(
        pl.col("start_us") + clock.shift_us, pl.col("end_us") + clock.shift_us
    )
    keep = pl.lit(value=True)
    if bounds.steps is not None:
        steps = analysis.budget.per_step.filter(
            (pl.col("rank") == rank) & pl.col("step").is_in(list(bounds.steps))
        )
        inside = [
            (pl.col("end_us") > start - clock.offset_us) & (pl.col("start_us") < end - clock.offset_us)
            for start, end in steps.select("window_start_us", "window_end_us").iter_rows()  # the chosen steps
        ]
        keep = keep & (pl.any_horizontal(inside) if inside else pl.lit(value=False))
    if bounds.window_ms is not None:
        low, high = _window_us(analysis, clocks, bounds)
        keep = keep & (pl.col("end_us") > low) & (pl.col("start_us") < high)
    return moved.filter(keep)


def _slices(frame: pl.DataFrame, pid: int, category: pl.Expr) -> list[dict[str, Any]]:
    """Complete events ("X") of `frame` (its `tid` already an integer); `args` carry the correlation id and,
    for communication, where it ran (`comm_kind`: device, copy engine, host)."""
    rows = frame.select(
        pl.col("name").fill_null(""),
        category.alias("cat"),
        pl.col("start_us").alias("ts"),
        (pl.col("end_us") - pl.col("start_us")).alias("dur"),
        pl.col("tid"),
        pl.col("correlation"),
        pl.col("comm_kind") if "comm_kind" in frame.columns else pl.lit(None, pl.Utf8).alias("comm_kind"),
    )
    return [
        {"ph": "X", "pid": pid, **row, "args": _args(row.pop("correlation"), row.pop("comm_kind"))}
        for row in rows.to_dicts()
    ]


def _args(correlation: object, comm_kind: object) -> dict[str, Any]:
    return {"correlation": correlation, **({"comm_kind": comm_kind} if comm_kind else {})}


COMM_MATCH_US = 1e-3
"""How far apart (us) an exported event and its communication row may start: float rounding of the moves."""


def _with_comm_kind(frame: pl.DataFrame, rank: int, analysis: RunAnalysis, clock: RankClock) -> pl.DataFrame:
    """`frame` (moved onto the aligned clock) with `comm_kind` on its communication rows (docs/metrics.md
    section 2), found by name and start among the run's collectives rows of the rank."""
    if analysis.collectives is None or frame.height == 0:
        return frame
    kernels = analysis.collectives.kernels
    kinds = (
        kernels.filter((pl.col("rank") == rank) & pl.col("moves_data").fill_null(True))
        .select("name", (pl.col("start_us") - clock.offset_us).alias("start_us"), "comm_kind")
        .sort("start_us")
    )
    return frame.sort("start_us").join_asof(
        kinds, on="start_us", by="name", tolerance=COMM_MATCH_US, strategy="nearest", check_sortedness=False
    )


DEVICE_LABEL = pl.format("stream {}", pl.col("stream").cast(pl.Utf8).fill_null("?"))
HOST_LABEL = pl.format("host thread {}", pl.col("tid").fill_null("?"))


def _threads(gpu: pl.DataFrame, cpu: pl.DataFrame) -> RankThreads:
    """Integer tids: the device streams by number, then the host threads, then traceview's own marks."""
    streams = gpu.select(pl.col("stream").unique().sort(nulls_last=True)).select(DEVICE_LABEL).to_series()
    hosts = cpu.select(HOST_LABEL.alias("label")).get_column("label").unique().sort()
    labels = [*streams.to_list(), *hosts.to_list(), MARK_TID]
    return RankThreads({label: index for index, label in enumerate(labels, start=1)})


def _with_tid(frame: pl.DataFrame, label: pl.Expr, threads: RankThreads) -> pl.DataFrame:
    table = pl.DataFrame({"label": list(threads.tids), "thread": list(threads.tids.values())})
    joined = frame.with_columns(label.alias("label")).join(table, on="label", how="left")
    return joined.drop("tid", strict=False).rename({"thread": "tid"})


def _thread_names(rank: int, threads: RankThreads) -> list[dict[str, Any]]:
    return [
        event
        for label, tid in threads.tids.items()  # one pair of metadata events per thread
        for event in (
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": label}},
            {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}},
        )
    ]


def rank_events(
    path: str, rank: int, analysis: RunAnalysis, clocks: dict[int, RankClock], bounds: ExportBounds
) -> tuple[list[dict[str, Any]], RankThreads]:
    """One rank's kernels, memory operations, operators and annotations on the aligned clock, its threads
    named; and its `RankThreads`."""
    trace = kineto.parse(path)
    gpu = _with_comm_kind(_kept(trace.gpu, rank, analysis, clocks, bounds), rank, analysis, clocks[rank])
    cpu = _kept(trace.cpu.filter(pl.col("kind") != "runtime"), rank, analysis, clocks, bounds)
    cpu = _with_comm_kind(cpu, rank, analysis, clocks[rank])
    threads = _threads(gpu, cpu)
    gpu, cpu = _with_tid(gpu, DEVICE_LABEL, threads), _with_tid(cpu, HOST_LABEL, threads)
    events = [*_slices(gpu, rank, pl.col("kind")), *_slices(cpu, rank, pl.col("kind"))]
    return [*_thread_names(rank, threads), *events], threads


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
        low, high = _window_us(analysis, clocks, bounds)
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
    low, high = _window_us(analysis, clocks, bounds)
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
    stats.window_us = _window_us(analysis, clocks, bounds) if bounds.window_ms is not None else None
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


def _listed(values: Sequence[int]) -> str:
    return ", ".join(map(str, values[:16])) + (f" ... ({len(values)} in all)" if len(values) > 16 else "")


def check_selection(analysis: RunAnalysis, bounds: ExportBounds) -> None:
    """Refuse (`UsageError`) `--ranks` or `--steps` that name none of the run's ranks or steps: an export of
    nothing is a usage error, said before anything is written."""
    ranks = list(analysis.header.ranks)
    if bounds.ranks is not None and not bounds.ranks & set(ranks):
        raise UsageError(
            f"--ranks {_listed(sorted(bounds.ranks))}: the run has none of them (ranks {_listed(ranks)})"
        )
    steps = sorted(set(analysis.budget.per_step.get_column("step").to_list()))
    if bounds.steps is not None and not bounds.steps & set(steps):
        raise UsageError(
            f"--steps {_listed(sorted(bounds.steps))}: the run has none of them (steps {_listed(steps)})"
        )


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
