"""The notebook as a user runs it, executed headlessly (nbclient, a Python kernel): the verdict card with the
first recommendations, `result.recommendations` and two plots drawn inline as plotly figures. Skipped with its
reason outside CI when nbclient, nbformat or ipykernel is missing (the test extra installs them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.optional import require

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"
PLOTLY = "application/vnd.plotly.v1+json"


def _outputs(cell: Any) -> list[dict[str, Any]]:
    return [dict(output.get("data") or {}) for output in cell.get("outputs") or ()]


def test_a_notebook_shows_the_card_recommendations_and_plots(tmp_path: Path) -> None:
    require("nbclient", "nbformat", "ipykernel")
    import nbformat
    from nbclient import NotebookClient

    cells = [
        "import plotly.io as pio\npio.renderers.default = 'notebook_connected'\nimport traceview\n"
        f"result = traceview.analyze({str(SAMPLE)!r})",
        "result",
        "result.recommendations",
        "result.plot.time_budget()",
        "result.plot.stragglers()",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in cells])
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [o for c in notebook.cells for o in c.get("outputs") or () if o.get("output_type") == "error"]
    assert errors == []
    [card] = _outputs(notebook.cells[1])
    assert "traceview-card" in card["text/html"]
    assert "straggler-bound" in card["text/html"]
    assert "What to change:" in card["text/html"]
    fired = len(traceview_recommendations())
    assert fired >= 1  # the sample's straggler
    assert card["text/html"].count("<li>") == min(3, fired)  # the card shows up to three
    [frame] = _outputs(notebook.cells[2])
    assert "stake_share" in frame["text/html"]
    assert "straggler" in frame["text/html"]
    for index in (3, 4):
        shown = _outputs(notebook.cells[index])
        assert any(PLOTLY in data or "plotly" in str(data.get("text/html", "")) for data in shown), shown


def traceview_recommendations() -> tuple[object, ...]:
    """The sample's recommendations, read in this process (the notebook's kernel is another)."""
    import traceview

    return tuple(traceview.analyze(str(SAMPLE)).raw.recommendations.items)


def test_recommendations_frame_states_the_time_at_stake() -> None:
    import traceview

    result = traceview.analyze(str(SAMPLE))
    frame = result.recommendations
    assert frame.columns == ["stake_share", "rule", "sentence", "time_per_step_us"]
    assert frame.height == len(result.raw.recommendations.items)
    facts = result.raw.recommendations.facts
    step = facts["path_step_us"]  # every stake is a share of the critical path's median step
    for row in frame.iter_rows(named=True):
        assert row["time_per_step_us"] == pytest.approx(row["stake_share"] * step)
    saved = frame.get_column("time_per_step_us").to_list()
    assert saved == sorted(saved, reverse=True)  # the frame keeps the advice's order: the most saved first
    straggler = frame.filter(frame["rule"] == "straggler").row(0, named=True)
    # the straggler's time at stake is what removing its lateness saves, which the verdict names
    assert straggler["time_per_step_us"] == pytest.approx(facts["straggler_saved_us"], rel=1e-6)
