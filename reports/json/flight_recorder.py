"""The `flight_recorder` object of the summary and of `traceview hang --json` (docs/json-schema.md,
"`traceview hang --json`"): the verdict and first line, the in-flight limits, the dumps read and those that
were not, the per-group positions, the findings earliest first, the chains of waits across groups, the
Kineto traces beside the dumps (each rank's last traced call per group, and where the first finding's group
stood in them) and the NCCL logs' failures."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import polars as pl
from traceview.reports.json.records import clean, records

from traceview.flight_recorder.analysis import HangAnalysis
from traceview.flight_recorder.findings import HangFinding


def finding_object(finding: HangFinding) -> dict[str, Any]:
    """One finding: its kind, status, group and sequence number, the ranks on each side, the sides' ops,
    sizes and dtypes, how long it was waited, its creation time, the stack, and its sentence."""
    found = asdict(finding)
    found["ranks_waiting"], found["ranks_apart"] = list(finding.ranks_waiting), list(finding.ranks_apart)
    found["sides"] = [{**side, "ranks": list(side["ranks"])} for side in found["sides"]]
    found["waited_s"] = clean(finding.waited_s)
    return found


def _maybe_records(frame: pl.DataFrame | None) -> list[dict[str, Any]] | None:
    return None if frame is None else records(frame)


def flight_recorder_object(analysis: HangAnalysis) -> dict[str, Any]:
    """The analysis as a JSON object (module docstring)."""
    return {
        "verdict": analysis.verdict,
        "headline": analysis.headline,
        "in_flight_limit_s": analysis.in_flight_limit_s,
        "diverged_limit_s": analysis.diverged_limit_s,
        "longest_collective_s": clean(analysis.longest_collective_s),
        "dumps": [
            {"rank": rank, "path": path, "version": version, "dump_time_from": source}
            for rank, path, version, source in analysis.dumps
        ],
        "unreadable": [asdict(unread) for unread in analysis.unread],
        "missing_ranks": list(analysis.missing_ranks),
        "groups": records(analysis.positions),
        "findings": [finding_object(finding) for finding in analysis.findings],
        "chains": list(analysis.chains),
        "kineto_traces": None if analysis.kineto_traces is None else list(analysis.kineto_traces),
        "kineto_last_calls": _maybe_records(analysis.kineto_last_calls),
        "kineto_at_first_finding": [
            {**asdict(side), "ranks": list(side.ranks)} for side in analysis.kineto_at_first
        ],
        "kineto_unreadable": [{"path": path, "reason": reason} for path, reason in analysis.kineto_unread],
        "nccl": {
            "problems": records(analysis.nccl_problems),
            "unreadable": [{"path": path, "reason": reason} for path, reason in analysis.nccl_logs_unread],
        },
    }
