"""The `replay` object of the JSON summary (docs/json-schema.md, "replay"): the run's own step skeletons
replayed, `as_recorded`'s error and one row per lever; nothing is computed here."""

from __future__ import annotations

from typing import Any

from traceview.reports.json.records import clean, records

from traceview.reduce.results import RunAnalysis


def replay_document(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `replay` object, None when nothing was replayed (no collective matched on two ranks or more)."""
    found = analysis.replay
    if found is None:
        return None
    return {
        "sentence": found.sentence,
        "as_recorded_error": {
            "median": clean(found.error_median),
            "worst": clean(found.error_worst),
            "worst_step": found.worst_step,
        },
        "errors": records(found.errors),
        "levers": records(found.levers),
    }
