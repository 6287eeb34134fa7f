"""The `dimensions` object of the JSON summary (docs/json-schema.md, "dimensions"): each process group's
dimension and evidence, the cost per dimension and step, the volumes against the seeds' formulas; nothing is
computed here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from traceview.reports.json.dimension_lines import dimension_lines
from traceview.reports.json.dimension_zero import dimension_zero
from traceview.reports.json.records import clean, records

from traceview.reduce.results import RunAnalysis


def dimensions_document(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `dimensions` object: each group's dimension and evidence, the cost per dimension and step, the
    volumes against the seeds' formulas (docs/json-schema.md, `dimensions`)."""
    found = analysis.dimensions
    if found is None:
        return None
    inputs = found.inputs
    listed = (
        [
            inputs.params,
            inputs.activation,
            inputs.layers,
            inputs.micro_batches,
            inputs.top_k,
            inputs.moe_layers,
        ]
        if inputs
        else []
    )
    groups = found.groups.select(
        "group",
        "desc",
        "pg_name",
        "n",
        "ranks",
        "dimension",
        "confidence",
        "best",
        "runner_up",
        "evidence",
        "calls",
        "calls_per_step",
        "ar_share",
        "agrs_share",
        "a2a_share",
        "p2p_share",
        "size_spread",
        "median_bytes",
        "early_share",
        "contiguous",
        "stride",
        "nodes",
        "world",
    )
    return {
        "threshold": found.threshold,
        "layout": found.layout,
        "layout_note": found.layout_note,
        "costliest": found.costliest["dimension"] if found.costliest else None,
        "groups": records(groups),
        "lines": dimension_lines(found),
        "evidence": records(found.evidence),
        "per_dimension": records(found.per_dimension),
        "per_step": records(found.per_step),
        "volumes": records(found.volumes),
        "zero": dimension_zero(found),
        "inputs": [{k: clean(v) for k, v in asdict(i).items()} for i in listed],
    }
