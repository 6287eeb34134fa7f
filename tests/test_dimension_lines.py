"""Dimensions per (group, collective kind) (docs/metrics.md, "Parallelism dimensions", lines): a group that
mixes DP gradient all-reduces with EP all-to-alls gets a line for each, DeepEP's and NCCL EP's kernels name
expert parallelism, a stated `--dims dp=8` names the lines DP runs without collapsing their confidence, and
plain DDP (`hta_nccl_data`, `h200_pt211_gloo_dp2`) is DP. Factory traces built from the libraries' kernel
names; the real ones against what a plain reading of the trace shows. Confidences as arithmetic over the
weights of `traceview.dimensions.evidence`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.reports.text.dimensions import dimension_lines

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, requires_shared
from tests.simulate.parallel import mesh_3d, write_planted
from traceview import api
from traceview.dimensions.evidence import LIBRARY_WEIGHT, library_rows
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn"
DEEPEP = (
    "void dpsk::ep::internode::notify_dispatch<8>(int const*, int*, int)",
    "void dpsk::ep::internode::dispatch<true, 8>(int4*, float*)",
    "void dpsk::ep::internode::cached_notify<8>(int, int*)",
    "void dpsk::ep::internode::combine<__nv_bfloat16, 8>(int4*, float*)",
)
RANKS = list(range(8))


def _comm_args(collective: str, nelems: int, ranks: list[int]) -> dict[str, Any]:
    return {
        "Collective name": collective,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "dtype": "Float",
        "Group size": len(ranks),
        "Process Group Name": "0",
        "Process Group Description": "undefined",
        "Process Group Ranks": str(ranks),
    }


def _compute(start: float) -> list[kf.Event]:
    """A step's compute on stream 7: forward 300 us, backward 600 us (900 us, 30% of it: 270 us)."""
    return [kf.kernel(GEMM, start + 10, 300), kf.kernel(GEMM, start + 320, 600)]


def _mixed_step(number: int, start: float, ranks: list[int]) -> list[kf.Event]:
    """One DLRM-like step on one stream (20): an all-to-all in the forward (after 90 us of compute) and two
    gradient all-reduces of 8 MB and 25 MB in the backward (after 580 us and 900 us of compute)."""
    return [
        kf.step(number, start, 1000),
        *_compute(start),
        kf.kernel(
            "ncclDevKernel_SendRecv(ncclDevComm*)",
            start + 100,
            20,
            stream=20,
            args=_comm_args("all_to_all", 262_144, ranks),
        ),
        kf.kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
            start + 600,
            50,
            stream=20,
            args=_comm_args("allreduce", 2_000_000, ranks),
        ),
        kf.kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
            start + 930,
            60,
            stream=20,
            args=_comm_args("allreduce", 6_250_000, ranks),
        ),
    ]


def _analysed(tmp_path: Path, events: list[kf.Event], world_size: int = 8) -> RunAnalysis:
    kf.write(kf.document(events, rank=0, world_size=world_size), tmp_path / "rank0.json")
    return analyze(load_run(str(tmp_path)))


def _lines(analysis: RunAnalysis) -> dict[tuple[str, str], dict[str, Any]]:
    assert analysis.dimensions is not None
    return {(row["group"], row["kind"]): row for row in analysis.dimensions.lines.iter_rows(named=True)}


def test_a_group_of_gradient_all_reduces_and_all_to_alls_gets_a_line_for_each(tmp_path: Path) -> None:
    events = [*_mixed_step(1, 0.0, RANKS), *_mixed_step(2, 2000.0, RANKS)]
    analysis = _analysed(tmp_path, events)
    lines = _lines(analysis)
    assert sorted(lines) == [("0", "a2a"), ("0", "ar")]
    ar, a2a = lines[("0", "ar")], lines[("0", "a2a")]
    assert ar["size_spread"] == pytest.approx(6_250_000 / 2_000_000)
    assert ar["early_share"] == 0.0
    assert a2a["early_share"] == 1.0
    # ar: mix dp 0.1, tp 0.1; late dp 0.25; gradient buckets dp 0.2; every rank dp 0.1, fsdp 0.1
    assert ar["dimension"] == "dp"
    assert ar["confidence"] == pytest.approx((0.1 + 0.25 + 0.2 + 0.1) - 0.1)
    # a2a: mix ep 0.3, cp 0.1; nothing corroborates it: unknown, best ep
    assert (a2a["dimension"], a2a["best"]) == ("unknown", "ep")
    assert a2a["confidence"] == pytest.approx(0.3 - 0.1)
    assert analysis.dimensions is not None
    group = analysis.dimensions.groups.row(0, named=True)
    assert (group["dimension"], group["line"]) == ("dp", "ar")  # 2 x (50 + 60) us against 2 x 20 us


def test_a_stated_dp_layout_names_the_all_reduces_without_collapsing_their_confidence(tmp_path: Path) -> None:
    events = [*_mixed_step(1, 0.0, RANKS), *_mixed_step(2, 2000.0, RANKS)]
    kf.write(kf.document(events, rank=0, world_size=8), tmp_path / "rank0.json")
    analysis = api.analyze(tmp_path, dims="dp=8", workers=1).raw
    lines = _lines(analysis)
    ar, a2a = lines[("0", "ar")], lines[("0", "a2a")]
    # stated 1.0 on the all-reduces (DP runs them), none on the all-to-alls (DP does not)
    assert ar["dimension"] == "dp"
    assert ar["confidence"] == pytest.approx(1.0)  # (1.0 + 0.65) - 0.1, clipped to 1
    assert a2a["best"] == "ep"
    assert a2a["confidence"] == pytest.approx(0.3 - 0.1)
    assert analysis.dimensions is not None
    assert analysis.dimensions.groups.row(0, named=True)["confidence"] == pytest.approx(1.0)


def test_deepep_kernels_name_expert_parallelism(tmp_path: Path) -> None:
    """DeepEP's dispatch/combine on stream 16 with no sizes, no group name, no rank list: the library names
    the line EP; its bytes are unknown, never zero."""
    events: list[kf.Event] = []
    for number, start in ((1, 0.0), (2, 2000.0)):
        events += [kf.step(number, start, 1000), *_compute(start)]
        events += [kf.kernel(name, start + 100 + 100 * i, 50, stream=16) for i, name in enumerate(DEEPEP)]
    analysis = _analysed(tmp_path, events)
    lines = _lines(analysis)
    (key,) = lines
    line = lines[key]
    assert line["kind"] == "a2a"
    assert line["libraries"] == ["deepep"]
    assert line["dimension"] == "ep"
    # library ep 0.6, all-to-all ep 0.3 and cp 0.1
    assert line["confidence"] == pytest.approx(min(1.0, (LIBRARY_WEIGHT + 0.3) - 0.1))
    assert line["median_bytes"] is None
    assert line["unsized_share"] == 1.0
    assert analysis.dimensions is not None
    ep = analysis.dimensions.per_dimension.filter(pl.col("dimension") == "ep").row(0, named=True)
    assert ep["calls"] == len(DEEPEP)
    assert ep["bytes"] is None
    assert ep["bus_bytes"] is None
    calls = 2 * len(DEEPEP)  # two steps
    said = f"the trace records no size for {calls} of its {calls} calls (bytes unknown, not zero)"
    assert ep["bytes_unknown"] == said
    volume = analysis.dimensions.volumes.filter(pl.col("dimension") == "ep").row(0, named=True)
    assert volume["measured_bus_bytes"] is None
    assert "no size for 8 of these calls" in volume["missing"]
    text = "\n".join(dimension_lines(analysis))
    assert "0 B" not in text
    assert "bytes unknown" in text


def test_nccl_ep_is_a_library_only_expert_parallelism_uses() -> None:
    features = pl.DataFrame(
        {"group": ["7", "8"], "kind": ["a2a", "ar"], "libraries": [["nccl_ep"], ["nccl"]]},
        schema={"group": pl.Utf8, "kind": pl.Utf8, "libraries": pl.List(pl.Utf8)},
    )
    rows = library_rows(features)
    assert rows.select("group", "line_kind", "dimension", "weight").rows() == [
        ("7", "a2a", "ep", LIBRARY_WEIGHT)
    ]


@requires_shared
def test_plain_ddp_over_nccl_is_dp() -> None:
    """`hta_nccl_data`: 15 all-reduces of 8.2 to 31.5 MB, none launched before the step's first autograd op,
    and 6 broadcasts in the forward, on `default_pg` of ranks [0, 1]."""
    analysis = analyze(load_run(REAL_KINETO / "hta_nccl_data"))
    lines = _lines(analysis)
    ar, other = lines[("0", "ar")], lines[("0", "other")]
    assert ar["calls"] == 15
    assert other["calls"] == 6
    assert ar["early_share"] == 0.0
    assert ar["dimension"] == "dp"
    assert ar["confidence"] == pytest.approx((0.1 + 0.25 + 0.2 + 0.1) - 0.1)
    assert other["dimension"] == "dp"  # the buffers' broadcasts ride with the group's gradients
    assert analysis.dimensions is not None
    assert analysis.dimensions.groups.row(0, named=True)["dimension"] == "dp"


@requires_shared
def test_plain_ddp_over_gloo_is_dp() -> None:
    """`h200_pt211_gloo_dp2`: 56 `gloo:all_reduce` host ops per rank (14 a step) on `default_pg` [0, 1]."""
    analysis = analyze(load_run(REAL_KINETO / "h200_pt211_gloo_dp2"))
    lines = _lines(analysis)
    assert list(lines) == [("0", "ar")]
    ar = lines[("0", "ar")]
    assert ar["calls"] == 2 * 56
    # mix dp 0.1, tp 0.1; gradient buckets dp 0.2; every rank dp 0.1, fsdp 0.1 (not all late: no phase rule)
    assert ar["dimension"] == "dp"
    assert ar["confidence"] == pytest.approx((0.1 + 0.2 + 0.1) - 0.1)


def _as_schema_1_10(document: dict[str, Any]) -> dict[str, Any]:
    """`document` as a 1.10 summary wrote it: without what the lines added (`dimensions.lines`, the
    evidence's `line_kind`, `unsized_calls`, `bytes_unknown`, `on_host`, the roofline's notes)."""
    old = json.loads(json.dumps(document))
    old["schema_version"] = "1.10"
    found = old["dimensions"]
    del found["lines"]
    for row in found["evidence"]:
        del row["line_kind"]
    for row in found["per_step"]:
        del row["unsized_calls"]
    for row in found["per_dimension"]:
        del row["bytes_unknown"], row["on_host"]
    for key in ("flops_doubt", "host_note"):
        (old.get("roofline") or {}).pop(key, None)
    return old


def test_compare_and_trend_pair_dimensions_with_a_1_10_summary(tmp_path: Path) -> None:
    """A summary of 1.10 (no lines) against one with lines: every named dimension's figures are paired by
    dimension, both ways, and trend reads the pair."""
    run, _ = write_planted(mesh_3d(), tmp_path / "run")
    api.analyze(run, workers=1).to_json(tmp_path / "new.json")
    new = json.loads((tmp_path / "new.json").read_text(encoding="utf-8"))
    (tmp_path / "old.json").write_text(json.dumps(_as_schema_1_10(new)), encoding="utf-8")
    named = {r["dimension"] for r in new["dimensions"]["per_dimension"]} - {"unknown"}
    assert named  # the planted 3D mesh names its dimensions
    for first, second in (("old", "new"), ("new", "old")):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "traceview",
                "compare",
                tmp_path / f"{first}.json",
                tmp_path / f"{second}.json",
                "--json",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        findings = json.loads(done.stdout)["compared"]
        paired = {f["subject"] for f in findings if f["family"] == "dimension" and f["metric"] == "comm_us"}
        assert paired == {f"dimension {d}" for d in named}
    trend = subprocess.run(
        [sys.executable, "-m", "traceview", "trend", tmp_path / "old.json", tmp_path / "new.json", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert trend.returncode == 0, trend.stderr
