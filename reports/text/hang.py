"""Terminal output of `traceview hang` (rich): the first line, the findings, the chains of waits, one table
per process group, then what was not read and the NCCL logs' failures. Renders only: every figure comes
from `traceview.flight_recorder.analysis.HangAnalysis`; text from the dumps is made printable and
markup-escaped."""

from __future__ import annotations

import polars as pl
from rich.console import Console
from rich.table import Table
from traceview.reports.text.fit import print_table
from traceview.reports.text.safe import safe

from traceview.core.sanitize import printable
from traceview.flight_recorder.analysis import HangAnalysis

MAX_GROUP_ROWS = 32
"""Ranks shown per group table (the JSON has them all)."""
_COLUMNS = {
    "rank": "rank",
    "has_dump": "dump",
    "last_enqueued": "enqueued",
    "last_started": "started",
    "last_completed": "completed",
    "op": "op of the last",
    "input_sizes": "sizes",
    "input_dtypes": "dtypes",
    "waited_s": "waited (s)",
}
DROP_FIRST = ("dtypes", "sizes", "dump", "started")
"""The columns hidden first on a narrow terminal: the sequence numbers enqueued and completed, the op and the
wait stay longest."""
TEXT_COLUMNS = ("op of the last", "sizes", "dtypes")
"""Columns of text from the dumps: they wrap within the room the figures leave (`reports/text/fit.py`)."""
_STATUS_STYLE = {"divergence": "bold red", "unsure": "yellow"}


def _cell(name: str, value: object) -> str:
    if value is None:
        return "-"
    if name == "has_dump":
        return "yes" if value else "[bold red]none[/bold red]"
    if name == "waited_s" and isinstance(value, float):
        return f"{value:.3f}"
    if name in ("last_enqueued", "last_started", "last_completed") and value == 0:
        return "-"
    return safe(value)


def _group_table(group: str, rows: pl.DataFrame) -> Table:
    desc = rows["group_desc"].drop_nulls().first() or ""
    table = Table(title=f"group {safe(group)} {safe(desc)}".rstrip(), title_justify="left")
    for header in _COLUMNS.values():
        table.add_column(header)
    for row in rows.head(MAX_GROUP_ROWS).iter_rows(named=True):
        table.add_row(*(_cell(name, row[name]) for name in _COLUMNS))
    if rows.height > MAX_GROUP_ROWS:
        table.caption = f"{rows.height - MAX_GROUP_ROWS} more ranks not shown (--json lists them all)"
    return table


def _findings(analysis: HangAnalysis, console: Console) -> None:
    for finding in analysis.findings:
        style = _STATUS_STYLE.get(finding.status, "")
        console.print(f"  [{style}]{safe(finding.status)}[/{style}]: {safe(finding.sentence, 600)}")
        if finding.stack:
            console.print(f"      stack: {safe(finding.stack, 400)}")
    for chain in analysis.chains:
        console.print(f"  chain: {safe(chain, 600)}")


def _inputs(analysis: HangAnalysis, console: Console) -> None:
    for unread in analysis.unread:
        console.print(f"  [yellow]unreadable:[/yellow] {safe(unread.path)}: {safe(unread.reason)}")
    if analysis.missing_ranks:
        ranks = ", ".join(map(str, analysis.missing_ranks))
        console.print(f"  [yellow]no dump:[/yellow] rank {safe(ranks)} (a member of a group, no file named)")
    sources = {source for *_, source in analysis.dumps}
    if "file" in sources:
        console.print("  dump times: the files' modification times (the dumps state none)")
    if analysis.kineto_traces is not None:
        traces = len(analysis.kineto_traces)
        said = (
            f"{traces} beside the dumps"
            if traces
            else "none written (a hung job rarely flushes its profiler)"
        )
        console.print(f"  Kineto traces: {said}")
    _traced(analysis, console)


def _traced(analysis: HangAnalysis, console: Console) -> None:
    if analysis.kineto_at_first:
        first = analysis.findings[0]
        console.print(f"  where the traces stopped, group {safe(first.group)} (#{first.seq} above):")
        for side in analysis.kineto_at_first:
            console.print(f"    {safe(side.sentence, 600)}")
    for path, reason in analysis.kineto_unread:
        console.print(f"  [yellow]Kineto trace unreadable:[/yellow] {safe(path)}: {safe(reason)}")


def _nccl(analysis: HangAnalysis, console: Console) -> None:
    for row in analysis.nccl_problems.iter_rows(named=True):
        console.print(f"  NCCL {safe(row['kind'])} x{row['count']}: {safe(row['example'], 300)}")
    for path, reason in analysis.nccl_logs_unread:
        console.print(f"  [yellow]NCCL log unreadable:[/yellow] {safe(path)}: {safe(reason)}")


def render_hang(analysis: HangAnalysis, console: Console) -> None:
    """The whole `traceview hang` output (module docstring)."""
    console.print(printable(analysis.headline, 2000), markup=False, highlight=False)
    limits = (
        f"  in flight under {analysis.in_flight_limit_s:.1f} s of waiting, diverged from "
        f"{analysis.diverged_limit_s:.1f} s, unsure between (docs/metrics.md, Hang forensics)"
    )
    console.print(limits)
    _findings(analysis, console)
    for (group,), rows in analysis.positions.group_by("group", maintain_order=True):
        print_table(console, _group_table(str(group), rows), DROP_FIRST, TEXT_COLUMNS)
    _inputs(analysis, console)
    _nccl(analysis, console)
