"""Terminal tables of the across-ranks analysis (rich). Renders only: figures come from
traceview.across_ranks.analysis."""

from __future__ import annotations

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from traceview.reports.text.fit import print_table
from traceview.reports.text.safe import safe

from traceview.across_ranks.analysis import CrossRank
from traceview.core.sanitize import printable

MAX_ROWS = 30


def _cell(value: object, scale: float = 1.0, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value / scale:.{digits}f}"
    if isinstance(value, list):
        return escape(printable(", ".join(str(item) for item in value)))
    return safe(value)


def _table(
    title: str, frame: pl.DataFrame, columns: dict[str, tuple[str, float]], flag: str | None = None
) -> Table:
    """Columns: name -> (header, divisor for floats)."""
    table = Table(title=safe(title), title_justify="left")
    for header, _ in columns.values():
        table.add_column(header)
    for row in frame.head(MAX_ROWS).iter_rows(named=True):
        style = "bold red" if flag is not None and row[flag] else None
        table.add_row(*(_cell(row[name], scale) for name, (_, scale) in columns.items()), style=style)
    if frame.height > MAX_ROWS:
        table.caption = f"{frame.height - MAX_ROWS} more rows (traceview stragglers --json lists all)"
    return table


OFFSET_COLUMNS = {
    "host": ("host", 1.0),
    "host_source": ("from", 1.0),
    "ranks": ("ranks", 1.0),
    "offset_us": ("offset ms", 1000.0),
    "spread_us": ("spread ms (IQR)", 1000.0),
    "samples": ("instances", 1.0),
    "via": ("via", 1.0),
}
RANK_COLUMNS = {
    "rank": ("rank", 1.0),
    "instances": ("instances", 1.0),
    "wait_us": ("wait ms", 1000.0),
    "wait_share": ("wait share", 1.0),
    "times_last": ("times last", 1.0),
    "median_lateness_us": ("median lateness ms", 1000.0),
    "comp_excess_us": ("T_comp excess ms", 1000.0),
    "launch_gap_excess_us": ("launch gap excess ms", 1000.0),
    "host_entry_excess_us": ("host entry late ms", 1000.0),
    "clock_uncertainty_us": ("clock ± ms", 1000.0),
    "lateness_cost_us": ("cost per step ms", 1000.0),
    "straggler": ("straggler", 1.0),
    "cause": ("cause", 1.0),
}
MISMATCH_COLUMNS = {
    "rank": ("rank", 1.0),
    "group": ("group", 1.0),
    "step": ("step", 1.0),
    "seq": ("seq", 1.0),
    "kind": ("kind", 1.0),
    "detail": ("detail", 1.0),
}


RANK_DROP_FIRST = (
    "clock ± ms",
    "host entry late ms",
    "launch gap excess ms",
    "instances",
    "wait share",
    "median lateness ms",
    "T_comp excess ms",
    "times last",
)
"""The per-rank columns hidden first on a narrow terminal: the straggler, its cost and cause stay longest."""


def render_crossrank(crossrank: CrossRank, console: Console) -> None:
    """The straggler sentence, the clock offsets, the per-rank table, mismatches and warnings."""
    console.print(f"[bold]{safe(crossrank.sentence)}[/bold]", highlight=False)
    skew = crossrank.gate_figures()["median_skew_us"]
    console.print(
        f"{crossrank.instances.height} instances matched, {crossrank.usable_instances} complete on 2+ ranks; "
        f"median arrival skew {_cell(skew, 1000.0)} ms; transfer time is a lower bound (shortest member)."
    )
    console.print(
        _table(
            f"Clock offsets against {crossrank.clocks.reference}", crossrank.clocks.offsets, OFFSET_COLUMNS
        )
    )
    table = _table("Per rank", crossrank.per_rank, RANK_COLUMNS, flag="straggler")
    print_table(console, table, RANK_DROP_FIRST)
    if crossrank.mismatches.height:
        console.print(
            _table(f"Mismatches ({crossrank.mismatches.height})", crossrank.mismatches, MISMATCH_COLUMNS)
        )
    for warning in crossrank.warnings:
        console.print(f"[yellow]warning:[/yellow] {safe(warning)}", highlight=False)
