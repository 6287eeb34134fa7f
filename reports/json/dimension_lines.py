"""The `dimensions.lines` array of the JSON summary (docs/json-schema.md, `dimensions`): one row per (group,
collective kind), each line's own figures and dimension; nothing is computed here."""

from __future__ import annotations

from typing import Any

from traceview.reports.json.records import records

from traceview.dimensions.analysis import Dimensions

LINE_COLUMNS = (
    "group",
    "kind",
    "desc",
    "n",
    "ranks",
    "dimension",
    "confidence",
    "best",
    "runner_up",
    "evidence",
    "calls",
    "calls_per_step",
    "call_us",
    "median_bytes",
    "size_spread",
    "unsized_share",
    "early_share",
    "early_bytes_share",
    "libraries",
)
"""The columns of a line, in order."""


def dimension_lines(found: Dimensions) -> list[dict[str, Any]]:
    """The rows of `dimensions.lines` (empty for a run without communication)."""
    if found.lines.height == 0:
        return []
    return records(found.lines.select([c for c in LINE_COLUMNS if c in found.lines.columns]))
