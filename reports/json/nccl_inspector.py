"""The `nccl.inspector` object: NCCL Inspector's records and how they met the trace (docs/json-schema.md;
docs/metrics.md, "NCCL Inspector")."""

from __future__ import annotations

from typing import Any

from traceview.reports.json.records import clean, records

from traceview.nccl.inspector import InspectorJoin


def inspector_document(inspector: InspectorJoin) -> dict[str, Any]:
    """`files`, `skipped`, `format_version`, `records`, `joined`, `joined_share`, `communicators` (each with
    its process group and `bridge`), `comparison` (per collective and size: both sides' medians, `agrees`),
    `disagreements` (sentences) and `joined_records` (one row per joined record)."""
    return {
        "files": list(inspector.files),
        "skipped": [{"path": path, "reason": reason} for path, reason in inspector.skipped],
        "format_version": inspector.format_version,
        "records": inspector.records,
        "joined": inspector.joined.height,
        "joined_share": clean(inspector.joined_share),
        "communicators": records(inspector.communicators),
        "comparison": records(inspector.comparison),
        "disagreements": list(inspector.disagreements),
        "joined_records": records(inspector.joined),
    }
