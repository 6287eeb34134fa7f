"""Durations as text (`traceview.core.durations`): a duration under 1 ms keeps its digits in microseconds in
the terminal tables, the HTML page and the verdict, where milliseconds with two decimals would print 0.00."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from traceview.reports.html.page import render_html
from traceview.reports.text.summary import render_summary

import traceview
from tests.kineto_factory import document, kernel, step, write
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.core.durations import duration_cell, duration_text
from traceview.reduce.analysis import RunAnalysis

TINY_US = 1.76
"""One kernel's length, as the real `hta_triton` trace's only kernel (a 1.76 us Triton kernel)."""
LONG_US = 2500.0


def test_a_duration_takes_the_unit_that_keeps_its_digits() -> None:
    assert duration_text(TINY_US) == "1.8 us"  # 1.76 to one decimal
    assert duration_text(999.94) == "999.9 us"
    assert duration_text(1000.0) == "1.00 ms"  # 1000 / 1000
    assert duration_text(LONG_US) == "2.50 ms"  # 2500 / 1000
    assert duration_text(LONG_US, decimals=3) == "2.500 ms"
    assert duration_text(-250.0) == "-250.0 us"  # a difference keeps its sign, its unit from its size
    assert duration_text(0.0) == "0.00 ms"  # nothing to keep
    assert duration_text(0.06) == "0.1 us"  # a digit in us
    assert duration_text(3e-12) == "0.00 ms"  # a difference's float residue: zero, not `0.0 us`
    assert duration_text(-3e-12) == "0.00 ms"  # nor `-0.00 ms`
    assert duration_text(float("nan")) == "nan ms"  # never shown as a number it is not
    # in a table whose title says ms: the bare number in ms, else the number with its own unit
    assert duration_cell(LONG_US) == "2.50"
    assert duration_cell(TINY_US) == "1.8 us"
    assert duration_cell(0.0) == "0.00"
    assert duration_cell(None) == "-"
    assert duration_cell(TINY_US, decimals=3) == "1.8 us"


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> RunAnalysis:
    """Rank 0 runs one kernel of `TINY_US` in its step, rank 1 one of `LONG_US`: each step is its kernel."""
    folder = tmp_path_factory.mktemp("durations")
    for rank, length in ((0, TINY_US), (1, LONG_US)):
        events = [step(1, 0.0, 10_000.0), kernel("triton_poi_fused_add_cos_sin_0", 100.0, length)]
        write(document(events, rank=rank, world_size=2, base_ns=0), folder / f"rank{rank}.json")
    return traceview.analyze(folder).raw


def _budget_rows(analysis: RunAnalysis) -> dict[str, list[str]]:
    """The terminal time-budget table's cells per rank (`rank`, `steps`, step, T_comp, ...)."""
    console = Console(record=True, width=400, color_system=None)
    render_summary(analysis, console)
    rows = [
        line.strip("│ ").split("│") for line in console.export_text().splitlines() if line.startswith("│")
    ]
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows if len(cells) > 5}


def test_the_terminal_budget_keeps_a_tiny_step(two_ranks: RunAnalysis) -> None:
    rows = _budget_rows(two_ranks)
    # steps, step, T_comp, T_comm: each step is its one kernel, all compute
    assert rows["0"][:4] == ["1", f"{TINY_US:.1f} us", f"{TINY_US:.1f} us", "0.00"]
    assert rows["1"][:4] == ["1", f"{LONG_US / 1000:.2f}", f"{LONG_US / 1000:.2f}", "0.00"]


def test_the_html_budget_keeps_a_tiny_step(two_ranks: RunAnalysis) -> None:
    page = render_html(two_ranks, plotlyjs="cdn")
    budget = re.search(r"<tr><td>0</td><td>1</td>(<td>[^<]*</td>){3}", page)
    assert budget is not None
    assert budget[0].endswith(f"<td>{TINY_US:.1f} us</td><td>{TINY_US:.1f} us</td><td>0.000</td>")
    assert f"<tr><td>1</td><td>1</td><td>{LONG_US / 1000:.3f}</td>" in page


@requires_shared
def test_the_real_triton_trace_shows_its_step_in_microseconds() -> None:
    """`hta_triton`: one Triton kernel of 1.76 us in its one step (the trace's `dur`), so the step and its
    compute read 1.8 us in the table and the verdict alike."""
    analysis = traceview.analyze(REAL_KINETO / "hta_triton" / "triton_example.json.gz").raw
    assert _budget_rows(analysis)["0"][1:3] == ["1.8 us", "1.8 us"]
    assert "1.8 us of compute" in analysis.verdict.sentence
