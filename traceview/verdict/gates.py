"""`--fail-on` thresholds: `METRIC OP VALUE` expressions over the run's gate figures (exit code 1 when
crossed)."""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable, Collection, Mapping, Sequence

from traceview.core.errors import UsageError
from traceview.core.records import record

OPERATORS: Mapping[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}
EXPRESSION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|==|>|<)\s*([-+0-9.eE]+)\s*$")


@record
class Threshold:
    """`metric op value`: crossed when the metric's value satisfies the comparison."""

    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


@record
class Crossing:
    """A threshold that fired, with the measured value that fired it."""

    threshold: Threshold
    measured: float


def parse_threshold(text: str) -> Threshold:
    """Parse `exposed_gamma>0.5` and the like; raises `UsageError` naming the expression."""
    match = EXPRESSION.match(text)
    if not match:
        raise UsageError(f"--fail-on {text!r}: expected METRIC OP VALUE, e.g. exposed_gamma>0.5")
    metric, op, value = match.groups()
    try:
        return Threshold(metric, op, float(value))
    except ValueError:
        raise UsageError(f"--fail-on {text!r}: {value!r} is not a number") from None


def check_metric(threshold: Threshold, known: Collection[str]) -> None:
    """Refuse a threshold on a figure that is not in `known` (a misspelled metric), naming the
    nearest ones."""
    if threshold.metric in known:
        return
    near = difflib.get_close_matches(threshold.metric, sorted(known), n=3)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise UsageError(
        f"--fail-on {threshold}: unknown metric {threshold.metric!r} ({hint}known: "
        f"{', '.join(sorted(known))})"
    )


def not_evaluated(
    thresholds: Sequence[Threshold],
    figures: Mapping[str, float | None],
    withheld: Mapping[str, str] | None = None,
) -> list[str]:
    """`not evaluated: METRIC (why)` for each threshold whose figure this run has no value for: withheld by
    the verdict (its reason), or not measured (absent from the run). A gate never passes silently."""
    reasons = withheld or {}
    return [
        f"not evaluated: {threshold} ({reasons.get(threshold.metric, 'the run has no value for it')})"
        for threshold in thresholds
        if figures.get(threshold.metric) is None
    ]


def crossings(thresholds: Sequence[Threshold], figures: Mapping[str, float | None]) -> list[Crossing]:
    """The thresholds whose metric crosses them. An unknown metric is a `UsageError` listing the known ones;
    a metric with no value (e.g. gamma when no compute was seen) never fires."""
    fired = []
    for threshold in thresholds:
        if threshold.metric not in figures:
            known = ", ".join(sorted(figures))
            raise UsageError(f"--fail-on {threshold}: unknown metric {threshold.metric!r} (known: {known})")
        measured = figures[threshold.metric]
        if measured is not None and OPERATORS[threshold.op](measured, threshold.value):
            fired.append(Crossing(threshold, measured))
    return fired
