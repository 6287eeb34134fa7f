"""The public Python API: `traceview.analyze` and `traceview.load_rank` give what the command line gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl

import traceview

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_public_names_are_exported_and_typed() -> None:
    assert set(traceview.__all__) >= {"analyze", "load_rank", "Analysis", "__version__"}
    assert callable(traceview.analyze)
    assert callable(traceview.load_rank)


def test_summary_equals_the_cli_json_document(tmp_path: Path) -> None:
    run = SAMPLES / "pp4_mismatch"
    result = traceview.analyze(run)
    printed = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(run), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cli = json.loads(printed)
    api = result.summary()
    assert api.keys() == cli.keys()
    assert api["time_budget"] == cli["time_budget"]
    assert api["verdict"] == cli["verdict"]
    assert api["across_ranks"] == cli["across_ranks"]


def test_tables_are_polars_frames_with_one_row_per_rank_step() -> None:
    result = traceview.analyze(SAMPLES / "pp4_mismatch")
    for table in (
        result.time_budget,
        result.collectives,
        result.instances,
        result.stragglers,
        result.bubbles,
    ):
        assert isinstance(table, pl.DataFrame)
    budget = result.time_budget
    # 4 ranks x 4 ProfilerSteps each (sample_traces/README.md: pp4_mismatch)
    assert budget.height == 4 * 4
    assert budget.select(pl.struct("rank", "step").n_unique()).item() == budget.height
    assert sorted(result.stragglers["rank"].to_list()) == [0, 1, 2, 3]


def test_model_inputs_are_the_command_line_options() -> None:
    result = traceview.analyze(SAMPLES / "dp8_ideal", local_batch=16_384, bandwidth="25G", alpha="2")
    assumptions = {a["name"]: a for a in result.summary()["prediction"]["assumptions"]}
    assert assumptions["b (local batch)"]["value"] == 16_384
    assert assumptions["b (local batch)"]["source"] == "command line"


def test_to_html_and_load_rank(tmp_path: Path) -> None:
    result = traceview.analyze(SAMPLES / "pp4_mismatch")
    page = result.to_html(tmp_path / "r.html", plotlyjs="cdn")
    assert 'id="verdict"' in page.read_text(encoding="utf-8")
    rank = traceview.load_rank(SAMPLES / "pp4_mismatch" / "rank-2.pt.trace.json.gz")
    assert rank.rank == 2
    assert rank.gpu.height > 0


def test_import_traceview_does_not_import_polars() -> None:
    code = "import sys, traceview; print('polars' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
