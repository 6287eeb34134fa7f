"""Tables at any terminal width: a table wider than the console drops its least important columns first
(`drop_first`, then from the right, the first column always kept) and says `N columns hidden (--wide,
--json)`; `--wide` gives the console room for every column. Renders only."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

EDGE = 3
"""Cells a column adds beyond its text: its padding (2) and its border (1)."""


def _width(table: Table, kept: Sequence[int]) -> int:
    total = 1  # the table's closing border
    for index in kept:
        column = table.columns[index]
        cells = [cell_len(str(column.header)), *(cell_len(str(cell)) for cell in column._cells)]
        total += max(cells) + EDGE
    return total


def _hidden_order(table: Table, drop_first: Sequence[str]) -> list[int]:
    """Column indices in the order they are hidden: `drop_first` by header, then right to left."""
    headers = [str(column.header) for column in table.columns]
    named = [headers.index(name) for name in drop_first if name in headers]
    rest = [i for i in range(len(headers) - 1, 0, -1) if i not in named]
    return [*named, *rest]


def fitted(table: Table, width: int, drop_first: Sequence[str] = ()) -> tuple[Table, int]:
    """`table` with as few columns hidden as make it fit `width`, and how many were hidden."""
    kept = list(range(len(table.columns)))
    for index in _hidden_order(table, drop_first):
        if _width(table, kept) <= width or len(kept) <= 1:
            break
        kept.remove(index)
    if len(kept) == len(table.columns):
        return table, 0
    smaller = Table(title=table.title, show_lines=table.show_lines)
    for index in kept:
        column = table.columns[index]
        smaller.add_column(column.header, justify=column.justify, no_wrap=column.no_wrap)
    for row in range(table.row_count):
        smaller.add_row(*(table.columns[index]._cells[row] for index in kept))
    return smaller, len(table.columns) - len(kept)


def print_table(console: Console, table: Table, drop_first: Sequence[str] = ()) -> None:
    """Print `table` within the console's width, saying how many columns were hidden."""
    shown, hidden = fitted(table, console.width, drop_first)
    console.print(shown)
    if hidden:
        console.print(f"{hidden} column(s) hidden (--wide, --json)", highlight=False, markup=False)
