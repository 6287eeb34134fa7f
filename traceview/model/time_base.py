"""The run's time base: how far each rank's clock is moved before any cross-rank figure (docs/metrics.md, 1.
Inputs, "Time base").

A rank whose trace states `baseTimeNanoseconds` (a date between 2000 and 2100, checked by the parser; 0 means
unknown) is moved by its base minus the smallest known base. A rank without a usable base keeps its own clock
when its first step lies within `MAX_BASE_GAP_US` of the others' (a truncated trace: its timestamps are still
relative to a base near theirs); farther away (timestamps of another epoch), it is placed so that its first
step meets the median first step of the ranks with a base, and a warning says so. Either way the collectives'
end times then align it exactly (`traceview.across_ranks.clocks`), so no offset of a base's size reaches a
figure.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Sequence

from traceview.core.errors import ParseWarning
from traceview.core.records import record
from traceview.model.trace import RankTrace, Run

MAX_BASE_GAP_US = 86_400e6
"""A day: ranks of one job start their steps within it (the same gap `traceview.load.one_job` allows between
bases)."""


@record
class RankClockBase:
    """What places one rank's clock: its stated base (0 unknown) and its first step's start on its own clock
    (None: no step)."""

    base_time_ns: int
    first_step_us: float | None


@record
class TimeBase:
    """Per rank (in the order given), the shift in microseconds onto the run's base, and a warning for each
    rank placed by its first step."""

    shifts_us: tuple[float, ...]
    placed: tuple[int, ...]  # indices of the ranks placed by their first step


def time_base(clocks: Sequence[RankClockBase]) -> TimeBase:
    """Each rank's shift onto the run's time base (module docstring)."""
    known = [c.base_time_ns for c in clocks if c.base_time_ns > 0]
    reference = min(known, default=0)
    shifts = [(c.base_time_ns - reference) / 1000.0 if c.base_time_ns > 0 else 0.0 for c in clocks]
    anchors = [
        c.first_step_us + shift
        for c, shift in zip(clocks, shifts, strict=True)
        if c.base_time_ns > 0 and c.first_step_us is not None
    ]
    if not anchors:
        return TimeBase(tuple(shifts), ())
    anchor = statistics.median(anchors)
    placed = tuple(
        index
        for index, clock in enumerate(clocks)
        if clock.base_time_ns <= 0
        and clock.first_step_us is not None
        and abs(clock.first_step_us - anchor) > MAX_BASE_GAP_US
    )
    for index in placed:
        shifts[index] = anchor - (clocks[index].first_step_us or 0.0)
    return TimeBase(tuple(shifts), placed)


def trace_time_base(traces: Sequence[RankTrace]) -> TimeBase:
    """`time_base` of traces: each one's stated base and the start of its first step."""
    return time_base([RankClockBase(t.meta.base_time_ns, _first_step_us(t)) for t in traces])


def _first_step_us(trace: RankTrace) -> float | None:
    first = trace.steps.get_column("start_us").min()
    return float(first) if isinstance(first, int | float) else None


def placement_warnings(traces: Sequence[RankTrace], base: TimeBase) -> list[ParseWarning]:
    """One warning per rank `base` placed by its first step, naming how far its clock was moved."""
    return [
        ParseWarning(
            traces[index].path,
            f"rank {traces[index].rank} has no usable baseTimeNanoseconds and its first step lies "
            f"{abs(base.shifts_us[index]) / MAX_BASE_GAP_US:.3g} days from the other ranks': placed at their "
            "median first step, then aligned by its collectives",
        )
        for index in base.placed
    ]


def aligned_ranks(run: Run) -> tuple[RankTrace, ...]:
    """The ranks of `run` moved onto one time base (`trace_time_base`): the smallest known
    `baseTimeNanoseconds`; a run on its ranks' own clocks (`Run.own_clocks`: a batch of the map) as it is."""
    if run.own_clocks:
        return run.ranks
    shifts = trace_time_base(run.ranks).shifts_us
    return tuple(trace.shifted(shift) for trace, shift in zip(run.ranks, shifts, strict=True))


EPOCH_FLOOR_US = 946_684_800_000_000.0
"""2000-01-01 UTC in microseconds since the epoch: a recorded time before it is not a date."""


def recorded_start_us(base_times_ns: Sequence[int], first_window_us: float | None) -> float | None:
    """When the run started, in microseconds since the epoch: its time base (the smallest known
    `baseTimeNanoseconds`) plus the start of its first step on that base; a run without a base whose clock is
    already a date needs none; None when it is not a date (docs/metrics.md, "Compare and trend")."""
    if first_window_us is None:
        return None
    bases = [int(base) for base in base_times_ns if int(base) > 0]
    started = float(first_window_us) + (min(bases) / 1000 if bases else 0.0)
    return started if started >= EPOCH_FLOOR_US else None


def iso_time(epoch_us: float) -> str:
    """`epoch_us` (microseconds since the epoch) as ISO 8601 UTC, to the second: `2026-11-20T02:00:00Z`."""
    moment = dt.datetime.fromtimestamp(epoch_us / 1e6, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
