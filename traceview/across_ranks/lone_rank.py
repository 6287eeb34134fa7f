"""The parts of the cross-rank analysis whose result a run of one rank fixes (docs/metrics.md, "Across
ranks"): what they compare is a rank against its peers, and one rank has none, so the reduce of a one-rank run
takes the result stated here instead of computing it (issue 42: a one-rank run's reduce is the cost of a
process that runs after every map).

Each row of `LONE_RANK_PARTS` names a part (the function's name), why one rank fixes its result, and that
result, built on demand. `lone(function, ranks)` is the function itself, or for one rank the row's result;
`tests/test_lone_rank.py` holds every row equal, frame for frame, to what the function computes on one-rank
runs (factory traces and the real ones). Emptying the table forces the full path (the benchmark's baseline).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

import polars as pl

from traceview.across_ranks._mismatches import MISMATCH_SCHEMA
from traceview.across_ranks.alignment import AMBIGUOUS_SCHEMA, PLACEMENT_SCHEMA
from traceview.across_ranks.overlap import DISJOINT_SCHEMA

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class LonePart:
    """A part of the cross-rank analysis and its result for a run of one rank."""

    reason: str
    result: Callable[[], object]


def _empty(schema: Mapping[str, PolarsDataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


LONE_RANK_PARTS: dict[str, LonePart] = {
    "aligned_positions": LonePart(
        "its calls set the reference of every cell they are compared with, so none disagrees: nothing to "
        "align, no key ambiguous",
        lambda: (_empty(PLACEMENT_SCHEMA), _empty(AMBIGUOUS_SCHEMA)),
    ),
    "mismatches_of": LonePart(
        "every call agrees with the reference it alone sets and holds its place: none extra, unmatched, "
        "different or missing",
        lambda: _empty(MISMATCH_SCHEMA),
    ),
    "disjoint_instances": LonePart(
        "no instance has two members, so none is usable, and none can fail to overlap",
        lambda: _empty(DISJOINT_SCHEMA),
    ),
    "lateness_cost": LonePart(
        "no usable instance, so no call of the rank arrived last: no lateness to cost",
        lambda: _empty({"rank": pl.Int64, "lateness_cost_us": pl.Float64}),
    ),
    "spans_hosts": LonePart(
        "no usable instance, so none whose members sit on two hosts",
        lambda: _empty({"rank": pl.Int64, "spans_hosts": pl.Boolean}),
    ),
}
"""Part (function name) -> why one rank fixes its result, and the result."""


def lone(function: Callable[P, R], ranks: int) -> Callable[P, R]:
    """`function`, or where the run has one rank and `LONE_RANK_PARTS` names it, a function returning the
    table's result (its arguments unread)."""
    part = LONE_RANK_PARTS.get(function.__name__) if ranks == 1 else None
    if part is None:
        return function

    def fixed(*args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, part.result())

    return fixed
