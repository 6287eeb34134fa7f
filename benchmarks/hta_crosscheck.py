"""Cross-check of traceview's time budget against HolisticTraceAnalysis (HTA), GitHub issue 2.

Run with an environment that has both packages (HTA is not a dependency of traceview):

    python benchmarks/hta_crosscheck.py [TRACE_DIR ...]

For each rank it prints the comm/compute overlap ratio and the idle share three ways: traceview on its own
step windows, traceview on HTA's window, and HTA. HTA's definitions (hta 0.5, read from its source):

- Trace loading (`Trace.load_traces`, `_filter_irrelevant_gpu_kernels`): when the trace names two or more
  `ProfilerStep` symbols, HTA keeps only the CPU events that start before the LAST `ProfilerStep` starts, and
  only the device events (stream >= 0, correlation >= 0) whose correlation id matches a kept CPU event (the
  runtime launch). The last step is dropped; anything launched before the first step is kept. With one step or
  none, nothing is filtered.
- Iterations (`add_iteration`): a device event's iteration is the `ProfilerStep#N` whose CPU interval
  `[ts, ts + dur)` holds its launching runtime call.
- `get_comm_comp_overlap`: per rank, over the whole filtered trace: |C ∩ M| / |M|, C = union of kernels not
  matching `^nccl.*Kernel`, `Memcpy`/`Memset` or `Sync`, M = union of kernels matching `^nccl.*Kernel`;
  memcpy/memset count in neither. Reported as a percentage rounded to 2 decimals.
- `get_temporal_breakdown`: idle = span - |union of every device event|, span = last end - first start of
  the filtered device events; idle percentage = idle / span.
- Rounding (`round_down_time_stamps`): when the file's `ts` column is float (ns-precision traces), HTA rounds
  every start UP and every end DOWN to a whole microsecond (end = floor(ts + dur), dur = end - ts): each event
  shrinks by up to 2 us, and an event shorter than that inside one microsecond gets a NEGATIVE duration, which
  HTA's interval merge then subtracts. The "ours on HTA window" columns apply the same rounding to our events
  when the trace has fractional timestamps (our union counts a negative interval as 0, HTA as negative: that
  residue is what remains).
- `end` column: computed before `_align_all_ranks` shifts `ts`, never recomputed: stale on every row (the
  analyses above recompute `ts + dur`, so they are not affected; `include_last_profiler_step=True` is, since
  it compares shifted `ts` with the stale `end`).

traceview's own windows (`traceview.steps.windows`) differ: step N runs from its first device activity to the
first device activity of step N+1, so the gap before the next step is charged to step N, and the last step is
kept. The "ours on HTA window" columns recompute our figures with `traceview.core.intervals.union_length` over
exactly HTA's event set and span, so they must agree with HTA to rounding; the "ours" columns are what
traceview reports.
"""

from __future__ import annotations

import copy
import logging
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from hta.analyzers.breakdown_analysis import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
    BreakdownAnalysis,
)
from hta.analyzers.communication_analysis import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
    CommunicationAnalysis,
)
from hta.trace_analysis import TraceAnalysis  # type: ignore[import-not-found,import-untyped,unused-ignore]

from traceview.budget.time_budget import all_step_windows, classified_events, time_budget
from traceview.core.intervals import union_length
from traceview.events.classify import classify_gpu
from traceview.load.inputs import load_run, resolve_trace_files
from traceview.model.trace import RankTrace, Run

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"
DEFAULT_DIRS = tuple(
    REAL / name
    for name in (
        "hta_sampled_2rank",  # the two folders issue 2 names
        "hta_df_index_resolver",
        "hta_nccl_data",  # fractional timestamps: HTA's rounding
        "hta_16rank_job_rank0",  # pipelined steps: device work of consecutive steps interleaves
        "hta_trace_diff_control",  # real overlap (40-54 %)
    )
)
WHOLE = "whole (HTA)"
KEYS = ["rank", "window"]
STEP_PATTERN = r"^ProfilerStep\s*#\s*(\d+)$"


@dataclass(frozen=True)
class Figures:
    """Overlap ratio and idle share of one window, both in percent (None where undefined)."""

    overlap_pct: float | None
    idle_pct: float | None


@dataclass(frozen=True)
class Row:
    """One line of the table: a rank and a window (HTA's whole window or one step)."""

    trace: str
    rank: int
    window: str
    ours: Figures
    ours_on_hta_window: Figures
    hta: Figures


# ---------------------------------------------------------------- HTA side


def _quiet_hta() -> None:
    for name in ("hta", ""):
        logging.getLogger(name).setLevel(logging.ERROR)


def hta_load(trace_dir: Path) -> Any:
    """HTA's `TraceAnalysis` of a copy of the folder's traces (HTA never sees the read-only originals)."""
    _quiet_hta()
    with tempfile.TemporaryDirectory(prefix="hta_crosscheck_") as tmp:
        for path in resolve_trace_files(trace_dir):
            shutil.copy(path, Path(tmp) / path.name)
        analysis = TraceAnalysis(trace_dir=tmp)
    _quiet_hta()
    return analysis


def _hta_figures(trace: Any) -> dict[int, Figures]:
    overlap = CommunicationAnalysis.get_comm_comp_overlap(trace, visualize=False)
    breakdown = BreakdownAnalysis.get_temporal_breakdown(trace, visualize=False)
    idle = breakdown.set_index("rank")
    return {
        int(rank): Figures(
            _finite(pct),
            100.0 * float(idle.loc[rank, "idle_time(us)"]) / float(idle.loc[rank, "kernel_time(us)"]),
        )
        for rank, pct in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"], strict=True)
    }


def _finite(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def hta_whole(analysis: Any) -> dict[int, Figures]:
    """HTA's own per-rank figures, as `get_comm_comp_overlap` and `get_temporal_breakdown` return them."""
    return _hta_figures(analysis.t)


def hta_per_iteration(analysis: Any) -> dict[tuple[int, int], Figures]:
    """HTA's figures per iteration: its own functions run on its frame cut to `iteration == N`."""
    out: dict[tuple[int, int], Figures] = {}
    for rank in analysis.t.get_ranks():
        frame = analysis.t.get_trace(rank)
        for iteration in analysis.t.get_iterations(rank):
            single = copy.copy(analysis.t)
            single.traces = {rank: frame[frame["iteration"] == iteration]}
            out[(int(rank), int(iteration))] = _hta_figures(single)[int(rank)]
    return out


def hta_quirks(analysis: Any) -> dict[str, float]:
    """Counts of HTA's known defects on this load (see the module docstring of the report)."""
    frames = list(analysis.t.get_all_traces().values())
    return {
        "rows_with_negative_dur": int(sum((f["dur"] < 0).sum() for f in frames)),
        "rows_with_stale_end": int(sum((f["end"] != f["ts"] + f["dur"]).sum() for f in frames)),
        "device_rows_on_stream_0": int(sum((f["stream"] == 0).sum() for f in frames)),
    }


# ---------------------------------------------------------------- our side


def ours_native(run: Run) -> tuple[dict[tuple[int, int], Figures], dict[int, Figures]]:
    """traceview's per-step figures and per-rank medians, exactly as `traceview summary` computes them."""
    budget = time_budget(classified_events(run), all_step_windows(run))
    steps = {
        (row["rank"], row["step"]): Figures(_pct(row["overlap_ratio"]), _pct(row["idle_us"] / row["step_us"]))
        for row in budget.per_step.iter_rows(named=True)
    }
    idle_share = budget.per_step.group_by("rank").agg((pl.col("idle_us") / pl.col("step_us")).median())
    shares = dict(idle_share.iter_rows())
    ranks = {
        row["rank"]: Figures(_pct(row["overlap_ratio"]), _pct(shares[row["rank"]]))
        for row in budget.per_rank.iter_rows(named=True)
    }
    return steps, ranks


def _pct(ratio: float | None) -> float | None:
    return None if ratio is None else 100.0 * ratio


def _cpu_steps(trace: RankTrace) -> pl.DataFrame:
    return (
        trace.cpu.with_columns(pl.col("name").str.extract(STEP_PATTERN, 1).cast(pl.Int64).alias("step"))
        .drop_nulls("step")
        .select("step", "start_us", "end_us")
        .sort("start_us")
    )


def _hta_rounding(trace: RankTrace, events: pl.DataFrame) -> pl.DataFrame:
    """HTA's rounding (start up, end down to whole us) where the trace's timestamps are fractional."""
    starts = pl.concat([trace.gpu.get_column("start_us"), trace.cpu.get_column("start_us")])
    if starts.is_empty() or (starts == starts.floor()).all():
        return events
    return events.with_columns(pl.col("start_us").ceil(), pl.col("end_us").floor())


def hta_event_set(trace: RankTrace, rounding: bool = True) -> pl.DataFrame:
    """The rank's classified device events as HTA keeps them (HTA's rounding included), with the HTA
    iteration of each (-1: none). Times are the trace's own (HTA rounds them before any shift).

    Columns `rank`, `name`, `kind`, `start_us`, `end_us`, `event_class`, `launch_us`, `iteration`, `in_whole`.
    """
    steps = _cpu_steps(trace)
    launches = (
        trace.cpu.filter(pl.col("correlation").is_not_null())
        .group_by("correlation")
        .agg(pl.col("start_us").min().alias("launch_us"))
    )
    events = classify_gpu(trace).join(launches, on="correlation", how="left")
    events = _hta_rounding(trace, events) if rounding else events
    events = events.sort("launch_us", nulls_last=True)
    in_step = events.join_asof(steps, left_on="launch_us", right_on="start_us", suffix="_step")
    iteration = pl.when(pl.col("launch_us") < pl.col("end_us_step")).then(pl.col("step")).otherwise(-1)
    filtered = steps.height >= 2
    last_start = steps.get_column("start_us").max() if filtered else None
    in_whole = (pl.col("launch_us") < last_start) if filtered else pl.lit(True)
    return in_step.with_columns(
        iteration.fill_null(-1).alias("iteration"), in_whole.fill_null(False).alias("in_whole")
    ).select(
        "rank", "name", "kind", "start_us", "end_us", "event_class", "launch_us", "iteration", "in_whole"
    )


def figures_on_windows(events: pl.DataFrame) -> dict[tuple[int, Any], Figures]:
    """Overlap ratio and idle share per (`rank`, `window`) group of events, the span being first start to
    last end of the group's events: four unions by `traceview.core.intervals.union_length`."""
    parts = [
        union_length(events.filter(pl.col("event_class") == "compute"), KEYS, "comp_us"),
        union_length(events.filter(pl.col("event_class") == "comm"), KEYS, "comm_us"),
        union_length(events.filter(pl.col("event_class") != "memory"), KEYS, "kernels_us"),
        union_length(events, KEYS, "busy_us"),
    ]
    table = events.group_by(KEYS).agg((pl.col("end_us").max() - pl.col("start_us").min()).alias("span_us"))
    for part in parts:
        table = table.join(part, on=KEYS, how="left")
    table = table.fill_null(0.0)
    return {
        (row["rank"], row["window"]): Figures(
            100.0 * (row["comp_us"] + row["comm_us"] - row["kernels_us"]) / row["comm_us"]
            if row["comm_us"] > 0
            else None,
            100.0 * (row["span_us"] - row["busy_us"]) / row["span_us"],
        )
        for row in table.iter_rows(named=True)
    }


def ours_on_hta_windows(run: Run, rounding: bool = True) -> dict[tuple[int, Any], Figures]:
    """Our figures on HTA's whole window (key window `WHOLE`) and on each HTA iteration (key: the step),
    with HTA's timestamp rounding or (`rounding=False`) on the times as written."""
    events = pl.concat([hta_event_set(trace, rounding) for trace in run], how="vertical_relaxed")
    whole = events.filter(pl.col("in_whole")).with_columns(pl.lit(WHOLE).alias("window"))
    per_step = events.filter(pl.col("in_whole") & (pl.col("iteration") >= 0)).with_columns(
        pl.col("iteration").cast(pl.Utf8).alias("window")
    )
    return {**figures_on_windows(whole), **figures_on_windows(per_step)}


# ---------------------------------------------------------------- comparison


def compare(trace_dir: Path) -> tuple[list[Row], dict[str, float]]:
    """Every row of the table for one folder of traces, and HTA's quirk counts on it."""
    analysis = hta_load(trace_dir)
    run = load_run(trace_dir, workers=1)
    native_steps, native_ranks = ours_native(run)
    same = ours_on_hta_windows(run)
    name = trace_dir.name
    missing = Figures(None, None)
    rows = [
        Row(name, rank, WHOLE, native_ranks.get(rank, missing), same.get((rank, WHOLE), missing), figures)
        for rank, figures in hta_whole(analysis).items()
    ]
    for (rank, step), figures in hta_per_iteration(analysis).items():
        rows.append(
            Row(
                name,
                rank,
                f"step {step}",
                native_steps.get((rank, step), missing),
                same.get((rank, str(step)), missing),
                figures,
            )
        )
    rows += [
        Row(name, rank, f"step {step}", figures, missing, missing)
        for (rank, step), figures in native_steps.items()
        if not any(r.rank == rank and r.window == f"step {step}" for r in rows)
    ]
    return rows, {
        **hta_quirks(analysis),
        "rounding_effect_pp": _rounding_effect(same, ours_on_hta_windows(run, rounding=False)),
    }


def _rounding_effect(rounded: dict[tuple[int, Any], Figures], exact: dict[tuple[int, Any], Figures]) -> float:
    """The largest change HTA's rounding makes to a figure, in percentage points (round to 3 decimals)."""
    changes = [
        abs(delta(getattr(rounded[key], name), getattr(exact[key], name)) or 0.0)
        for key in rounded
        if key in exact
        for name in ("overlap_pct", "idle_pct")
    ]
    return round(max(changes, default=0.0), 3)


def delta(ours: float | None, hta: float | None) -> float | None:
    """Ours minus HTA in percentage points (None where either is undefined)."""
    return None if ours is None or hta is None else ours - hta


def _cell(value: float | None, width: int = 8) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.2f}"


HEADER = (
    f"{'trace':<22} {'rank':>4} {'window':<12} | {'overlap %: ours':>15} {'ours@HTA':>8} {'HTA':>8}"
    f" {'Δ pp':>8} | {'idle %: ours':>12} {'ours@HTA':>8} {'HTA':>8} {'Δ pp':>8}"
)


def format_row(row: Row) -> str:
    """One table line: ours (own windows), ours on HTA's window, HTA, and the difference of the last two."""
    overlap = [row.ours.overlap_pct, row.ours_on_hta_window.overlap_pct, row.hta.overlap_pct]
    idle = [row.ours.idle_pct, row.ours_on_hta_window.idle_pct, row.hta.idle_pct]
    return (
        f"{row.trace:<22} {row.rank:>4} {row.window:<12} | {_cell(overlap[0], 15)} {_cell(overlap[1])}"
        f" {_cell(overlap[2])} {_cell(delta(overlap[1], overlap[2]))} | {_cell(idle[0], 12)} {_cell(idle[1])}"
        f" {_cell(idle[2])} {_cell(delta(idle[1], idle[2]))}"
    )


def main(argv: list[str]) -> int:
    """Print the table for every folder named (default: the two HTA test traces); exit 1 past 0.5 pp."""
    dirs = [Path(a) for a in argv] or list(DEFAULT_DIRS)
    worst = 0.0
    print(HEADER)
    print("-" * len(HEADER))
    for trace_dir in dirs:
        rows, quirks = compare(trace_dir)
        for row in rows:
            print(format_row(row))
            for pair in (
                (row.ours_on_hta_window.overlap_pct, row.hta.overlap_pct),
                (row.ours_on_hta_window.idle_pct, row.hta.idle_pct),
            ):
                worst = max(worst, abs(delta(*pair) or 0.0))
        print(f"{'':<22} HTA quirks on this load: {quirks}")
    print(f"\nlargest |ours on HTA window - HTA|: {worst:.3f} percentage points (target <= 0.5)")
    return 0 if worst <= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
