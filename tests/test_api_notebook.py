"""The API as a notebook uses it: every bad call is a `traceview.TraceviewError` naming the argument as the
API spells it (never a TypeError, a ZeroDivisionError or a FileNotFoundError), a short repr and a verdict
card, `label`, units in column names and `to_ms`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceview

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"


@pytest.fixture(scope="module")
def result() -> traceview.Analysis:
    return traceview.analyze(SAMPLE)


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("run None", {"run": None}, r"^run: expected a trace file"),
    ("run a number", {"run": 3}, r"^run: expected"),
    ("run empty", {"run": ""}, r"^run: expected"),
    ("run an empty list", {"run": []}, r"^run: expected"),
    ("run a list of numbers", {"run": [1, 2]}, r"^run: expected"),
    ("run missing", {"run": "/nonexistent/run"}, r"/nonexistent/run: no such file"),
    ("local_batch text", {"local_batch": "abc"}, r"^local_batch takes a number, got 'abc'"),
    ("local_batch negative", {"local_batch": -1.0}, r"local_batch"),
    ("local_batch nan", {"local_batch": float("nan")}, r"local_batch"),
    ("params zero", {"params": 0}, r"params"),
    ("params bool", {"params": True}, r"^params takes a number"),
    ("workers zero", {"workers": 0}, r"^workers must be in \[1, 4096\]"),
    ("workers float", {"workers": 2.5}, r"^workers takes a whole number"),
    ("workers text", {"workers": "2"}, r"^workers takes a whole number"),
    ("gpus_per_node zero", {"gpus_per_node": 0}, r"^gpus_per_node must be in"),
    ("ranks_per_host negative", {"ranks_per_host": -4}, r"^ranks_per_host must be in"),
    ("virtual_stages bool", {"virtual_stages": True}, r"^virtual_stages takes a whole number"),
    ("executor unknown", {"executor": "spark"}, r"^executor takes one of local, ray"),
    ("ray_address number", {"ray_address": 5}, r"^ray_address takes text"),
    ("bandwidth text", {"bandwidth": "fast"}, r"bandwidth"),
    ("bandwidth negative", {"bandwidth": -1.0}, r"bandwidth"),
    ("alpha text", {"alpha": "slow"}, r"alpha"),
    ("peak_flops text", {"peak_flops": "lots"}, r"peak_flops"),
    ("efficiency above 1", {"efficiency": 2.0}, r"efficiency"),
    ("nic empty", {"nic": " "}, r"nic"),
    ("dtype number", {"dtype": 16}, r"^dtype takes text"),
    ("comm_patterns number", {"comm_patterns": 3}, r"^comm_patterns takes a list"),
    ("comm_patterns bad regex", {"comm_patterns": ["("]}, r"comm_patterns"),
    ("compute_patterns numbers", {"compute_patterns": [3]}, r"^compute_patterns takes text"),
    ("nccl_logs number", {"nccl_logs": 5}, r"^nccl_logs takes a list"),
    ("nccl_logs missing", {"nccl_logs": ["/nonexistent.log"]}, r"^nccl_logs /nonexistent\.log: no such file"),
    ("max_trace_bytes zero", {"max_trace_bytes": 0}, r"^max_trace_bytes must be in"),
    ("run_label number", {"run_label": 7}, r"^run_label takes text"),
    (
        "an unknown keyword",
        {"locl_batch": 8},
        r"^analyze: unknown argument 'locl_batch' \(did you mean local_batch\?\)",
    ),
    ("another unknown keyword", {"model_params": 8}, r"^analyze: unknown argument 'model_params'"),
]


@pytest.mark.parametrize(("case", "given", "says"), BAD_CALLS, ids=[case for case, _, _ in BAD_CALLS])
def test_a_bad_call_is_a_traceview_error_naming_the_argument(
    case: str, given: dict[str, Any], says: str
) -> None:
    arguments = {"run": SAMPLE, **given}
    with pytest.raises(traceview.TraceviewError, match=says) as raised:
        traceview.analyze(**arguments)
    assert "--" not in str(raised.value)  # never the command line's flag


def test_positional_misuse_and_the_other_functions(result: traceview.Analysis, tmp_path: Path) -> None:
    with pytest.raises(traceview.TraceviewError, match=r"^analyze: "):
        traceview.analyze(SAMPLE, 16)  # type: ignore[misc]
    with pytest.raises(traceview.TraceviewError, match=r"^analyze: "):
        traceview.analyze()  # type: ignore[call-arg]
    with pytest.raises(traceview.TraceviewError, match=r"^path: expected a path"):
        traceview.load_rank(None)  # type: ignore[arg-type]
    with pytest.raises(traceview.TraceviewError, match=r"no such file|cannot read"):
        traceview.load_rank(tmp_path / "missing.json")
    with pytest.raises(traceview.TraceviewError, match=r"^path .*: cannot write: no folder"):
        result.to_html(tmp_path / "no-such-folder" / "r.html")
    with pytest.raises(traceview.TraceviewError, match=r"^plotlyjs: takes 'inline' or 'cdn'"):
        result.to_html(tmp_path / "r.html", plotlyjs="nope")
    with pytest.raises(traceview.TraceviewError, match=r"is an input of this command"):
        result.to_json(SAMPLE / "rank-0.pt.trace.json.gz")
    with pytest.raises(traceview.TraceviewError, match=r"^to_ms: expected a polars DataFrame"):
        traceview.to_ms("not a frame")  # type: ignore[arg-type]


def test_repr_is_short_and_html_is_the_verdict_card(result: traceview.Analysis) -> None:
    text = repr(result)
    assert len(text) < 300
    assert text.startswith("<traceview.Analysis ")
    assert "8 rank(s), straggler-bound" in text
    page = result._repr_html_()
    assert "straggler-bound" in page
    assert "Rank 5 sets the pace" in page
    median_step = result.time_budget.get_column("step_us").median()
    assert f"{median_step / 1000:.3g} ms" in page  # the median step, as the budget's own median
    assert len(page) < 5000
    assert result.label == result.summary()["verdict"]["label"] == "straggler-bound"


def test_units_in_column_names_and_to_ms(result: traceview.Analysis) -> None:
    budget = result.time_budget
    assert {"step_us", "comp_us", "comm_us", "exposed_comm_us"} <= set(budget.columns)
    in_ms = traceview.to_ms(budget)
    assert "step_ms" in in_ms.columns
    assert "step_us" not in in_ms.columns
    assert in_ms.columns.index("step_ms") == budget.columns.index("step_us")
    assert in_ms.get_column("step_ms").to_list() == pytest.approx(
        (budget.get_column("step_us") / 1000).to_list()
    )
    assert in_ms.get_column("gamma").to_list() == budget.get_column("gamma").to_list()
    assert isinstance(traceview.to_ms(result.stragglers), pl.DataFrame)
