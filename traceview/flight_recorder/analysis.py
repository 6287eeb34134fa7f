"""Hang forensics (docs/metrics.md, "Hang forensics"): PyTorch Flight Recorder dumps of one job read together
into where each rank stood in each process group, the divergences found (`rules.RULES`), the waits that
cross groups as chains, and the first line: the earliest place across groups where the ranks stop agreeing.

`analyze_hang(dumps, unread, nccl_logs)` is a pure function of the parsed dumps; reading the files is
`traceview.flight_recorder.inputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from traceview.core.records import record
from traceview.flight_recorder.chains import wait_chains
from traceview.flight_recorder.findings import HangFinding, membership_findings, mismatch_findings
from traceview.flight_recorder.inputs import UnreadDump
from traceview.flight_recorder.positions import NS_PER_S, all_entries, dump_times, group_members, positions
from traceview.flight_recorder.rules import DIVERGED_FACTOR, RULE_BY_KIND, in_flight_limit_s
from traceview.flight_recorder.traces import TracedSide, traced_at
from traceview.flight_recorder.waits import p2p_findings, wait_findings
from traceview.model.flight_recorder import FlightRecorderDump
from traceview.model.nccl_log import NcclLog

VERDICTS = ("agree", "unsure", "divergence")
"""What the dumps say, from best to worst."""


@record
class HangAnalysis:
    """The dumps of one job read together."""

    dumps: tuple[tuple[int, str, str, str], ...]  # (rank, path, version, dump time source) per dump read
    unread: tuple[UnreadDump, ...]  # named files that could not be read
    missing_ranks: tuple[int, ...]  # members of a group with neither a dump nor an unreadable file
    positions: pl.DataFrame  # positions.POSITION_COLUMNS
    findings: tuple[HangFinding, ...]  # earliest first
    chains: tuple[str, ...]  # waits that cross groups
    in_flight_limit_s: float
    diverged_limit_s: float
    longest_collective_s: float | None  # the job's longest measured collective (None: no duration)
    verdict: str  # VERDICTS
    headline: str
    nccl_problems: pl.DataFrame  # kind, count, example (traceview.nccl.problems), over the logs given
    nccl_logs_unread: tuple[tuple[str, str], ...]
    kineto_traces: tuple[str, ...] | None = None  # traces in the folders named; None: no folder named
    kineto_last_calls: pl.DataFrame | None = None  # traces.TRACED_SCHEMA; None: no trace read
    kineto_at_first: tuple[TracedSide, ...] = ()  # where the first finding's group stood in the traces
    kineto_unread: tuple[tuple[str, str], ...] = ()  # traces that could not be read (path, reason)

    @property
    def partial(self) -> bool:
        """Whether some ranks' dumps are missing or could not be read."""
        return bool(self.unread or self.missing_ranks)


def _longest_collective_s(entries: pl.DataFrame) -> float | None:
    """The longest collective the dumps measured: `duration_ms`, else discovered completion - start."""
    measured = entries.select(
        pl.coalesce(
            pl.col("duration_ms") / 1e3,
            (pl.col("completed_ns") - pl.col("started_ns")) / NS_PER_S,
        ).max()
    ).item()
    return float(measured) if measured is not None else None


def _ordered(findings: Sequence[HangFinding]) -> tuple[HangFinding, ...]:
    """Divergences before unsure ones; each earliest first (the collective's creation), then by rule."""
    return tuple(
        sorted(
            findings,
            key=lambda f: (
                f.status != "divergence",
                f.created_ns if f.created_ns is not None else 2**63,
                RULE_BY_KIND[f.kind].precedence,
                f.group,
            ),
        )
    )


def _headline(
    findings: Sequence[HangFinding], chains: Sequence[str], table: pl.DataFrame, partial: str
) -> str:
    if not findings:
        groups, ranks = table["group"].n_unique(), table["rank"].n_unique()
        return (
            f"HANG: the ranks agree: {ranks} rank(s) in {groups} group(s) are within one young collective of "
            f"each other{partial}."
        )
    first = findings[0]
    chain = next((c for c in chains if f"rank {first.ranks_apart[0]}" in c), "") if first.ranks_apart else ""
    label = "DIVERGED" if first.status == "divergence" else "UNSURE"
    more = f" ({len(findings) - 1} more finding(s) below)" if len(findings) > 1 else ""
    return f"HANG {label}: {first.sentence}{'; ' + chain if chain else ''}{more}{partial}."


def _missing(table: pl.DataFrame, unread: Sequence[UnreadDump]) -> tuple[int, ...]:
    unread_ranks = {dump.rank for dump in unread}
    without = table.filter(~pl.col("has_dump"))["rank"].unique().sort().to_list()
    return tuple(rank for rank in without if rank not in unread_ranks)


def _partial_text(missing: Sequence[int], unread: Sequence[UnreadDump]) -> str:
    parts = []
    if missing:
        parts.append(f"no dump for rank {', '.join(map(str, missing[:16]))}")
    if unread:
        parts.append(f"{len(unread)} file(s) not read, named below")
    return f" [{'; '.join(parts)}]" if parts else ""


def analyze_hang(
    dumps: Sequence[FlightRecorderDump],
    unread: Sequence[UnreadDump] = (),
    nccl_logs: Sequence[NcclLog] = (),
    nccl_logs_unread: Sequence[tuple[str, str]] = (),
    kineto_traces: Sequence[str] | None = None,
    traced: tuple[pl.DataFrame, tuple[tuple[str, str], ...]] | None = None,
) -> HangAnalysis:
    """The job's dumps read together (module docstring); `traced`: the traces' last calls and the traces not
    read (`traces.read_traces`), when traces were found."""
    entries = all_entries(dumps)
    table = positions(dumps, entries)
    longest = _longest_collective_s(entries)
    limit = in_flight_limit_s(longest)
    found = [
        *membership_findings(group_members(dumps)),
        *mismatch_findings(entries),
        *wait_findings(table, limit),
        *p2p_findings(entries, dump_times(dumps, entries), limit),
    ]
    findings = _ordered(found)
    chains = wait_chains(findings, entries)
    missing = _missing(table, unread)
    statuses = {f.status for f in findings}
    verdict = "divergence" if "divergence" in statuses else "unsure" if statuses else "agree"
    return HangAnalysis(
        dumps=tuple((d.rank, d.path, d.version, d.dumped_from) for d in sorted(dumps, key=lambda d: d.rank)),
        unread=tuple(unread),
        missing_ranks=missing,
        positions=table,
        findings=findings,
        chains=chains,
        in_flight_limit_s=limit,
        diverged_limit_s=DIVERGED_FACTOR * limit,
        longest_collective_s=longest,
        verdict=verdict,
        headline=_headline(findings, chains, table, _partial_text(missing, unread)),
        nccl_problems=_nccl_problems(nccl_logs),
        nccl_logs_unread=tuple(nccl_logs_unread),
        kineto_traces=None if kineto_traces is None else tuple(kineto_traces),
        **_joined_traces(traced, findings, table),
    )


def _joined_traces(
    traced: tuple[pl.DataFrame, tuple[tuple[str, str], ...]] | None,
    findings: Sequence[HangFinding],
    table: pl.DataFrame,
) -> dict[str, Any]:
    """The traces' fields of `HangAnalysis`: their last calls, where the first finding's group stood in them,
    the traces not read."""
    if traced is None:
        return {}
    last, unread = traced
    if last.is_empty() and unread:
        return {"kineto_unread": unread}
    at_first: tuple[TracedSide, ...] = ()
    if findings:
        members = table.filter(pl.col("group") == findings[0].group)["rank"].to_list()
        at_first = traced_at(findings[0], members, last)
    return {"kineto_last_calls": last, "kineto_at_first": at_first, "kineto_unread": unread}


def _nccl_problems(logs: Sequence[NcclLog]) -> pl.DataFrame:
    """The failures of the NCCL logs given (init failures, errors, timeouts, aborts), over their jobs."""
    from traceview.nccl.jobs import nccl_jobs
    from traceview.nccl.problems import PROBLEM_SCHEMA

    frames = [job.problems for job in nccl_jobs(logs)] if logs else []
    return pl.concat(frames) if frames else pl.DataFrame(schema=PROBLEM_SCHEMA)
