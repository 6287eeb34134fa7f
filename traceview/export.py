"""The whole run as one Chrome/Perfetto trace on the aligned clock (`traceview export`; docs/metrics.md, "Export").

Each rank becomes one process (`pid` = rank, named "rank R (host)"), its device streams and host threads its
threads, and its events are the original kernels, memory operations, operators and annotations, each moved by
`shift(rank) = (base(rank) - base(run)) / 1000 - offset(host of rank)`: onto the run's time base
(`baseTimeNanoseconds`), then onto the reference host's clock (the alignment's offset). Matched collective
instances are joined across ranks by flow events (from the first rank to arrive to each other member), the
straggler's process is named as such, and the largest idle gaps are drawn as slices on a "traceview" thread.

Events are bounded (ranks, steps, a time window, a maximum count) so the file stays loadable; what was left out
is stated in the file's `otherData`. Ranks are read one at a time and written as they are read (gzip stream).
"""

from __future__ import annotations

import gzip
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from traceview.errors import UsageError
from traceview.parsers import kineto
from traceview.results import RunAnalysis
from traceview.sanitize import printable

DEFAULT_MAX_EVENTS = 5_000_000
"""Events written at most (about 1 GB of JSON): Perfetto's UI loads traces up to about 2 GB."""
MARK_TID = "traceview"
FLOW_CATEGORY = "collective"


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


MAX_LISTED = 2**20
"""Ranks or steps a `--ranks` / `--steps` list may name at most (a million: more than any job has)."""
RANGE_PART = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?")


def parse_ranges(text: str, what: str) -> frozenset[int]:
    """ "0-7,12" -> {0, ..., 7, 12}; a malformed list, a range that ends before it starts or one naming more than
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
        from traceview.clocks import rank_offsets

        table = rank_offsets(analysis.crossrank.hosts, analysis.crossrank.clocks)
        offsets = dict(zip(table["rank"].to_list(), table["offset_us"].to_list(), strict=True))
    return {rank: RankClock(shifts[rank], offsets.get(rank, 0.0)) for rank in header.ranks}


def _kept(
    frame: pl.DataFrame, rank: int, analysis: RunAnalysis, clock: RankClock, bounds: ExportBounds
) -> pl.DataFrame:
    """Rows of `frame` (own clock) moved onto the aligned clock, those inside the chosen steps and window."""
    moved = frame.with_columns(pl.col("start_us") + clock.shift_us, pl.col("end_us") + clock.shift_us)
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
        origin = _origin(analysis)
        low, high = (origin + bounds.window_ms[0] * 1000, origin + bounds.window_ms[1] * 1000)
        keep = keep & (pl.col("end_us") > low) & (pl.col("start_us") < high)
    return moved.filter(keep)


def _origin(analysis: RunAnalysis) -> float:
    windows = analysis.budget.per_step.get_column("window_start_us")
    return float(windows.min()) if windows.len() else 0.0  # type: ignore[arg-type]


def _slices(frame: pl.DataFrame, pid: int, tid: pl.Expr, category: pl.Expr) -> list[dict[str, Any]]:
    """Complete events ("X") of `frame`; `args` carry the fields a reader wants (correlation, collective)."""
    rows = frame.select(
        pl.col("name").fill_null(""),
        category.alias("cat"),
        pl.col("start_us").alias("ts"),
        (pl.col("end_us") - pl.col("start_us")).alias("dur"),
        tid.alias("tid"),
        pl.col("correlation"),
    )
    return [
        {"ph": "X", "pid": pid, **row, "args": {"correlation": row.pop("correlation")}}
        for row in rows.to_dicts()
    ]


def rank_events(
    path: str, rank: int, analysis: RunAnalysis, clock: RankClock, bounds: ExportBounds
) -> list[dict[str, Any]]:
    """One rank's kernels, memory operations, operators and annotations on the aligned clock."""
    trace = kineto.parse(path)
    gpu = _kept(trace.gpu, rank, analysis, clock, bounds)
    cpu = _kept(trace.cpu.filter(pl.col("kind") != "runtime"), rank, analysis, clock, bounds)
    device_tid = pl.format("stream {}", pl.col("stream").cast(pl.Utf8).fill_null("?"))
    host_tid = pl.format("host thread {}", pl.col("tid").fill_null("?"))
    return [
        *_slices(gpu, rank, device_tid, pl.col("kind")),
        *_slices(cpu, rank, host_tid, pl.col("kind")),
    ]


def _flows(analysis: RunAnalysis, bounds: ExportBounds) -> list[dict[str, Any]]:
    """Per matched instance, a flow from the first rank to arrive to each other member, bound to their kernels
    (aligned times of the cross-rank analysis), within the bounds."""
    if analysis.crossrank is None or analysis.collectives is None:
        return []
    calls = analysis.crossrank.calls
    if bounds.ranks is not None:
        calls = calls.filter(pl.col("rank").is_in(list(bounds.ranks)))
    if bounds.steps is not None:
        calls = calls.filter(pl.col("step").is_in(list(bounds.steps)))
    if bounds.window_ms is not None:
        origin = _origin(analysis)
        low, high = (origin + bounds.window_ms[0] * 1000, origin + bounds.window_ms[1] * 1000)
        calls = calls.filter(pl.col("aligned_start_us").is_between(low, high))
    streams = analysis.collectives.kernels.select("rank", "start_us", "stream").unique(["rank", "start_us"])
    located = calls.join(streams, on=["rank", "start_us"], how="left").sort(
        "instance", "aligned_start_us", "rank"
    )
    first = located.group_by("instance", maintain_order=True).first().select(
        "instance", pl.col("rank").alias("from_rank"), pl.col("aligned_start_us").alias("from_start"),
        pl.col("stream").alias("from_stream"),
    )  # fmt: skip
    pairs = located.join(first, on="instance").filter(pl.col("rank") != pl.col("from_rank"))
    events: list[dict[str, Any]] = []
    for index, row in enumerate(pairs.iter_rows(named=True)):  # one pair per member of a matched collective
        common = {
            "name": f"{row['collective'] or 'collective'} instance {row['instance']}",
            "cat": FLOW_CATEGORY,
        }
        events.append({"ph": "s", "id": index + 1, "pid": row["from_rank"], "tid": f"stream {row['from_stream']}",
                       "ts": row["from_start"], **common})  # fmt: skip
        events.append({"ph": "f", "bp": "e", "id": index + 1, "pid": row["rank"], "tid": f"stream {row['stream']}",
                       "ts": row["aligned_start_us"], **common})  # fmt: skip
    return events


def _marks(
    analysis: RunAnalysis, clocks: dict[int, RankClock], ranks: frozenset[int] | None
) -> list[dict[str, Any]]:
    """The largest idle gaps as slices on each rank's "traceview" thread (gaps are on the run's time base)."""
    if analysis.bubbles is None:
        return []
    gaps = analysis.bubbles.largest_gaps()
    if ranks is not None:
        gaps = gaps.filter(pl.col("rank").is_in(list(ranks)))
    return [
        {
            "ph": "X",
            "pid": row["rank"],
            "tid": MARK_TID,
            "cat": "bubble",
            "name": f"idle {row['dur_us'] / 1000:.3f} ms ({row['cause']})",
            "ts": row["start_us"] - clocks[row["rank"]].offset_us,
            "dur": row["dur_us"],
        }
        for row in gaps.iter_rows(named=True)  # at most LARGEST_GAPS rows
    ]


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
    yield from _process_names(analysis, chosen)
    paths = dict(zip(analysis.header.ranks, analysis.header.files, strict=True))
    for rank in chosen:
        for event in rank_events(paths[rank], rank, analysis, clocks[rank], bounds):
            if stats.events >= bounds.max_events:
                stats.truncated = True
                stats.dropped_by_bound += 1
                continue
            stats.events += 1
            yield event
    flows = _flows(analysis, bounds)
    stats.flows = len(flows) // 2
    yield from flows
    yield from _marks(analysis, clocks, bounds.ranks)


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
        other = {"generator": "traceview export", "clock": "aligned (reference host's clock)", **stats.__dict__,
                 "bounds": {"ranks": sorted(bounds.ranks) if bounds.ranks else "all",
                            "steps": sorted(bounds.steps) if bounds.steps else "all",
                            "window_ms": bounds.window_ms, "max_events": bounds.max_events}}  # fmt: skip
        handle.write(b'\n],"otherData":' + encode(other) + b"}\n")
    return stats
