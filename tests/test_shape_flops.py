"""FLOPs and bytes from operator shapes (traceview.events.shape_flops): each formula against hand arithmetic,
the profiler's `flops` preferred, bytes only with known dtypes; and a real GEMM's achieved FLOP/s against a
plain pass over the raw JSON (its `Input Dims` and its kernel's `dur`), not the tool's parsed shapes."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from typing import Any

import polars as pl
import pytest

from tests.shared_data import REAL_KINETO, requires_shared
from traceview.events.shape_flops import shape_costs

BF16, F32 = '"c10::BFloat16"', '"float"'


def _cost(name: str, dims: str, types: str, flops: float | None = None) -> dict[str, Any]:
    ops = pl.DataFrame(
        {"name": [name], "input_dims": [dims], "input_types": [types], "flops": [flops]},
        schema={"name": pl.Utf8, "input_dims": pl.Utf8, "input_types": pl.Utf8, "flops": pl.Float64},
    )
    row: dict[str, Any] = shape_costs(ops).row(0, named=True)
    return row


def test_mm_is_2mnk_and_reads_a_b_writes_c() -> None:
    row = _cost("aten::mm", "[[4096, 1024], [1024, 3072]]", f"[{BF16}, {BF16}]")
    assert row["op_class"] == "gemm"
    assert row["op_flops"] == 2 * 4096 * 3072 * 1024
    assert row["shape_bytes"] == (4096 * 1024 + 1024 * 3072 + 4096 * 3072) * 2
    assert row["op_dtype"] == "bf16"
    assert row["flops_source"] == "shapes"


def test_addmm_reads_its_bias_too() -> None:
    row = _cost(
        "aten::addmm",
        "[[1024], [4096, 1024], [1024, 1024], [], []]",
        f'[{F32}, {F32}, {F32}, "Scalar", "Scalar"]',
    )
    assert row["op_flops"] == 2 * 4096 * 1024 * 1024
    assert row["shape_bytes"] == (1024 + 4096 * 1024 + 1024 * 1024 + 4096 * 1024) * 4


def test_bmm_counts_the_batch() -> None:
    row = _cost("aten::bmm", "[[8, 512, 64], [8, 64, 512]]", f"[{BF16}, {BF16}]")
    assert row["op_flops"] == 2 * 8 * 512 * 512 * 64


def test_attention_forward_and_backward() -> None:
    q = "[8, 16, 512, 64]"
    forward = _cost(
        "aten::_cudnn_attention_forward", f"[{q}, {q}, {q}, [], []]", f'[{BF16}, {BF16}, {BF16}, "", ""]'
    )
    assert forward["op_class"] == "attention"
    assert forward["op_flops"] == 2 * 8 * 16 * 512 * 512 * (64 + 64)
    assert forward["shape_bytes"] == 4 * (8 * 16 * 512 * 64) * 2  # q, k, v read, out written
    backward = _cost(
        "aten::_cudnn_attention_backward",
        f"[{q}, {q}, {q}, {q}, {q}]",
        f"[{BF16}, {BF16}, {BF16}, {BF16}, {BF16}]",
    )
    assert backward["op_flops"] == 2 * 8 * 16 * 512 * 512 * (3 * 64 + 2 * 64)
    assert backward["shape_bytes"] == 8 * (8 * 16 * 512 * 64) * 2


def test_flash_attention_takes_batch_seq_heads_dim() -> None:
    # aten::_flash_attention_forward's q is [b, s, h, d]: b=2, s_q=1024, h=8, d=128; k and v with s_k=256
    row = _cost(
        "aten::_flash_attention_forward",
        "[[2, 1024, 8, 128], [2, 256, 8, 128], [2, 256, 8, 128]]",
        f"[{BF16}, {BF16}, {BF16}]",
    )
    assert row["op_flops"] == 2 * 2 * 8 * 1024 * 256 * (128 + 128)


def test_convolution_backward_is_two_passes_and_forward_needs_the_profiler() -> None:
    # grad_out [N=32, O=64, 56, 56], input [32, 3, 224, 224], weight [64, 3, 7, 7]
    dims = "[[32, 64, 56, 56], [32, 3, 224, 224], [64, 3, 7, 7]]"
    row = _cost("aten::convolution_backward", dims, f"[{F32}, {F32}, {F32}]")
    assert row["op_flops"] == 2 * (2 * 32 * 64 * 56 * 56 * 3 * 7 * 7)
    forward = _cost("aten::cudnn_convolution", "[[32, 3, 224, 224], [64, 3, 7, 7]]", f"[{F32}, {F32}]")
    assert forward["op_class"] == "convolution"
    assert forward["op_flops"] is None  # stride and padding are not recorded
    recorded = _cost(
        "aten::cudnn_convolution", "[[32, 3, 224, 224], [64, 3, 7, 7]]", f"[{F32}, {F32}]", 1.5e11
    )
    assert recorded["op_flops"] == 1.5e11
    assert recorded["flops_source"] == "profiler"


def test_elementwise_one_flop_per_element_and_copies_none() -> None:
    add = _cost("aten::add", "[[8, 512, 1024], [8, 512, 1024], []]", f'[{F32}, {BF16}, "Scalar"]')
    elements = 8 * 512 * 1024
    assert add["op_flops"] == elements
    assert add["shape_bytes"] == elements * 4 + elements * 2 + elements * 4
    in_place = _cost("aten::add_", "[[512, 8, 3072], [3072], []]", f'[{BF16}, {BF16}, "Scalar"]')
    assert in_place["shape_bytes"] == 3072 * 2 + 512 * 8 * 3072 * 2  # the bias read, the tensor written
    copy = _cost("aten::copy_", "[[3072], [3072], []]", f'[{BF16}, {F32}, "Scalar"]')
    assert copy["op_flops"] == 0
    assert copy["shape_bytes"] == 3072 * 4 + 3072 * 2


def test_bytes_are_null_without_every_dtype() -> None:
    row = _cost("aten::mm", "[[64, 32], [32, 16]]", '["c10::SomethingNew", "c10::SomethingNew"]')
    assert row["op_flops"] == 2 * 64 * 16 * 32
    assert row["shape_bytes"] is None


def test_unknown_operator_and_bad_shapes_give_nulls() -> None:
    assert _cost("aten::unknown_op", "[[2, 2]]", f"[{F32}]")["op_class"] is None
    bad = _cost("aten::mm", "[[64, 32], [16, 16]]", f"[{F32}, {F32}]")  # inner dimensions disagree
    assert bad["op_class"] == "gemm"
    assert bad["op_flops"] is None
    broken = _cost("aten::mm", "[[64, 32", f"[{F32}]")
    assert broken["op_flops"] is None


FSDP = REAL_KINETO / "h200_pt211_nccl_fsdp1" / "fsdp_rank0.json.gz"


def _raw_mm_instances() -> list[tuple[float, float, float]]:
    """Per innermost `aten::mm` of the raw trace: (its start, 2MNK from its raw Input Dims, the summed raw
    `dur` of the kernels launched inside it), by a plain pass: runtime calls inside the op on its thread,
    kernels by correlation; an op holding another op that holds the call does not count it."""
    with gzip.open(FSDP, "rt", encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and "dur" in e]
    calls = [
        e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    ]
    kernels = defaultdict(float)
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy"):  # its device work: a GEMM's memsets too
            kernels[e["args"]["correlation"]] += e["dur"]
    mms = [o for o in ops if o["name"] == "aten::mm"]
    by_thread = defaultdict(list)
    for o in ops:
        by_thread[o["tid"]].append(o)
    found = []
    for mm in mms:
        start, end = mm["ts"], mm["ts"] + mm["dur"]
        inner = [c for c in calls if c["tid"] == mm["tid"] and start <= c["ts"] and c["ts"] + c["dur"] <= end]
        deeper = [
            o for o in by_thread[mm["tid"]] if o is not mm and start <= o["ts"] and o["ts"] + o["dur"] <= end
        ]
        own = [
            c
            for c in inner
            if not any(o["ts"] <= c["ts"] and c["ts"] + c["dur"] <= o["ts"] + o["dur"] for o in deeper)
        ]
        duration = sum(kernels.get(c["args"]["correlation"], 0.0) for c in own)
        (m, k), (_, n) = mm["args"]["Input Dims"]
        if duration > 0:
            found.append((mm["ts"], 2.0 * m * n * k, duration))
    return found


@requires_shared
def test_real_gemm_achieved_flops_from_raw_input_dims_and_kernel_duration() -> None:
    from traceview.parsers.kineto import parse

    from traceview.budget.time_budget import classified_events
    from traceview.kernels.operators import operator_costs, with_links
    from traceview.model.trace import Run

    raw = _raw_mm_instances()
    assert len(raw) > 100
    trace = parse(FSDP)
    linked = with_links(classified_events(Run(ranks=(trace,))), trace.cpu)
    costs = operator_costs(linked, trace.cpu).filter(pl.col("name") == "aten::mm")
    ops = trace.cpu.filter(pl.col("kind") == "op").with_row_index("op_id").select("op_id", "start_us")
    tool = {
        round(start, 3): (flops, us)
        for start, flops, us in costs.join(ops, on="op_id")
        .select("start_us", "op_flops", "kernel_us")
        .iter_rows()
    }
    for ts, flops, duration in raw:
        got = tool[round(ts, 3)]  # the parser keeps `ts` as written
        assert got[0] == flops
        # the parser keeps end = ts + dur: at ts ~ 4.8e12 us a float64 holds about 1 ns, so the kernel time
        # the tool measures may differ from the raw `dur` by a few ns
        assert got[0] / (got[1] * 1e-6) == pytest.approx(flops / (duration * 1e-6), rel=1e-4)
    total_flops, total_us = sum(r[1] for r in raw), sum(r[2] for r in raw)
    achieved = total_flops / (total_us * 1e-6)
    assert 100e12 < achieved < 989.5e12  # a bf16 GEMM on an H200: below the dense peak
