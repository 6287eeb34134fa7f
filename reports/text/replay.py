"""The terminal's replay table (docs/metrics.md, "Replay"): `as_recorded`'s error, then one row per lever.
Renders, never computes."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from traceview.reports.text.safe import safe

from traceview.core.durations import duration_cell
from traceview.replay.analysis import Replay


def _ms(value: object) -> str:
    return duration_cell(value)


def _ratio(value: object) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.3g}"


def render_replay(found: Replay | None, console: Console) -> None:
    """The sentence and the levers (step, gamma, saved per median step; the notes they rest on)."""
    if found is None:
        console.print("No replay: no collective was matched on two ranks or more.")
        return
    console.print(safe(found.sentence))
    table = Table(title="Levers (median over (rank, step); saved against as_recorded)", title_justify="left")
    for header in ("lever", "step (ms)", "gamma", "saved (ms)", "rests on"):
        table.add_column(header)
    for row in found.levers.iter_rows(named=True):
        table.add_row(
            safe(row["lever"]),
            _ms(row["step_us"]),
            _ratio(row["gamma"]),
            _ms(row["saved_us"]),
            safe(row["notes"]),
        )
    console.print(table)
