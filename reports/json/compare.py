"""The JSON documents of `traceview compare --json` and `traceview trend --json` (docs/json-schema.md,
"Compare" and "Trend"). Keys in a fixed order; non-finite floats become null."""

from __future__ import annotations

from typing import Any

from traceview.reports.json.records import clean, records
from traceview.reports.json.scaleup import scaling_object
from traceview.reports.json.summary import SCHEMA_VERSION

from traceview.compare.findings import Finding
from traceview.compare.trend import Trend
from traceview.compare.two_runs import Comparison
from traceview.model.time_base import iso_time

SUBJECT_FIELDS = ("collective", "pg_key", "size_bucket", "kernel_class", "kernel_key", "rank")


def finding_object(finding: Finding) -> dict[str, Any]:
    """One finding: metric, subject and its fields, the two values, the change and the test's figures."""
    fields = dict(finding.fields)
    return {
        "metric": finding.metric,
        "subject": finding.subject,
        "family": finding.family,
        **{key: fields[key] for key in SUBJECT_FIELDS if key in fields},
        "statistic": finding.statistic,
        "baseline": clean(finding.baseline),
        "candidate": clean(finding.candidate),
        "change_pct": clean(finding.change_pct),
        "test": finding.test.name,
        "test_statistic": clean(finding.test.statistic),
        "p_value": clean(finding.test.p_value),
        "p_adjusted": clean(finding.p_adjusted),
        "baseline_n": finding.test.baseline_n,
        "candidate_n": finding.test.candidate_n,
        "outcome": finding.outcome,
        "likely_cause": finding.likely_cause,
        "beyond_peers_pct": clean(finding.beyond_peers_pct),
        "explained_by": finding.explained_by,
        "partial": finding.partial,
    }


def _scaling(comparison: Comparison) -> dict[str, Any] | None:
    return None if comparison.scaling is None else scaling_object(comparison.scaling)


def compare_document(comparison: Comparison) -> dict[str, Any]:
    """The `traceview compare --json` document."""
    structure, settings = comparison.structure, comparison.settings
    return {
        "schema_version": SCHEMA_VERSION,
        "baseline": comparison.baseline_source,
        "candidate": comparison.candidate_source,
        "verdict": comparison.verdict,
        "different_jobs": list(comparison.different_jobs),
        "regressions": [finding_object(f) for f in comparison.regressions],
        "improvements": [finding_object(f) for f in comparison.improvements],
        "not_significant": [finding_object(f) for f in comparison.not_significant],
        "structure": {
            "baseline_world_size": structure.baseline_world_size,
            "candidate_world_size": structure.candidate_world_size,
            "appeared": structure.appeared,
            "disappeared": structure.disappeared,
            "algorithm_mix": records(structure.algorithm_mix),
            "algorithm_mix_note": structure.algorithm_mix_note,
            "partial": structure.partial_notes,
            "setup_changes": structure.setup_changes,
            "stragglers": {
                "baseline": structure.baseline_stragglers,
                "candidate": structure.candidate_stragglers,
            },
        },
        "budgets": records(comparison.budgets),
        "scaling": _scaling(comparison),
        "settings": {
            "threshold_pct": settings.threshold_pct,
            "alpha": settings.alpha,
            "min_step_share": settings.min_step_share,
            "min_samples": settings.min_samples,
            "metric_threshold_pct": dict(settings.metric_threshold_pct),
        },
        "compared": [finding_object(f) for f in comparison.findings],
    }


def _iso(epoch_us: float | None) -> str | None:
    return None if epoch_us is None else iso_time(epoch_us)


def trend_document(found: Trend) -> dict[str, Any]:
    """The `traceview trend --json` document."""
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": found.verdict,
        "ordered_by": found.ordered_by,
        "runs": [run.name for run in found.runs],
        "run_details": [
            {
                "name": run.name,
                "label": run.shown,
                "recorded_at": _iso(run.started_us),
                "time_source": run.time_source,
                "source": run.source,
                "commit": run.commit,
                "job": run.job,
            }
            for run in found.runs
        ],
        "warnings": list(found.warnings),
        "changes": [
            {
                "metric": c.metric,
                "run": c.run,
                "label": c.label,
                "index": c.index,
                "before": clean(c.before),
                "after": clean(c.after),
                "change_pct": clean(c.change_pct),
                "p_value": clean(c.p_value),
            }
            for c in found.changes
        ],
        "latest": [
            {
                "metric": j.metric,
                "history_runs": j.history_runs,
                "history": clean(j.history),
                "latest": clean(j.latest),
                "change_pct": clean(j.change_pct),
                "p_adjusted": clean(j.p_adjusted),
                "outcome": j.outcome,
            }
            for j in found.latest
        ],
        "values": records(found.values),
    }
