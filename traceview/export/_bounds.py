"""What `traceview export` writes: the bounds (`--ranks`, `--steps`, `--window`, `--max-events`), their
parsing, and the check that a selection names something of the run (`traceview.export.perfetto` applies
them)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from traceview.core.errors import UsageError
from traceview.core.records import record
from traceview.core.sanitize import printable
from traceview.reduce.results import RunAnalysis

DEFAULT_MAX_EVENTS = 5_000_000
"""Events written at most (about 1 GB of JSON): Perfetto's UI loads traces up to about 2 GB."""


@record
class ExportBounds:
    """What to export: ranks and steps (None: all), a window in ms on the aligned clock since the run's first
    step, and the most events to write."""

    ranks: frozenset[int] | None = None
    steps: frozenset[int] | None = None
    window_ms: tuple[float, float] | None = None
    max_events: int = DEFAULT_MAX_EVENTS


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
