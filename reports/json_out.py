"""The machine-readable summary: a versioned JSON document built from a `RunAnalysis` (schema in docs/json-schema.md)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import msgspec
import polars as pl

from traceview import __version__
from traceview.analysis import RunAnalysis

SCHEMA_VERSION = "1.0"


def _records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in frame.to_dicts()]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary_document(analysis: RunAnalysis) -> dict[str, Any]:
    """The JSON summary as plain Python data, keys in a fixed order."""
    budget = analysis.budget
    return {
        "schema_version": SCHEMA_VERSION,
        "traceview_version": __version__,
        "run": asdict(analysis.header),
        "verdict": asdict(analysis.verdict),
        "time_budget": {
            "run_median": {k: _clean(v) for k, v in budget.run_median.items()},
            "per_rank": _records(budget.per_rank),
            "per_step": _records(budget.per_step),
        },
    }


def render_json(analysis: RunAnalysis) -> str:
    """The JSON summary as text (UTF-8, sorted keys inside records, stable across runs)."""
    return msgspec.json.format(msgspec.json.encode(summary_document(analysis)), indent=2).decode()
