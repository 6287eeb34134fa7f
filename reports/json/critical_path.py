"""The `critical_path` object of the JSON summary (docs/json-schema.md, "critical_path"): what held each step.

Compact by default: the categories, their run medians, the medians per rank, the holders per rank and the
inferred edges; with `full`, also every (rank, step) row. Nothing is computed here.
"""

from __future__ import annotations

from typing import Any

from traceview.reports.json.records import clean, records

from traceview.critical_path.analysis import CriticalPath


def critical_path_document(path: CriticalPath, full: bool = False) -> dict[str, Any]:
    """The `critical_path` object (module docstring)."""
    document: dict[str, Any] = {
        "categories": list(path.categories),
        "run_median": {name: clean(value) for name, value in path.run_median.items()},
        "per_rank": records(path.per_rank),
        "holders": records(path.holders),
        "notes": list(path.notes),
    }
    if full:
        document["per_step"] = records(path.per_step)
    return document
