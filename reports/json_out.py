"""The machine-readable summary: a versioned JSON document from a `RunAnalysis` (docs/json-schema.md).

Structure: `schema_version`, `traceview_version`, `run`, `verdict`, `recommendations`, `timeline`, then one
key per analysis, each built by one function of `ANALYSIS_KEYS` (an analysis adds one row; a function
returns None when its analysis did not run, and the key is then written as null). Floats that are not finite
become null; every object's keys are in a fixed order (records: the frame's column order), so the same
analysis gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import msgspec
import polars as pl

from traceview import __version__
from traceview.analysis import RunAnalysis
from traceview.collective_tables import CollectiveAnalysis

SCHEMA_VERSION = "1.1"
"""Major: a key removed or its meaning changed; minor: keys added (docs/json-schema.md, "Versioning")."""


def records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """A frame as a list of row objects, non-finite floats as null."""
    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dicts()]


def clean(value: Any) -> Any:
    """None for a float that is not finite (NaN, inf); the value otherwise."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _time_budget(analysis: RunAnalysis) -> dict[str, Any]:
    budget = analysis.budget
    return {
        "run_median": {k: clean(v) for k, v in budget.run_median.items()},
        "per_rank": records(budget.per_rank),
        "per_step": records(budget.per_step),
    }


def _recommendations(analysis: RunAnalysis) -> dict[str, Any]:
    advice = analysis.recommendations
    if advice is None:
        return {"facts": {}, "items": []}
    items = [
        {
            "rule": r.rule,
            "section": r.section,
            "sentence": r.sentence,
            "score": clean(r.score),
            "facts": {name: clean(value) for name, value in r.facts},
        }
        for r in advice.items
    ]
    return {"facts": {k: clean(v) for k, v in advice.facts.items()}, "items": items}


def _timeline(analysis: RunAnalysis) -> dict[str, Any] | None:
    timeline = analysis.timeline
    if timeline is None or timeline.median_step is None:
        return None
    return {
        "median_step": timeline.median_step,
        "steps": records(timeline.steps),
        "raw_segments": timeline.raw_segments,
        "drawn_segments": timeline.drawn_segments,
        "bridged_gap_us": clean(timeline.bridged_gap_us),
    }


def collectives_document(collectives: CollectiveAnalysis) -> dict[str, Any]:
    """The `collectives` object: linked share, unknown kernels and the three tables (not per-kernel rows)."""
    return {
        "linked_share": clean(collectives.linked_share),
        "unknown_comm_kernels": collectives.unknown_comm_kernels,
        "per_rank": records(collectives.per_rank),
        "per_process_group": records(collectives.per_process_group),
        "per_collective": records(collectives.per_collective),
    }


def _collectives(analysis: RunAnalysis) -> dict[str, Any] | None:
    return None if analysis.collectives is None else collectives_document(analysis.collectives)


ANALYSIS_KEYS: tuple[tuple[str, Callable[[RunAnalysis], Any]], ...] = (
    ("time_budget", _time_budget),
    ("collectives", _collectives),
)
"""One row per analysis: (top-level key, builder). Add yours at the end, documented in docs/json-schema.md."""


def summary_document(analysis: RunAnalysis) -> dict[str, Any]:
    """The JSON summary as plain Python data, top-level keys in a fixed order."""
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "traceview_version": __version__,
        "run": asdict(analysis.header),
        "verdict": asdict(analysis.verdict),
        "recommendations": _recommendations(analysis),
        "timeline": _timeline(analysis),
    }
    for key, build in ANALYSIS_KEYS:
        document[key] = build(analysis)
    return document


def render_json(analysis: RunAnalysis) -> str:
    """The JSON summary as text (UTF-8, indented, stable across runs)."""
    return msgspec.json.format(msgspec.json.encode(summary_document(analysis)), indent=2).decode()
