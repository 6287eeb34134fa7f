"""Terminal tables for one parsed NCCL_DEBUG log (rich). Renders only: figures come from
traceview.model.nccl_log.

Every string read from the log passes through `traceview.core.sanitize.printable` (control and bidi characters
shown as escapes, long text cut), then rich's markup escape."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from traceview.reports.text.fit import print_table
from traceview.reports.text.safe import safe

from traceview.model.nccl_log import NcclLog
from traceview.nccl.jobs import NcclJob
from traceview.nccl.log_views import collective_summary, communicator_summary, warning_counts

_MAX_ROWS = 20
TEXT_COLUMNS = (
    "communicator",
    "comm_key",
    "hosts",
    "transports",
    "degraded",
    "example",
    "first",
    "algo/proto",
)
"""Columns of text from the logs: they wrap within the room the figures leave (`reports/text/fit.py`)."""
DROP_FIRST = ("processes", "comms", "nodes", "channels", "algo/proto", "hosts", "choices", "dtype")
"""The columns hidden first on a narrow terminal, in this order (then from the right): the communicator, its
ranks, its init and its failures stay longest."""


def _print(console: Console, table: Table) -> None:
    print_table(console, table, DROP_FIRST, TEXT_COLUMNS)


def _safe(value: object) -> str:
    """Input-derived text as it may be printed: sanitized, then markup-escaped."""
    return safe(value)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return _safe(", ".join(str(item) for item in value)) or "-"
    return _safe(value)


def _table(
    title: str, frame: pl.DataFrame, columns: dict[str, str], *, style_column: str | None = None
) -> Table:
    table = Table(title=escape(title), title_justify="left")
    for header in columns.values():
        table.add_column(header)
    for row in frame.head(_MAX_ROWS).iter_rows(named=True):
        style = "bold red" if style_column is not None and row[style_column] else None
        table.add_row(*(_cell(row[name]) for name in columns), style=style)
    if frame.height > _MAX_ROWS:
        table.caption = f"{frame.height - _MAX_ROWS} more rows not shown"
    return table


def _header(log: NcclLog, console: Console) -> None:
    versions = ", ".join(log.versions["version"].unique(maintain_order=True).to_list()) or "not stated"
    console.print(f"[bold]NCCL log[/bold] {_safe(log.path)}")
    console.print(
        f"  NCCL version: {_safe(versions)}   network: {_safe(log.network_in_use or 'not stated')}"
        f"   lines: {log.lines_total}   NCCL records: {log.records}"
        f"   skipped (not NCCL): {log.lines_skipped}   unrecognised records: {log.records_unrecognised}"
        f"   wrapped lines joined: {log.lines_joined}"
        f"   processes: {log.processes.select('host', 'pid').n_unique()}"
    )
    capped = [
        f"{family}: {kept} of {seen} kept as rows"
        for family, kept, seen in (
            ("COLL lines", log.collective_rows_kept, log.collective_calls_seen),
            ("TUNING lines", log.tuning_rows_kept, log.tuning_lines_seen),
            ("warnings", log.warning_rows_kept, log.warnings_seen),
        )
        if kept < seen
    ]
    if capped:
        console.print(f"  {escape('; '.join(capped))} (the tables below count every record)")
    if log.settings:
        pairs = ", ".join(f"{name}={value}" for name, value in sorted(log.settings.items()))
        console.print(f"  environment: {_safe(pairs)}")
    for note in log.notes:
        console.print(f"  [yellow]warning:[/yellow] {_safe(note)}")


def _transport_table(log: NcclLog) -> Table:
    summary = (
        log.transports.group_by("kind", "via", "degraded", "degraded_reason")
        .agg(connections=pl.len())
        .sort("degraded", "connections", descending=[True, True])
    )
    columns = {"kind": "kind", "via": "via", "connections": "connections", "degraded_reason": "degraded"}
    return _table("Transports (degraded in red)", summary, columns, style_column="degraded")


def render_nccl(log: NcclLog, console: Console) -> None:
    """Print the NCCL log summary: versions, communicators, transports, collectives, warnings."""
    _header(log, console)
    comms = communicator_summary(log)
    if not comms.is_empty():
        columns = {
            "comm_group": "communicator",
            "nranks": "nranks",
            "ranks_seen": "ranks seen",
            "hosts": "hosts",
            "n_nodes": "nodes",
            "init_complete": "init complete",
            "transports": "transports",
            "channels": "channels",
        }
        _print(console, _table("Communicators", comms, columns))
    if not log.transports.is_empty():
        _print(console, _transport_table(log))
    colls = collective_summary(log)
    if not colls.is_empty():
        columns = {
            "op": "op",
            "dtype": "dtype",
            "calls": "calls",
            "bytes": "bytes (calls x S)",
            "comms": "comms",
            "processes": "processes",
        }
        _print(console, _table(f"Collectives ({log.collective_calls_seen} COLL lines)", colls, columns))
    warns = warning_counts(log)
    if not warns.is_empty():
        _print(
            console,
            _table("Warnings and errors", warns, {"kind": "kind", "count": "count", "example": "example"}),
        )


def _ranks_text(row: dict[str, Any]) -> str:
    """`7 of 8 (missing 5)`, `8 of 8`."""
    missing: list[int] = row["missing_ranks"] or []
    listed = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
    return f"{row['ranks_seen']} of {row['nranks']}" + (f" (missing {listed})" if missing else "")


def _init_text(row: dict[str, Any]) -> str:
    failed = row["init_failed"] or 0
    return f"FAILED on {failed}" if failed else f"complete on {row['init_complete'] or 0}"


def _channels_text(row: dict[str, Any]) -> str:
    rings, trees = row["ring_channels"], row["tree_channels"]
    parts = [f"{rings} ring" if rings else "", f"{trees} tree" if trees else ""]
    return ", ".join(part for part in parts if part) or "-"


def _job_communicators(job: NcclJob) -> Table:
    table = Table(title="Communicators (each merged over its ranks' logs)", title_justify="left")
    for header in (
        "communicator",
        "ranks",
        "init",
        "hosts",
        "transports",
        "channels",
        "algo/proto",
        "degraded",
    ):
        table.add_column(header)
    for row in job.communicators.head(_MAX_ROWS).iter_rows(named=True):
        failing = bool(row["init_failed"]) or bool(row["missing_ranks"])
        table.add_row(
            safe(row["comm_key"]),
            _ranks_text(row),
            _init_text(row),
            _cell(row["hosts"]),
            _cell(row["transports"]),
            _channels_text(row),
            _cell(row["algo_proto"]),
            _cell(row["degraded_reason"]),
            style="bold red" if failing else None,
        )
    if job.communicators.height > _MAX_ROWS:
        table.caption = f"{job.communicators.height - _MAX_ROWS} more communicators not shown"
    return table


def render_nccl_jobs(jobs: list[NcclJob], first_line: str, console: Console) -> None:
    """The `nccl` command: the headline (failures first), then each job: its logs, communicators merged
    over ranks, failures, collectives and warnings."""
    console.print(safe(first_line), style="bold red" if first_line.startswith("NCCL FAILED") else "bold")
    for job in jobs:
        versions = ", ".join(job.versions) or "not stated"
        console.print(
            f"[bold]Job {job.index + 1} of {len(jobs)}[/bold]: {len(job.logs)} log(s), NCCL "
            f"{safe(versions)}, "
            f"hosts {safe(', '.join(job.hosts) or 'unknown')}"
        )
        console.print(f"  logs: {safe(', '.join(job.logs), 1000)}")
        if job.communicators.height:
            _print(console, _job_communicators(job))
        if job.problems.height:
            _print(
                console,
                _table("Failures", job.problems, {"kind": "kind", "count": "count", "example": "first"}),
            )
        if job.algorithms.height:
            columns = {
                "op": "op",
                "size_bucket": "message size",
                "algo": "algo",
                "proto": "proto",
                "choices": "choices",
            }
            _print(
                console,
                _table("NCCL's algorithm and protocol choices (TUNING lines)", job.join.algorithms, columns),
            )
        if job.join.calls.height:
            columns = {
                name: name
                for name in job.join.calls.columns
                if name in ("comm_key", "op", "dtype", "calls", "bytes")
            }
            _print(console, _table("Collectives (COLL lines)", job.join.calls, columns))
