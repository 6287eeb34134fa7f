"""Durations as text, each in the unit that keeps its digits (docs/metrics.md, "Durations as text").

Every figure is kept in microseconds; a renderer or a sentence shows it through `duration_text` (with its
unit) or `duration_cell` (in a table whose title names the unit). `DURATION_UNITS` is the rule: a duration
under 1 ms that shows a digit in microseconds is shown in them (1.8 us, not 0.00 ms), anything else in
milliseconds; one that rounds to zero is zero (`0.00 ms`, never `-0.00 ms` or `0.0 us` for a float's residue).
"""

from __future__ import annotations

import math

from traceview.core.records import record


@record
class DurationUnit:
    """A unit a duration is shown in: its name, microseconds per unit, the durations it takes (nonzero and
    under `below_us` in magnitude) and its decimals (None: the caller's, as a table's column has them)."""

    name: str
    us_per_unit: float
    below_us: float
    decimals: int | None


DURATION_UNITS: tuple[DurationUnit, ...] = (
    DurationUnit("us", 1.0, 1000.0, 1),
    DurationUnit("ms", 1000.0, math.inf, None),
)
"""Smallest first: the first unit whose range holds the duration; zero and a non-finite value take the
last."""
ZERO_US = 0.05
"""A duration smaller in magnitude shows no digit even in microseconds (one decimal): it is shown as zero."""


def duration_unit(us: float) -> DurationUnit:
    """The row of `DURATION_UNITS` a duration (in microseconds) is shown in."""
    return next((unit for unit in DURATION_UNITS if ZERO_US <= abs(us) < unit.below_us), DURATION_UNITS[-1])


def _number(us: float, unit: DurationUnit, decimals: int) -> str:
    places = decimals if unit.decimals is None else unit.decimals
    value = 0.0 if abs(us) < ZERO_US else us / unit.us_per_unit  # no `-0.00` from a float's residue
    return f"{value:.{places}f}"


def duration_text(us: float, decimals: int = 2) -> str:
    """A duration (us) with its unit: `12.34 ms`, `1.8 us`, `0.00 ms` (`decimals`: the milliseconds')."""
    unit = duration_unit(us)
    return f"{_number(us, unit, decimals)} {unit.name}"


def duration_cell(us: object, decimals: int = 2, column_unit: str = "ms", missing: str = "-") -> str:
    """A duration (us) in a table column whose header or title names `column_unit`: the bare number when it
    is shown in that unit, else the number with its own unit (`1.8 us` in a column of ms); `missing` when
    the value is not a number."""
    if isinstance(us, bool) or not isinstance(us, int | float):
        return missing
    unit = duration_unit(us)
    number = _number(us, unit, decimals)
    return number if unit.name == column_unit else f"{number} {unit.name}"
