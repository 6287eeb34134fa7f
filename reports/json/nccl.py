"""The `traceview nccl --json` document (docs/json-schema.md, "`traceview nccl --json`"): every log read
together as before (`traceview.reports.json.summary.nccl_document`), then the headline, the gate figures,
and each job with its communicators merged over ranks and its failures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from traceview.reports.json.records import records
from traceview.reports.json.summary import SCHEMA_VERSION, nccl_document

from traceview.nccl.jobs import NcclJob
from traceview.nccl.join import NcclJoin
from traceview.nccl.problems import nccl_gate_figures


def job_object(job: NcclJob) -> dict[str, Any]:
    """One job: its logs, versions, hosts, communicators (ranks seen and missing), failures, and its join."""
    return {
        "logs": list(job.logs),
        "versions": list(job.versions),
        "hosts": list(job.hosts),
        "communicators": records(job.communicators),
        "problems": records(job.problems),
        "figures": nccl_gate_figures(job.join),
        "nccl": nccl_document(job.join),
    }


def nccl_jobs_document(
    everything: NcclJoin, jobs: Sequence[NcclJob], headline: str, figures: dict[str, float | None]
) -> dict[str, Any]:
    """The whole document: the logs read together (the keys of the summary's `nccl` object), then
    `schema_version`, `headline`, `figures` (`nccl_errors`, `nccl_fallbacks`) and `jobs`."""
    return {
        **nccl_document(everything),
        "schema_version": SCHEMA_VERSION,
        "headline": headline,
        "figures": figures,
        "jobs": [job_object(job) for job in jobs],
    }
