"""`traceview scaleup` in the terminal: the headline (measured against the model's predicted efficiency,
whether the model is the same), the loss by factor in absolute times, the new stragglers. Renders only."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from traceview.reports.text.fit import print_table

from traceview.compare.scaleup import Scaleup
from traceview.core.sanitize import printable


def render_scaleup(found: Scaleup, console: Console) -> None:
    """Print the post-mortem."""
    scaling = found.scaling
    console.print(found.headline, highlight=False, markup=False)
    table = Table(title="Where the step time went between the two sizes (median step)")
    for header in ("factor", "change per step", "efficiency points"):
        table.add_column(header, justify="left" if header == "factor" else "right")
    for row in scaling.factors.iter_rows(named=True):
        table.add_row(row["factor"], f"{row['delta_us'] / 1000:+.2f} ms", f"{row['efficiency_points']:+.1%}")
    print_table(console, table)
    if scaling.new_stragglers:
        listed = ", ".join(str(rank) for rank in scaling.new_stragglers)
        console.print(f"New stragglers at the larger size: rank(s) {listed}", highlight=False)
    for note in scaling.notes:
        console.print(f"note: {printable(note)}", highlight=False, markup=False)
