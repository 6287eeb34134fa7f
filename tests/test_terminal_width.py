"""The terminal at any width: at 80 columns the tables drop their least important columns first and say how
many (`N column(s) hidden (--wide, --json)`), no line past 80 cells; at 200 columns, or with `--wide`, every
column shows (`COLUMNS` sets the width of a piped output, as a terminal's does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from traceview.reports.text.fit import fitted

from tests.shared_data import REAL_NCCL_LOGS, requires_shared

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
    assert "column(s) hidden" not in wide
    if command == "summary":
        assert "column(s) hidden" not in _run(command, columns=200)
        assert "overlap ratio" in wide


TABLE_EDGES = "┏┃┡│└├┣"
CLOSING = "┓┃┩│┘┤┫"


def table_problems(text: str, width: int) -> list[str]:
    """Table lines that break the fit: wider than `width` cells, cropped (no closing border), or holding a
    cell cut to `8…` (outside the first column, where a kernel name may end as the project cuts it)."""
    found = []
    for line in text.splitlines():
        if line[:1] not in TABLE_EDGES:
            continue
        cells = [cell.strip() for cell in line.strip("│┃").split("│" if "│" in line else "┃")]
        if cell_len(line) > width or line[-1:] not in CLOSING or any("…" in c for c in cells[1:]):
            found.append(line)
    return found


def _command(*args: str, columns: int, cwd: Path | None = None, codes: tuple[int, ...] = (0,)) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "traceview", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
        check=False,
    )
    assert done.returncode in codes, done.stderr
    return done.stdout


def _at_every_width(*args: str, cwd: Path | None = None, codes: tuple[int, ...] = (0,)) -> dict[str, str]:
    """The command's output at 80 and 200 columns, and at 80 with `--wide`."""
    return {
        "80": _command(*args, columns=80, cwd=cwd, codes=codes),
        "200": _command(*args, columns=200, cwd=cwd, codes=codes),
        "wide": _command(*args, "--wide", columns=80, cwd=cwd, codes=codes),
    }


def _check_widths(outputs: dict[str, str], hides_at_80: bool) -> None:
    narrow = outputs["80"]
    assert any(line[:1] in TABLE_EDGES for line in narrow.splitlines()), narrow
    assert table_problems(narrow, 80) == []
    assert ("column(s) hidden (--wide, --json)" in narrow) == hides_at_80
    assert table_problems(outputs["200"], 200) == []
    assert "column(s) hidden" not in outputs["wide"]


def test_kernels_tables_fit_80_and_200_columns() -> None:
    outputs = _at_every_width("kernels", str(SAMPLE), "-q")
    _check_widths(outputs, hides_at_80=True)
    assert "column(s) hidden" not in outputs["200"]
    assert "more work ms" in outputs["wide"]  # the slow rank's table, whole
    assert "more work ms" not in outputs["80"]  # hidden first at 80: the extra time and its cause stay
    assert "same work, slower" in outputs["80"]


@requires_shared
def test_nccl_tables_fit_80_and_200_columns() -> None:
    _check_widths(_at_every_width("nccl", str(REAL_NCCL_LOGS)), hides_at_80=True)


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample's summary as five nights naming no straggler, then as it is (rank 5 a new straggler)."""
    root = tmp_path_factory.mktemp("nights")
    document = json.loads(_command("summary", str(SAMPLE), "--json", "-q", columns=80))
    stable = json.loads(json.dumps(document))
    stable["across_ranks"]["stragglers"] = []
    for night in range(1, 7):
        written = stable if night < 6 else document
        written["run"]["recorded_at"] = f"2026-11-{night:02d}T02:00:00+00:00"
        written["run"]["label"] = f"night {night}"
        (root / f"night-{night}.json").write_text(json.dumps(written), encoding="utf-8")
    return root


def test_compare_trend_and_scaleup_tables_fit(nights: Path) -> None:
    compared = _at_every_width("compare", "night-5.json", "night-6.json", cwd=nights, codes=(1,))
    _check_widths(compared, hides_at_80=True)
    assert "new +" in compared["80"]  # the new straggler's cost: no percentage of a zero baseline
    trend = _at_every_width("trend", ".", cwd=nights, codes=(1,))
    _check_widths(trend, hides_at_80=True)
    assert "lateness_cost_us of rank 5" in trend["80"]
    _check_widths(_at_every_width("scaleup", "night-1.json", "night-6.json", cwd=nights), hides_at_80=False)


def test_hang_group_tables_fit(tmp_path: Path) -> None:
    """Four ranks' Flight Recorder dumps (rank 2 three all-reduces behind): the group table fits 80 columns,
    its sizes and dtypes hidden first, the sequence numbers and the op kept."""
    from tests.flight_recorder_factory import RankDump, steady, write_dumps

    ops = steady(range(4), 5)
    ops[2] = ops[2][:3]
    write_dumps(tmp_path / "dumps", [RankDump(rank, ops[rank]) for rank in range(4)])
    outputs = _at_every_width("hang", str(tmp_path / "dumps"))
    _check_widths(outputs, hides_at_80=True)
    assert "completed" in outputs["80"]
    assert "dtypes" in outputs["wide"]
    assert "dtypes" not in outputs["80"]
