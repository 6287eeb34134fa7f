"""One rank's events for `traceview export` (`traceview.export.perfetto`): its clock onto the aligned clock
(`RankClock`), its threads as integer tids (`RankThreads`), and its kernels, memory operations, operators and
annotations within the bounds, as Chrome trace events."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceview.core.records import record
from traceview.export._bounds import ExportBounds
from traceview.parsers import kineto
from traceview.reduce.results import RunAnalysis

MARK_TID = "traceview"


@record
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


def aligned_window_us(
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
        low, high = aligned_window_us(analysis, clocks, bounds)
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
