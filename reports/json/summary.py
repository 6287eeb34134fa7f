"""The machine-readable summary: a versioned JSON document from a `RunAnalysis` (docs/json-schema.md).

Structure: `schema_version`, `traceview_version`, `run`, `verdict`, `recommendations`, `timeline`, then one
key per analysis, each built by one function of `ANALYSIS_KEYS` (an analysis adds one row; a function
returns None when its analysis did not run, and the key is then written as null). The document is compact by
default: it grows with the run's ranks, steps and collective signatures, and lists at most `LISTED_INSTANCES`
collective instances (the largest skews; every instance's skew is in `distributions.crossrank_skew`);
`full=True` lists every instance. Floats that are not finite
become null; every object's keys are in a fixed order (records: the frame's column order), so the same
analysis gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from traceview.reports.json.critical_path import critical_path_document
from traceview.reports.json.dimensions import dimensions_document
from traceview.reports.json.encode import json_text
from traceview.reports.json.kernels import kernels_document
from traceview.reports.json.nccl_inspector import inspector_document
from traceview.reports.json.prediction import prediction_document
from traceview.reports.json.records import clean, records
from traceview.reports.json.replay import replay_document

from traceview.across_ranks.analysis import CrossRank
from traceview.bubbles.gaps import BubbleAnalysis
from traceview.collectives.tables import CollectiveAnalysis
from traceview.core.version import __version__
from traceview.nccl.join import LinkOverride, NcclJoin
from traceview.nccl.problems import nccl_problems
from traceview.reduce.analysis import RunAnalysis

SCHEMA_VERSION = "1.24"
"""Major: a key removed or its meaning changed; minor: keys added (docs/json-schema.md, "Versioning")."""
LISTED_INSTANCES = 256
"""Collective instances a compact document lists (`across_ranks.instances`)."""


def _run(analysis: RunAnalysis) -> dict[str, Any]:
    """The `run` object: the header's fields, `sources` as an object (field -> where it came from)."""
    found = asdict(analysis.header)
    found["sources"] = dict(analysis.header.sources)
    return found


def _time_budget(analysis: RunAnalysis) -> dict[str, Any]:
    budget = analysis.budget
    return {
        "run_median": {k: clean(v) for k, v in budget.run_median.items()},
        "per_rank": records(budget.per_rank),
        "per_step": records(budget.per_step),
        "outliers": records(budget.outliers),
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
            "saved_us": clean(r.saved_us),
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
        "ranks_total": timeline.ranks_total,
        "ranks_shown": list(timeline.ranks_shown),
        "drilldown": _drilldown(analysis),
    }


def _drilldown(analysis: RunAnalysis) -> dict[str, Any] | None:
    found = analysis.drilldown
    if found is None:
        return None
    return {
        "step_waits": records(found.step_waits),
        "median_ranks": records(found.median_ranks),
        "by_cost": records(found.by_cost),
        "costly_instances": records(found.costly_instances),
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


def _link_override(override: LinkOverride | None) -> dict[str, Any] | None:
    if override is None:
        return None
    return {
        "group": override.group,
        "group_size": override.group_size,
        "link": override.link.key,
        "link_name": override.link.name,
        "bandwidth_bytes_per_s": override.bandwidth_bytes_per_s,
        "reason": override.reason,
        "provenance": override.provenance,
    }


def nccl_document(nccl: NcclJoin) -> dict[str, Any]:
    """The `nccl` object: the logs read, communicators, their process groups, hosts per rank, B overrides."""
    return {
        "logs": list(nccl.paths),
        "skipped": [{"path": path, "reason": reason} for path, reason in nccl.skipped],
        "versions": list(nccl.versions),
        "settings": dict(nccl.settings),
        "hosts_by_rank": {str(rank): host for rank, host in sorted(nccl.hosts_by_rank.items())},
        "topology": records(nccl.topology),
        "communicators": records(nccl.communicators),
        "members": records(nccl.members),
        "process_groups": records(nccl.groups),
        "degraded_transports": records(nccl.degraded),
        "calls": records(nccl.calls),
        "algorithms": records(nccl.algorithms),
        "warnings": records(nccl.warnings),
        "link_overrides": [_link_override(override) for override in nccl.link_overrides],
        "link_override": _link_override(nccl.link_override),
        "verdict_flags": list(nccl.verdict_flags),
        "problems": records(nccl_problems(nccl)),
        "notes": list(nccl.notes),
        "foreign": [{"path": path, "reasons": reasons} for path, reasons in nccl.foreign],
    }


def _nccl(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `nccl` object: the logs' (when given), with `inspector` when NCCL Inspector output was given."""
    document = None if analysis.nccl is None else nccl_document(analysis.nccl)
    if analysis.inspector is None:
        return document
    return {**(document or {}), "inspector": inspector_document(analysis.inspector)}


def bubbles_document(bubbles: BubbleAnalysis) -> dict[str, Any]:
    """The `bubbles` object: gate figures, idle per step and rank by cause, the longest gaps, the pipeline."""
    return {
        "run_median": {k: clean(v) for k, v in bubbles.gate_figures().items()},
        "per_rank": records(bubbles.per_rank),
        "outliers": records(bubbles.outliers),
        "per_step": records(bubbles.per_step),
        "largest_gaps": records(bubbles.largest_gaps()),
        "virtual_stages": bubbles.virtual_stages,
        "pipelines": records(bubbles.pipelines),
        "pipeline_per_step": records(bubbles.pipeline),
        "unknown_group_p2p": bubbles.unknown_group_p2p,
        "idle_by_path": records(bubbles.idle_by_path),
    }


def _bubbles(analysis: RunAnalysis) -> dict[str, Any] | None:
    return None if analysis.bubbles is None else bubbles_document(analysis.bubbles)


def crossrank_document(crossrank: CrossRank, listed: int | None = None) -> dict[str, Any]:
    """The `across_ranks` object: the straggler sentence, gate figures, hosts and clock offsets, per-rank
    figures, the matched instances with their skew (every one, or the `listed` of largest skew), the
    mismatches and the groups (absent members included)."""
    instances = crossrank.instances if listed is None else crossrank.listed_instances(listed)
    return {
        "sentence": crossrank.sentence,
        "stragglers": list(crossrank.stragglers),
        "figures": {k: clean(v) for k, v in crossrank.gate_figures().items()},
        "outliers": records(crossrank.outliers),
        "usable_instances": crossrank.usable_instances,
        "reference_host": crossrank.clocks.reference,
        "clock_offsets": records(crossrank.clocks.offsets),
        "hosts": records(crossrank.hosts),
        "per_rank": records(crossrank.per_rank),
        "instances_total": crossrank.instances.height,
        "instances": records(instances),
        "mismatches": records(crossrank.mismatches),
        "groups": records(crossrank.groups),
        "warnings": list(crossrank.warnings),
    }


def _across_ranks(analysis: RunAnalysis, full: bool) -> dict[str, Any] | None:
    listed = None if full else LISTED_INSTANCES
    return None if analysis.crossrank is None else crossrank_document(analysis.crossrank, listed)


def _distributions(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `distributions` object: the samples `traceview compare` and `trend` test (docs/json-schema.md)."""
    found = analysis.distributions
    if found is None:
        return None
    return {
        "collective_kernels": [{k: clean(v) for k, v in row.items()} for row in found.collective_kernels],
        "kernel_classes": records(found.kernel_classes),
        "class_kernels": [{k: clean(v) for k, v in row.items()} for row in found.class_kernels],
        "algorithms": records(found.algorithms),
        "collective_calls": records(found.collective_calls),
        "crossrank_skew": found.crossrank_skew,
    }


def _kernels(analysis: RunAnalysis, full: bool) -> dict[str, Any] | None:
    return None if analysis.kernels is None else kernels_document(analysis.kernels, full=full)


def _moe(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `moe` object: the all-to-alls' balance (docs/json-schema.md, `moe`)."""
    found = analysis.moe
    if found is None:
        return None
    return {
        "sentence": found.sentence,
        "measurable": found.measurable,
        "unmeasured_groups": list(found.unmeasured),
        "per_group": records(found.per_group),
        "per_step": records(found.per_step),
        "per_rank": records(found.per_rank),
        "matrix": records(found.matrix),
    }


def _roofline(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `roofline` object: CCR per dimension against each link level's ridge."""
    found = analysis.roofline
    if found is None:
        return None
    return {
        "sentence": found.sentence,
        "missing": found.missing,
        "flops_per_step": clean(found.flops_per_step),
        "peak_flops": clean(found.peak_flops),
        "achieved_flops": clean(found.achieved_flops),
        "efficiency": clean(found.efficiency),
        "measured_efficiency": clean(found.measured_efficiency),
        "flops_doubt": found.flops_doubt,
        "host_note": found.host_note,
        "levels": records(found.levels),
        "points": records(found.points),
    }


def _links_measured(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `links_measured` object: alpha and B fitted on the run's transfer times."""
    found = analysis.links_measured
    if found is None:
        return None
    return {
        "sentence": found.sentence,
        "used_by_prediction": found.used,
        "classes": records(found.classes),
        "scopes": records(found.scopes),
    }


def _critical_path(analysis: RunAnalysis, full: bool) -> dict[str, Any] | None:
    path = analysis.critical_path
    return None if path is None else critical_path_document(path, full=full)


def _flight_recorder(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `flight_recorder` object: the job's Flight Recorder dumps read together (null without dumps)."""
    found = analysis.flight_recorder
    if found is None:
        return None
    from traceview.reports.json.flight_recorder import flight_recorder_object  # only with dumps (issue 42)

    return flight_recorder_object(found)


ANALYSIS_KEYS: tuple[tuple[str, Callable[[RunAnalysis], Any]], ...] = (
    ("time_budget", _time_budget),
    ("collectives", _collectives),
    ("bubbles", _bubbles),
    ("nccl", _nccl),
    ("across_ranks", lambda analysis: _across_ranks(analysis, full=False)),
    ("prediction", prediction_document),
    ("distributions", _distributions),
    ("kernels", lambda analysis: _kernels(analysis, full=False)),
    ("dimensions", dimensions_document),
    ("moe", _moe),
    ("roofline", _roofline),
    ("links_measured", _links_measured),
    ("critical_path", lambda analysis: _critical_path(analysis, full=False)),
    ("flight_recorder", _flight_recorder),
    ("replay", replay_document),
)
"""One row per analysis: (top-level key, builder). Add yours at the end, documented in docs/json-schema.md."""
FULL_KEYS: dict[str, Callable[[RunAnalysis], Any]] = {
    "across_ranks": lambda analysis: _across_ranks(analysis, full=True),
    "kernels": lambda analysis: _kernels(analysis, full=True),
    "critical_path": lambda analysis: _critical_path(analysis, full=True),
}
"""The builders that list more in a full document (`summary --json --full`)."""


def summary_document(analysis: RunAnalysis, full: bool = False) -> dict[str, Any]:
    """The JSON summary as plain Python data, top-level keys in a fixed order; compact unless `full`."""
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "traceview_version": __version__,
        "run": _run(analysis),
        "verdict": asdict(analysis.verdict),
        "recommendations": _recommendations(analysis),
        "timeline": _timeline(analysis),
    }
    for key, build in ANALYSIS_KEYS:
        document[key] = (FULL_KEYS.get(key, build) if full else build)(analysis)
    return document


def render_json(analysis: RunAnalysis, full: bool = False) -> str:
    """The JSON summary as text (UTF-8, indented, stable across runs; `traceview.reports.json.encode`);
    compact unless `full`."""
    return json_text(summary_document(analysis, full))
