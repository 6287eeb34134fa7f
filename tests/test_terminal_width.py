"""The terminal at any width: at 80 columns the tables drop their least important columns first and say how
many (`N column(s) hidden (--wide, --json)`), no line past 80 cells; at 200 columns, or with `--wide`, every
column shows (`COLUMNS` sets the width of a piped output, as a terminal's does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from traceview.reports.text.fit import fitted

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"


def _run(*args: str, columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "traceview", *args, str(SAMPLE), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_fitted_hides_the_named_columns_first() -> None:
    table = Table()
    for header in ("rank", "a", "b", "c"):
        table.add_column(header)
    table.add_row("0", "x" * 20, "y" * 20, "z" * 20)
    # every column: 1 + (4 + 3) + 3 * (20 + 3) = 77 cells; without one of the wide ones 54
    assert fitted(table, 77)[1] == 0
    shown, hidden = fitted(table, 60, drop_first=("b",))
    assert hidden == 1
    assert [str(c.header) for c in shown.columns] == ["rank", "a", "c"]
    console = Console(width=60, record=True)
    console.print(shown)
    assert max(cell_len(line) for line in console.export_text().splitlines()) <= 60


@pytest.mark.parametrize("command", ["summary", "stragglers", "collectives"])
def test_80_columns_hide_and_say_so_200_show_all(command: str) -> None:
    narrow = _run(command, columns=80)
    assert "column(s) hidden (--wide, --json)" in narrow
    table_lines = [line for line in narrow.splitlines() if line[:1] in "┏┃┡│└"]
    assert table_lines
    assert max(cell_len(line) for line in table_lines) <= 80
    assert "…" not in "".join(table_lines)  # columns hidden whole, never cells cut to `8…`
    wide = _run(command, "--wide", columns=80)
    assert "hidden" not in wide
    if command == "summary":
        assert "column(s) hidden" not in _run(command, columns=200)
        assert "overlap ratio" in wide
