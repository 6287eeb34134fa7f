"""Tables at any terminal width: a table wider than the console drops its least important columns first
(`drop_first`, then from the right, the first column always kept) and says `N columns hidden (--wide,
--json)`; `--wide` gives the console room for every column. A `flexible` column (a kernel or operator name)
counts at `FLEX_CELLS` when the fit is measured and wraps within the room left, whole: no other cell is ever
cut to `8…`. Renders only."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.table import Column, Table

EDGE = 3
"""Cells a column adds beyond its text: its padding (2) and its border (1)."""
FLEX_CELLS = 24
"""The width a flexible column is measured at: a name wraps over lines within it rather than hide a column."""


def _natural(column: Column) -> int:
    """The widest cell of `column`, its header included (each line of a header that spans lines)."""
    texts = [str(column.header), *(str(cell) for cell in column._cells)]
    return max(cell_len(line) for text in texts for line in (text.splitlines() or [""]))


def _width(table: Table, kept: Sequence[int], flexible: Sequence[str] = ()) -> int:
    total = 1  # the table's closing border
    for index in kept:
        column = table.columns[index]
        natural = _natural(column)
        total += (min(natural, FLEX_CELLS) if str(column.header) in flexible else natural) + EDGE
    return total


def _hidden_order(table: Table, drop_first: Sequence[str]) -> list[int]:
    """Column indices in the order they are hidden: `drop_first` by header, then right to left."""
    headers = [str(column.header) for column in table.columns]
    named = [headers.index(name) for name in drop_first if name in headers]
    rest = [i for i in range(len(headers) - 1, 0, -1) if i not in named]
    return [*named, *rest]


def _rebuilt(table: Table, kept: Sequence[int], flexible: Sequence[str]) -> Table:
    """`table` with only the `kept` columns, each but the flexible ones as wide as its widest cell."""
    smaller = Table(
        title=table.title,
        caption=table.caption,
        show_lines=table.show_lines,
        title_justify=table.title_justify,
    )
    for index in kept:
        column = table.columns[index]
        flex = str(column.header) in flexible
        smaller.add_column(
            column.header,
            justify=column.justify,
            no_wrap=not flex,  # only a flexible column gives room: the others keep their widest cell
            overflow="fold" if flex else column.overflow,
            min_width=None if flex else _natural(column),
        )
    for row in range(table.row_count):
        smaller.add_row(*(table.columns[index]._cells[row] for index in kept))
    return smaller


def fitted(
    table: Table, width: int, drop_first: Sequence[str] = (), flexible: Sequence[str] = ()
) -> tuple[Table, int]:
    """`table` with as few columns hidden as make it fit `width`, and how many were hidden."""
    kept = list(range(len(table.columns)))
    for index in _hidden_order(table, drop_first):
        if _width(table, kept, flexible) <= width or len(kept) <= 1:
            break
        kept.remove(index)
    if len(kept) == len(table.columns) and _width(table, kept) <= width:
        return table, 0
    return _rebuilt(table, kept, flexible), len(table.columns) - len(kept)


def print_table(
    console: Console, table: Table, drop_first: Sequence[str] = (), flexible: Sequence[str] = ()
) -> None:
    """Print `table` within the console's width, saying how many columns were hidden."""
    shown, hidden = fitted(table, console.width, drop_first, flexible)
    console.print(shown)
    if hidden:
        console.print(f"{hidden} column(s) hidden (--wide, --json)", highlight=False, markup=False)
