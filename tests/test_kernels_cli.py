"""`traceview kernels RUN` (terminal, --json, --rank, --step, --top), the JSON key and the report section."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli import traceview

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"


def test_terminal_tables_and_the_slow_rank() -> None:
    done = traceview("kernels", str(SAMPLE), "--quiet")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Time by kernel class, median step" in out
    assert "Rank 5 computes" in out
    assert "Top kernels over the ranks" in out
    assert "Kernels linked to operators" in out


def test_json_with_rank_step_and_top() -> None:
    done = traceview("kernels", str(SAMPLE), "--json", "--rank", "5", "--step", "3", "--top", "2", "--quiet")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [s["rank"] for s in document["slow_ranks"]] == [5]
    assert {row["rank"] for row in document["top_kernels"]} == {5}
    assert len(document["top_kernels"]) == 2
    assert {row["step"] for row in document["per_step"]} == {3}
    assert {row["rank"] for row in document["per_step"]} == {5}
    comp = sum(row["exclusive_us"] for row in document["per_step"] if row["in_comp"])
    assert comp > 0


def test_bad_rank_step_and_top_are_one_line_usage_errors() -> None:
    for args, message in (
        (("--rank", "99"), "--rank 99"),
        (("--step", "77"), "--step 77"),
        (("--top", "0"), "--top must be at least 1"),
    ):
        done = traceview("kernels", str(SAMPLE), *args, "--quiet")
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert "Traceback" not in done.stderr


def test_summary_json_and_report_carry_the_section(tmp_path: Path) -> None:
    done = traceview("summary", str(SAMPLE), "--json", "--quiet")
    document = json.loads(done.stdout)
    kernels = document["kernels"]
    assert kernels["device"]["table_row"] == "a100_sxm4_80gb"
    assert kernels["linked_share"] == 1.0
    assert "per_step" not in kernels  # compact: the per-step rows are in --full
    full = json.loads(traceview("summary", str(SAMPLE), "--json", "--full", "--quiet").stdout)["kernels"]
    assert len(full["per_step"]) > 0
    page = tmp_path / "report.html"
    assert traceview("report", str(SAMPLE), "-o", str(page), "--quiet").returncode == 0
    text = page.read_text(encoding="utf-8")
    for anchor in (
        'id="kernels"',
        'id="fig-kernel-classes"',
        'id="table-slow-rank-5"',
        'id="table-top-kernels"',
    ):
        assert anchor in text


def test_api_frames() -> None:
    import polars as pl

    import traceview

    result = traceview.analyze(SAMPLE, workers=1)
    assert isinstance(result.kernels, pl.DataFrame)
    assert result.kernels.height > 0
    assert {"rank", "name", "key", "kernel_class", "count", "total_us", "median_us", "p99_us"} <= set(
        result.kernels.columns
    )
    assert isinstance(result.operators, pl.DataFrame)
    assert "aten::mm" in result.operators.get_column("operator").to_list()
    classes = result.kernel_classes
    comp = classes.filter(pl.col("in_comp")).group_by("rank", "step").agg(pl.col("exclusive_us").sum())
    budget = result.time_budget.select("rank", "step", "comp_us")
    for row in comp.join(budget, on=["rank", "step"]).iter_rows(named=True):
        assert abs(row["exclusive_us"] - row["comp_us"]) < 1e-6
