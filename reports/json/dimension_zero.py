"""The `dimensions.zero` array of the JSON summary (docs/json-schema.md, `dimensions`): ZeRO-1/2/3 against
DDP, memory and communication per rank for the run's N and F; nothing is computed here."""

from __future__ import annotations

from typing import Any

from traceview.reports.json.records import records

from traceview.dimensions.analysis import Dimensions


def dimension_zero(found: Dimensions) -> list[dict[str, Any]]:
    """The rows of `dimensions.zero` (empty when the analysis built none)."""
    return records(found.zero) if found.zero.height else []
