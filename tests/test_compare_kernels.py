"""Kernels paired across runs by their key (traceview.compare.kernel_pairs): the same kernel under another
generated suffix or tile pairs up; a kernel slower on every rank is a regression tested by the signed-rank
test over its ranks; `trend` follows the latest run's heaviest kernels. Documents are built by hand, expected
values written as arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from traceview.compare.findings import TrendSettings
from traceview.compare.kernel_pairs import kernel_findings, kernel_pairs
from traceview.compare.settings import load_settings
from traceview.compare.trend import trend
from traceview.compare.two_runs import compare

RANKS = 8


def _document(names: dict[str, tuple[str, float]], count: int = 10) -> dict[str, Any]:
    """A summary with one row per rank and kernel name: `names` maps a name to (class, mean duration)."""
    rows = [
        {
            "rank": rank,
            "name": name,
            "key": None,
            "kernel_class": cls,
            "count": count,
            "total_us": count * mean,
            "median_us": mean,
            "p99_us": mean,
            "max_us": mean,
        }
        for rank in range(RANKS)
        for name, (cls, mean) in names.items()
    ]
    for row in rows:  # keys as the tool writes them (`traceview.events.kernel_keys`), by hand here
        row["key"] = {
            "triton_poi_fused_add_0": "triton_poi_fused_add",
            "triton_poi_fused_add_3": "triton_poi_fused_add",
            "volta_sgemm_128x64_nn": "volta_sgemm_#_nn",
            "volta_sgemm_64x64_nn": "volta_sgemm_#_nn",
            "ncclKernel_AllReduce": "ncclKernel_AllReduce",
        }[row["name"]]
    return {"schema_version": "1.7", "run": {"world_size": RANKS}, "kernels": {"top_kernels": rows}}


def test_a_kernel_under_another_suffix_and_tile_pairs_up() -> None:
    base = _document(
        {"triton_poi_fused_add_0": ("elementwise", 10.0), "volta_sgemm_128x64_nn": ("gemm", 100.0)}
    )
    cand = _document(
        {"triton_poi_fused_add_3": ("elementwise", 13.0), "volta_sgemm_64x64_nn": ("gemm", 100.0)}
    )
    pairs = kernel_pairs(base, cand)
    assert pairs.height == 2 * RANKS
    found = {f.subject: f for f in kernel_findings(pairs)}
    add = found["kernel triton_poi_fused_add"]
    assert add.baseline == pytest.approx(RANKS * 10.0)
    assert add.candidate == pytest.approx(RANKS * 13.0)
    assert add.change_pct == pytest.approx((13 / 10 - 1) * 100)
    assert add.test.p_value == pytest.approx(2 / 2**RANKS)  # 8 pairs, all longer: the exact two-sided p
    gemm = found["kernel volta_sgemm_#_nn"]
    assert gemm.change_pct == pytest.approx(0.0)
    assert gemm.test.p_value == pytest.approx(1.0)


def test_communication_kernels_are_left_to_the_collective_families() -> None:
    base = _document({"ncclKernel_AllReduce": ("communication", 10.0)})
    cand = _document({"ncclKernel_AllReduce": ("communication", 20.0)})
    assert kernel_pairs(base, cand).height == 0


def test_compare_names_the_slower_kernel_as_a_regression() -> None:
    base = _document({"triton_poi_fused_add_0": ("elementwise", 10.0)})
    cand = _document({"triton_poi_fused_add_3": ("elementwise", 13.0)})
    settings, _ = load_settings()
    comparison = compare(base, cand, settings)
    regressions = [f for f in comparison.regressions if f.family == "kernel"]
    assert [f.subject for f in regressions] == ["kernel triton_poi_fused_add"]
    assert dict(regressions[0].fields)["kernel_class"] == "elementwise"


def test_trend_follows_the_latest_run_heaviest_kernels() -> None:
    history = [_document({"triton_poi_fused_add_0": ("elementwise", 10.0 + 0.1 * i)}) for i in range(4)]
    latest = _document({"triton_poi_fused_add_3": ("elementwise", 15.0)})
    named = [(f"night{i}.json", doc) for i, doc in enumerate([*history, latest])]
    found = trend(named, TrendSettings(metrics=("step_us",)))
    judged = {j.metric: j for j in found.latest}
    kernel = judged["kernel:triton_poi_fused_add"]
    assert kernel.latest == pytest.approx(15.0)
    assert kernel.history == pytest.approx(10.15)  # the median of the four runs' medians over ranks
    assert kernel.outcome == "regression"
