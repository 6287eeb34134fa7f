"""The cross-rank findings `compare` and `trend` both read from a summary, in one place (docs/compare.md,
"trend and compare"): the stragglers the across-ranks analysis named, each with its lateness cost per step,
that cost's share of the step and its likely cause (`across_ranks.per_rank`), and the arrival skew of every
matched collective instance (`across_ranks.instances`, or the sketch of every instance's skew,
`distributions.crossrank_skew`, when a compact summary lists only some). Reads only: what a new straggler or
a skew change is, is decided by `traceview.compare.new_problems` and the tests of each command."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from traceview.core.records import record


@record
class Straggler:
    """A rank the across-ranks analysis named a straggler: its lateness cost per step (us), that cost's share
    of the step, and its likely cause."""

    rank: int
    cost_us: float | None
    cost_share: float | None
    cause: str | None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def named_stragglers(document: Mapping[str, Any]) -> tuple[Straggler, ...] | None:
    """The stragglers a summary names, by rank; None when it has no across-ranks analysis (one rank, an
    older schema): it cannot say who is late."""
    across = document.get("across_ranks")
    if not across:
        return None
    rows = {int(row["rank"]): row for row in across.get("per_rank") or () if isinstance(row.get("rank"), int)}
    named = sorted({int(rank) for rank in across.get("stragglers") or ()})
    return tuple(
        Straggler(
            rank,
            _number(rows.get(rank, {}).get("lateness_cost_us")),
            _number(rows.get(rank, {}).get("lateness_cost_share")),
            None if rows.get(rank, {}).get("cause") is None else str(rows[rank]["cause"]),
        )
        for rank in named
    )


def skew_values(document: Mapping[str, Any]) -> tuple[float, ...]:
    """The arrival skew (us) of every matched collective instance the summary keeps (module docstring)."""
    across = document.get("across_ranks") or {}
    listed = across.get("instances") or []
    sketched = (document.get("distributions") or {}).get("crossrank_skew")
    if sketched and across.get("instances_total", len(listed)) > len(listed):
        values = sketched.get("skew_us") or ()
    else:
        values = [row.get("skew_us") for row in listed]
    numbers = (_number(v) for v in values)
    return tuple(v for v in numbers if v is not None and not math.isnan(v))
