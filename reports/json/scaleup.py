"""The JSON document of `traceview scaleup --json` (docs/json-schema.md, "traceview scaleup --json"): the
headline, whether the model is the same, and the scaling analysis (the same object as `compare --json`'s
`scaling`). Keys in a fixed order; non-finite floats become null. Renders only."""

from __future__ import annotations

from typing import Any

from traceview.reports.json.records import clean, records
from traceview.reports.json.summary import SCHEMA_VERSION

from traceview.compare.scaleup import EXPECTED_FROM, Scaleup
from traceview.compare.scaling import Scaling


def scaling_object(scaling: Scaling) -> dict[str, Any]:
    """The scaling analysis: both world sizes, both efficiencies, the loss by factor, stragglers, busbw."""
    return {
        "sentence": scaling.sentence,
        "baseline_world_size": scaling.baseline_world_size,
        "candidate_world_size": scaling.candidate_world_size,
        "measured_efficiency": clean(scaling.measured_efficiency),
        "predicted_efficiency": clean(scaling.predicted_efficiency),
        "factors": records(scaling.factors),
        "new_stragglers": scaling.new_stragglers,
        "busbw": records(scaling.busbw),
        "notes": scaling.notes,
    }


def scaleup_document(found: Scaleup, small: str, large: str) -> dict[str, Any]:
    """The `traceview scaleup --json` document of `small` against `large` (their sources as given)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "small": small,
        "large": large,
        "headline": found.headline,
        "same_model": found.same_model,
        "kernel_overlap": clean(found.kernel_overlap),
        "predicted_from": EXPECTED_FROM,
        "scaling": scaling_object(found.scaling),
    }
