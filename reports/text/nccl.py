"""Terminal tables for one parsed NCCL_DEBUG log (rich). Renders only: figures come from traceview.model.nccl_log.

Every string read from the log passes through `traceview.core.sanitize.printable` (control and bidi characters shown
as escapes, long text cut), then rich's markup escape."""

from __future__ import annotations

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from traceview.reports.text.safe import safe

from traceview.model.nccl_log import NcclLog
from traceview.nccl.log_views import collective_summary, communicator_summary, warning_counts

_MAX_ROWS = 20


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
        console.print(_table("Communicators", comms, columns))
    if not log.transports.is_empty():
        console.print(_transport_table(log))
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
        console.print(_table(f"Collectives ({log.collective_calls_seen} COLL lines)", colls, columns))
    warns = warning_counts(log)
    if not warns.is_empty():
        console.print(
            _table("Warnings and errors", warns, {"kind": "kind", "count": "count", "example": "example"})
        )
