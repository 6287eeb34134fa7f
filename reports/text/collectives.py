"""Terminal tables of a run's collectives (rich). Renders only: every figure comes from
`traceview.collectives.tables.CollectiveAnalysis`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl
from rich.console import Console
from rich.table import Table
from traceview.reports.text.fit import print_table
from traceview.reports.text.safe import safe

from traceview.collectives.tables import CollectiveAnalysis
from traceview.core.durations import duration_cell

MAX_ROWS = 40
_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))

Cell = Callable[[object], str]


def human_bytes(value: object) -> str:
    """Bytes in binary units (`1.50 GiB`); `-` when unknown."""
    if not isinstance(value, int | float):
        return "-"
    for size, unit in _UNITS:
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def gbps(value: object) -> str:
    """Bytes per second as GB/s (10^9, as nccl-tests prints); `-` when unknown."""
    return f"{value / 1e9:.2f}" if isinstance(value, int | float) else "-"


def ms(value: object) -> str:
    """Microseconds in a column of milliseconds (`traceview.core.durations.duration_cell`: under 1 ms with
    its unit, us); `-` when unknown."""
    return duration_cell(value, decimals=3)


def plain(value: object) -> str:
    """Any value as escaped, printable text (no control characters from the trace); `-` when unknown."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return safe(value)


def _table(title: str, frame: pl.DataFrame, columns: Mapping[str, tuple[str, Cell]]) -> Table:
    table = Table(title=safe(title), title_justify="left")
    for header, _ in columns.values():
        table.add_column(header, justify="right")
    for row in frame.head(MAX_ROWS).iter_rows(named=True):
        table.add_row(*(cell(row[name]) for name, (_, cell) in columns.items()))
    if frame.height > MAX_ROWS:
        table.caption = (
            f"{frame.height - MAX_ROWS} more rows not shown (traceview summary --json has them all)"
        )
    return table


PER_RANK_COLUMNS: Mapping[str, tuple[str, Cell]] = {
    "rank": ("rank", plain),
    "comm_kernels": ("comm kernels", plain),
    "copy_transfers": ("copy-engine transfers", plain),
    "cpu_calls": ("host ops", plain),
    "linked_share": ("linked", plain),
    "unknown_collective": ("unknown coll.", plain),
    "calls": ("calls", plain),
    "calls_unknown_size": ("calls, size unknown", plain),
    "size_bytes": ("bytes", human_bytes),
    "comm_us": ("T_comm (ms)", ms),
}
PER_GROUP_COLUMNS: Mapping[str, tuple[str, Cell]] = {
    "pg_key": ("group", plain),
    "pg_desc": ("description", plain),
    "pg_ranks": ("ranks", plain),
    "group_size": ("size", plain),
    "ranks_seen": ("ranks in run", plain),
    "collectives": ("collectives", plain),
    "calls": ("calls", plain),
    "total_us": ("kernel time (ms)", ms),
    "size_bytes": ("bytes", human_bytes),
}
PER_COLLECTIVE_COLUMNS: Mapping[str, tuple[str, Cell]] = {
    "rank": ("rank", plain),
    "pg_key": ("group", plain),
    "collective": ("collective", plain),
    "size_bucket": ("message size", plain),
    "group_size": ("n", plain),
    "calls": ("calls", plain),
    "total_us": ("total (ms)", ms),
    "median_us": ("median (ms)", ms),
    "size_bytes": ("bytes", human_bytes),
    "median_busbw_Bps": ("busbw median (GB/s)", gbps),
    "p10_busbw_Bps": ("p10", gbps),
    "p90_busbw_Bps": ("p90", gbps),
    "share_of_comm": ("share of T_comm", plain),
}


def render_collectives(collectives: CollectiveAnalysis, console: Console) -> None:
    """Print the linking summary line, then the per-rank, per-process-group and per-collective tables."""
    per_rank = collectives.per_rank
    kernels = int(per_rank.get_column("comm_kernels").sum()) if per_rank.height else 0
    cpu_calls = int(per_rank.get_column("cpu_calls").sum()) if per_rank.height else 0
    copies = int(per_rank.get_column("copy_transfers").sum()) if per_rank.height else 0
    share = "-" if collectives.linked_share is None else f"{collectives.linked_share:.1%}"
    console.print(
        f"[bold]Collectives[/bold]: {kernels} communication kernel(s), {share} linked to their call, "
        f"{collectives.unknown_comm_kernels} of unknown collective; {copies} copy-engine transfer(s); "
        f"{cpu_calls} host collective op(s) (gloo, MPI)",
        highlight=False,
    )
    if collectives.kernels.height == 0:
        return
    print_table(console, _table("Per rank", collectives.per_rank, PER_RANK_COLUMNS))
    print_table(console, _table("Per process group", collectives.per_process_group, PER_GROUP_COLUMNS))
    print_table(
        console,
        _table(
            "Per rank, process group, collective and message size",
            collectives.per_collective,
            PER_COLLECTIVE_COLUMNS,
        ),
    )
