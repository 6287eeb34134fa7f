"""The kernels analysis on the real traces, against second readings of the same JSON (plain `json`/`gzip`
passes with their own name lists) and against HolisticTraceAnalysis's kernel breakdown.

- Top kernels: count and total per kernel name, every device event of the trace, summed by a plain pass; the
  class of each top kernel against the test's own name lists (`OWN_CLASSES`).
- The split into computation, communication and memory against HTA (`benchmarks/hta_kernels_crosscheck.py`).
- The operator of each kernel: a plain pass on two traces (the innermost operator containing the launch).
- The slow rank's excess: each kernel's per-step time re-summed from the raw kernel rows in the step windows.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.shared_data import REAL_KINETO, requires_shared
from traceview.events.kernel_keys import kernel_keys
from traceview.kernels.analysis import KernelAnalysis
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

pytestmark = requires_shared
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
DEVICE_CATEGORIES = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events")
MEMORY_CATEGORIES = ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset")


@cache
def _analysis(folder: str) -> RunAnalysis:
    root = REAL_KINETO / folder if (REAL_KINETO / folder).is_dir() else SAMPLES / folder
    return analyze(load_run(root, workers=1))


def _events(folder: str) -> list[tuple[int, dict[str, Any]]]:
    """(rank, event) of every file of a folder, by a plain read."""
    root = REAL_KINETO / folder if (REAL_KINETO / folder).is_dir() else SAMPLES / folder
    found = []
    for path in sorted(p for p in root.glob("*.json*") if p.name != "run.json"):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
            document = json.load(handle)
        rank = document.get("distributedInfo", {}).get("rank", 0)
        found += [(rank, e) for e in document["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    return found


def _kernels(analysis: RunAnalysis) -> KernelAnalysis:
    assert analysis.kernels is not None
    return analysis.kernels


OWN_CLASSES = (
    ("communication", ("nccl",)),
    ("gemm", ("sgemm", "gemm_", "s1688gemm", "gemv")),
    ("elementwise", ("elementwise_kernel",)),
    ("reduction", ("reduce_kernel",)),
)
"""The test's own name lists: a name starting with the first word, or containing one of the others."""


def _own_class(name: str, category: str) -> str | None:
    if category in MEMORY_CATEGORIES:
        return "memory"
    for cls, words in OWN_CLASSES:
        if name.startswith(words[0]) or any(w in name for w in words[1:]):
            return cls
    return None


@pytest.mark.parametrize("folder", ["hta_df_index_resolver", "hta_16rank_job_rank0"])
def test_top_kernel_totals_against_a_plain_pass(folder: str) -> None:
    counts: dict[str, int] = defaultdict(int)
    totals: dict[str, float] = defaultdict(float)
    categories: dict[str, str] = {}
    for _, event in _events(folder):
        if event.get("cat") in DEVICE_CATEGORIES and "dur" in event:
            counts[event["name"]] += 1
            totals[event["name"]] += event["dur"]
            categories[event["name"]] = event["cat"]
    top = _kernels(_analysis(folder)).parts.top_kernels
    expected = sorted(totals, key=lambda n: (-totals[n], n))[: top.height]
    assert set(top.get_column("name").to_list()) == set(expected)
    for row in top.iter_rows(named=True):
        name = row["name"]
        assert row["count"] == counts[name]
        assert row["total_us"] == pytest.approx(totals[name], rel=1e-9, abs=1e-3)
        own = _own_class(name, categories[name])
        tool = "memory" if row["kernel_class"].startswith(("memcpy", "memset")) else row["kernel_class"]
        assert own is None or own == tool, (name, tool)


def _load_script(name: str) -> Any:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("folder", ["hta_df_index_resolver", "hta_16rank_job_rank0"])
def test_computation_communication_memory_split_matches_hta(folder: str) -> None:
    if importlib.util.find_spec("hta") is None:
        if os.environ.get("CI") == "true":
            raise ImportError(
                "HolisticTraceAnalysis is not installed: .ci/run installs it for this cross-check"
            )
        pytest.skip("HolisticTraceAnalysis (hta) is not installed")
    crosscheck = _load_script("hta_kernels_crosscheck")
    splits = crosscheck.compare(REAL_KINETO / folder)
    assert {s.event_class for s in splits} == {"compute", "comm", "memory"}
    for split in splits:
        assert split.hta_us > 0
        assert abs(split.relative) <= crosscheck.TOLERANCE, split


def _innermost_operator_kernels(folder: str) -> dict[tuple[int, str], int]:
    """Per (rank, operator name): the device events whose launching call it is the innermost operator around,
    by a
    plain pass (operators and calls of one thread sorted by start; a stack of the open operators)."""
    events = _events(folder)
    device = defaultdict(int)  # (rank, correlation): device events (ids repeat across ranks)
    for rank, e in events:
        if e.get("cat") in DEVICE_CATEGORIES and "correlation" in e.get("args", {}):
            device[(rank, e["args"]["correlation"])] += 1
    items = defaultdict(list)
    seen: set[tuple[int, int]] = set()
    for rank, e in events:
        args = e.get("args", {})
        call = e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in args
        if e.get("cat") == "cpu_op":
            items[(rank, e["pid"], e["tid"])].append((e["ts"], -e["dur"], 0, rank, e))
        elif call and (rank, args["correlation"]) not in seen:
            seen.add((rank, args["correlation"]))
            items[(rank, e["pid"], e["tid"])].append((e["ts"], -e["dur"], 1, rank, e))
    found: dict[tuple[int, str], int] = defaultdict(int)
    for thread in items.values():
        stack: list[dict[str, Any]] = []
        for ts, _, is_call, rank, e in sorted(thread, key=lambda item: item[:3]):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < ts + (e["dur"] if is_call else 0):
                stack.pop()
            if is_call:
                if stack and stack[-1]["ts"] <= ts and ts + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"]:
                    found[(rank, stack[-1]["name"])] += device.get((rank, e["args"]["correlation"]), 0)
            else:
                stack.append(e)
    return found


@pytest.mark.parametrize("folder", ["h200_pt211_nccl_fsdp1", "hta_sampled_2rank"])
def test_operators_get_the_kernels_a_plain_pass_gives_them(folder: str) -> None:
    expected = _innermost_operator_kernels(folder)
    operators = _kernels(_analysis(folder)).parts.operators  # each rank's top operators
    assert operators.height > 5
    for row in operators.iter_rows(named=True):
        assert row["kernels"] == expected[(row["rank"], row["operator"])], row


REAL_FOLDERS = sorted(p.name for p in REAL_KINETO.iterdir() if p.is_dir()) if REAL_KINETO.is_dir() else []


@pytest.mark.parametrize("folder", REAL_FOLDERS)
def test_every_real_trace_states_its_linked_share(folder: str) -> None:
    analysis = _analysis(folder)
    kernels = _kernels(analysis)
    ranks = kernels.parts.ranks
    device_events = int(ranks.get_column("device_events").sum()) if ranks.height else 0
    if device_events == 0 or int(ranks.get_column("kernels").sum()) == 0:
        assert kernels.linked_share is None
        return
    assert kernels.linked_share is not None
    assert 0.0 <= kernels.linked_share <= 1.0
    document = _kernels_json(analysis)
    assert document["linked_share"] == pytest.approx(kernels.linked_share)
    assert [row["linked_share"] for row in document["ranks"]] == ranks.get_column("linked_share").to_list()


def _kernels_json(analysis: RunAnalysis) -> dict[str, Any]:
    from traceview.reports.json.summary import summary_document

    found: dict[str, Any] = summary_document(analysis)["kernels"]
    return found


def _raw_step_sums(folder: str, windows: pl.DataFrame) -> dict[tuple[int, str], tuple[float, float]]:
    """Per (rank, kernel key): kernels per step and summed duration per step, from the raw rows of compute
    kernels (not `nccl*`, category kernel) cut to the rank's step windows (start and end clipped)."""
    bounds: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for row in windows.iter_rows(named=True):
        bounds[row["rank"]].append((row["window_start_us"], row["window_end_us"]))
    names = {e["name"] for _, e in _events(folder) if e.get("cat") == "kernel"}
    keys = dict(kernel_keys(pl.Series(sorted(names))).iter_rows())
    sums: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for rank, e in _events(folder):
        if e.get("cat") != "kernel" or e["name"].startswith("nccl"):
            continue
        for start, end in bounds[rank]:
            cut = min(end, e["ts"] + e["dur"]) - max(start, e["ts"])
            if cut > 0:
                sums[(rank, keys[e["name"]])][0] += 1
                sums[(rank, keys[e["name"]])][1] += cut
    steps = {rank: len(b) for rank, b in bounds.items()}
    return {(r, k): (v[0] / steps[r], v[1] / steps[r]) for (r, k), v in sums.items()}


@pytest.mark.parametrize(
    ("folder", "rank", "remainder_max"), [("dp8_straggler", 5, 0.05), ("hta_sampled_2rank", None, None)]
)
def test_the_slow_rank_excess_resums_from_the_raw_kernel_rows(
    folder: str, rank: int | None, remainder_max: float | None
) -> None:
    analysis = _analysis(folder)
    kernels = _kernels(analysis)
    comp = analysis.budget.per_step.group_by("rank").agg(pl.col("comp_us").mean()).sort("comp_us")
    slow = rank if rank is not None else int(comp.item(comp.height - 1, "rank"))
    found = kernels.explain(slow)
    assert found is not None
    windows = analysis.budget.per_step.select("rank", "window_start_us", "window_end_us")
    raw = _raw_step_sums(folder, windows)
    for row in found.by_kernel.iter_rows(named=True):
        count, time_us = raw.get((found.rank, row["key"]), (0.0, 0.0))
        ref_count, ref_us = raw.get((found.reference_rank, row["key"]), (0.0, 0.0))
        assert row["count"] == pytest.approx(count)
        assert row["time_us"] == pytest.approx(time_us, rel=1e-6, abs=1e-3)
        assert row["reference_count"] == pytest.approx(ref_count)
        assert row["reference_us"] == pytest.approx(ref_us, rel=1e-6, abs=1e-3)
        assert row["delta_us"] == pytest.approx(time_us - ref_us, rel=1e-6, abs=1e-3)
        assert row["slower_us"] + row["more_work_us"] == pytest.approx(row["delta_us"], rel=1e-6, abs=1e-3)
    by_class = found.by_class.get_column("delta_us").sum()
    assert by_class == pytest.approx(found.excess_us, rel=1e-9, abs=1e-6)
    kernels_sum = found.by_kernel.get_column("delta_us").sum()
    assert kernels_sum + found.remainder_us == pytest.approx(found.excess_us, rel=1e-9, abs=1e-6)
    mean_comp = dict(comp.iter_rows())
    assert found.excess_us == pytest.approx(mean_comp[found.rank] - mean_comp[found.reference_rank], rel=1e-6)
    if remainder_max is not None:
        assert abs(found.remainder_us) < remainder_max * abs(found.excess_us)
        assert found.excess_us > 0
        assert all(
            row["cause"] in ("same work, slower", "unchanged")
            for row in found.by_kernel.iter_rows(named=True)
        )


def test_the_straggler_sample_names_its_slow_gemms() -> None:
    kernels = _kernels(_analysis("dp8_straggler"))
    assert [s.rank for s in kernels.slow_ranks] == [5]
    sentence = kernels.slow_ranks[0].sentence
    assert sentence.startswith("Rank 5 computes")
    assert "gemm" in sentence
    assert "the same work ran slower" in sentence


def test_the_h200_roofline_places_gemm_compute_bound_and_elementwise_memory_bound() -> None:
    kernels = _kernels(_analysis("h200_pt211_nccl_fsdp1"))
    assert kernels.device.spec is not None
    assert kernels.device.spec.key == "h200_sxm"
    rows = {(r["op_class"], r["dtype"]): r for r in kernels.roofline.iter_rows(named=True)}
    gemm = rows[("gemm", "bf16")]
    # ridge point of the H200 in bf16: 989.5e12 / 4.8e12 = 206 FLOP/byte; a 4096x1024x3072 GEMM is far above
    assert gemm["ridge"] == pytest.approx(989.5e12 / 4.8e12)
    assert gemm["bound"] == "compute"
    assert 0.0 < gemm["peak_fraction"] <= 1.0
    elementwise = rows[("elementwise", "bf16")]
    assert elementwise["bound"] == "memory"
    assert 0.0 < elementwise["attainable_fraction"] <= 1.0
    integers = rows[("elementwise", "int64")]  # the H200 has no int64 peak in the hardware table
    assert integers["bound"] is None
    assert integers["attainable_flops"] is None
    assert integers["attainable_fraction"] is None
    floats = kernels.roofline.select(pl.selectors.float())
    assert not any(floats.select(pl.all().is_nan().any()).row(0))
