"""The `traceview hang --json` document (docs/json-schema.md, "`traceview hang --json`"): `schema_version`,
then the `flight_recorder` object (`traceview.reports.json.flight_recorder`)."""

from __future__ import annotations

from typing import Any

from traceview.reports.json.flight_recorder import flight_recorder_object
from traceview.reports.json.summary import SCHEMA_VERSION

from traceview.flight_recorder.analysis import HangAnalysis


def hang_document(analysis: HangAnalysis) -> dict[str, Any]:
    """The whole `traceview hang --json` document: `schema_version`, then the analysis's keys."""
    return {"schema_version": SCHEMA_VERSION, **flight_recorder_object(analysis)}
