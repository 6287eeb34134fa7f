"""The alpha-beta prediction: pricing by hand, the factor identity on a factory step, inputs and their
provenance, the NCCL-log hook, what-ifs, and a simulated data-parallel run built to the model's
assumptions."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from traceview.budget.time_budget import TimeBudget
from traceview.core.errors import UsageError
from traceview.load.inputs import load_run
from traceview.options.model import parse_pair, parse_quantity
from traceview.prediction.gamma import dominant_factor, per_step_table, pooled, sentence
from traceview.prediction.inputs import Link, LinkOverride, ModelInputs, ModelOptions
from traceview.prediction.pricing import price
from traceview.prediction.step_calls import step_calls
from traceview.prediction.trace_facts import gradient_allreduce
from traceview.prediction.whatif import gamma_at
from traceview.reduce.analysis import RunOptions, analyze

INTRA = Link("intra", "test NVLink", 100e9, 1e-6, "command line", "command line")
INTER = Link("inter", "test NIC", 10e9, 5e-6, "command line", "command line")


def inputs(**changes: object) -> ModelInputs:
    """Model inputs for factory frames: R = 100e12 x 0.5, 8 GPUs per node, the links above."""
    base = ModelInputs(
        device=None,
        gpu=None,
        dtype="bf16",
        peak_flops=100e12,
        efficiency=0.5,
        ranks_per_node=8,
        intra=INTRA,
        inter=INTER,
        params=None,
        local_batch=None,
        grad_group="0",
        grad_bytes_per_param=2,
        workers=2,
        flops=pl.DataFrame({"rank": [0], "step": [1], "flops": [1e12]}),
        flops_source="trace",
        assumptions=(),
        notes=(),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def calls(rows: list[tuple[str, int, int, str, float]]) -> pl.DataFrame:
    """Calls of rank 0 step 1: (collective, S, n, pg_ranks, duration us)."""
    return pl.DataFrame(
        {
            "rank": [0] * len(rows),
            "step": [1] * len(rows),
            "collective": [r[0] for r in rows],
            "size_bytes": [r[1] for r in rows],
            "group_size": [r[2] for r in rows],
            "pg_key": ["0"] * len(rows),
            "pg_ranks": [r[3] for r in rows],
            "dur_us": [r[4] for r in rows],
        },
        schema_overrides={
            "size_bytes": pl.Int64,
            "group_size": pl.Int64,
            "dur_us": pl.Float64,
            "pg_ranks": pl.Utf8,
        },
    )


def test_parse_quantities() -> None:
    assert parse_quantity("300G", "--bandwidth") == 300e9
    assert parse_quantity("312e12", "--peak-flops") == 312e12
    assert parse_pair("300G,25G", "--bandwidth") == (300e9, 25e9)
    assert parse_pair("1,5", "--alpha", 1e-6) == pytest.approx((1e-6, 5e-6))
    for bad in ("3x", "-1", "0", "1,2,3"):
        with pytest.raises(UsageError):
            parse_pair(bad, "--bandwidth")


def test_price_by_hand_inside_and_across_nodes() -> None:
    frame = price(
        calls(
            [("AllReduce", 10**9, 8, "[0, 1, 2, 3, 4, 5, 6, 7]", 1.0), ("AllReduce", 10**9, 2, "[0, 8]", 1.0)]
        ),
        inputs(),
    )
    inside, across = frame.row(0, named=True), frame.row(1, named=True)
    # ring AllReduce, n = 8: k = 2 * 7 = 14 steps of 1 us, f = 2 * 7 / 8 over 100 GB/s
    assert inside["t_pred_us"] == pytest.approx(14 * 1.0 + 2 * 7 / 8 * 1e9 / 100e9 * 1e6)
    assert not inside["spans_nodes"]
    # ranks 0 and 8 sit on two nodes of 8: the NIC, k = 2, f = 1, 10 GB/s and 5 us
    assert across["spans_nodes"]
    assert across["t_pred_us"] == pytest.approx(2 * 5.0 + 1e9 / 10e9 * 1e6)
    assert across["link"] == "test NIC"


def test_unlisted_ranks_span_nodes_by_size_and_unknown_n_is_unpriced() -> None:
    frame = price(calls([("AllGather", 1600, 16, None, 1.0), ("AllGather", 1600, None, None, 1.0)]), inputs())  # type: ignore[list-item]
    assert frame["spans_nodes"][0]
    # 16 ranks on 2 nodes of 8, hierarchical: 7 steps of 1 us inside, 1 of 5 us across; 7/8 of S over
    # 100 GB/s, then half of S over the node's 8 NICs of 10 GB/s
    assert frame["model_algorithm"][0] == "hierarchical"
    assert frame["t_pred_us"][0] == pytest.approx(
        7 * 1.0 + 5.0 + (7 / 8 * 1600 / 100e9 + 1 / 2 * 1600 / 80e9) * 1e6
    )
    assert frame["t_pred_us"][1] is None


def factory_step(transfer_us: float) -> tuple[pl.DataFrame, TimeBudget]:
    """One step: an 800 MB AllReduce (20 ms) and a 100 B Broadcast (50 us) overlapping it; T_comm 20 ms,
    T_comp 40 ms; FLOPs 1e12 at R = 5e13 give T_comp_pred 20 ms."""
    priced = price(
        calls([("AllReduce", 8 * 10**8, 2, "[0, 1]", 20000.0), ("Broadcast", 100, 2, "[0, 1]", 50.0)]),
        inputs(),
    )
    per_step = pl.DataFrame(
        {
            "rank": [0],
            "step": [1],
            "comm_us": [20000.0],
            "comp_us": [40000.0],
            "exposed_gamma": [0.5],
            "transfer_us": [transfer_us],
            "transfer_gamma": [transfer_us / 40000],
        }
    )
    return priced, TimeBudget(per_step=per_step, per_rank=pl.DataFrame(), run_median={})


def test_factors_by_hand_and_the_identity() -> None:
    priced, budget = factory_step(transfer_us=8020.0)
    row = per_step_table(priced, budget, inputs(), waiting_measured=True).row(0, named=True)
    t_allreduce = 2 * 1.0 + 8e8 / 100e9 * 1e6  # k = 2 steps of 1 us + S / B = 8002 us
    t_broadcast = 1 * 1.0 + 100 / 100e9 * 1e6  # latency-bound: 1 us + 0.001 us
    t_pred = t_allreduce + t_broadcast
    assert row["t_pred_us"] == pytest.approx(t_pred)
    assert row["comp_pred_us"] == pytest.approx(1e12 / (100e12 * 0.5) * 1e6)
    assert row["gamma"] == pytest.approx(20000 / 40000)
    assert row["gamma_pred"] == pytest.approx(t_pred / 20000)
    assert row["waiting"] == pytest.approx((20000 + 50) / 8020)
    # the AllReduce is the one bandwidth-bound call: its model time 8002 us against its 20000 us, waits
    # removed
    assert row["bandwidth_eff"] == pytest.approx(t_allreduce * (20050 / 8020) / 20000)
    assert row["latency"] == pytest.approx((20050 / 20000) / (t_pred / t_allreduce))
    assert row["compute_eff"] == pytest.approx(20000 / 40000)
    assert row["residual"] == pytest.approx(20000 / 20050)
    product = row["waiting"] * row["latency"] / row["bandwidth_eff"] * row["compute_eff"] * row["residual"]
    assert product == pytest.approx(row["gamma_ratio"], rel=1e-12)
    assert row["gamma_ratio"] == pytest.approx(0.5 / (t_pred / 20000))


def test_waiting_not_measured_is_one_and_the_identity_still_holds() -> None:
    priced, budget = factory_step(transfer_us=8020.0)
    table = per_step_table(priced, budget, inputs(), waiting_measured=False)
    run = pooled(table, waiting_measured=False)
    assert run["waiting"] == 1.0
    assert run["bandwidth_eff"] == pytest.approx((2 * 1.0 + 8e8 / 100e9 * 1e6) / 20000)
    effects = run["latency"] / run["bandwidth_eff"] * run["compute_eff"] * run["residual"]  # type: ignore[operator]
    assert effects == pytest.approx(run["gamma_ratio"])
    assert dominant_factor(run) == "bandwidth_eff"  # x2.4993, against compute x0.5
    text = sentence(run, "bandwidth_eff", waiting_measured=False)
    assert "bandwidth efficiency" in text
    assert "not measured" in text


def test_dominant_factor_is_the_largest_log_effect() -> None:
    assert (
        dominant_factor({"waiting": 3.0, "bandwidth_eff": 0.5, "compute_eff": 0.2, "latency": 1.0})
        == "compute_eff"
    )
    assert dominant_factor({"waiting": None}) is None


def test_step_calls_collapse_a_call_and_keep_calls_inside_windows() -> None:
    kernels = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "on_device": [True, True, True],
            "start_us": [10.0, 12.0, 500.0],
            "end_us": [11.0, 14.0, 503.0],
            "dur_us": [1.0, 2.0, 3.0],
            "call_name": ["nccl:all_reduce", "nccl:all_reduce", None],
            "call_start_us": [9.0, 9.0, None],
            "collective": ["AllReduce"] * 3,
            "dtype": ["float32"] * 3,
            "elem_size": [4] * 3,
            "size_bytes": [400, 400, 8],
            "group_size": [2] * 3,
            "pg_key": ["0"] * 3,
            "pg_ranks": ["[0, 1]"] * 3,
        }
    )
    windows = pl.DataFrame({"rank": [0], "step": [7], "window_start_us": [5.0], "window_end_us": [100.0]})
    found = step_calls(kernels, windows)
    assert found.height == 1  # the kernel at 500 us lies outside every window
    assert (found["step"][0], found["dur_us"][0], found["kernels"][0], found["size_bytes"][0]) == (
        7,
        1.0 + 2.0,
        2,
        400,
    )


def test_step_calls_count_a_host_op_and_its_device_copies_once() -> None:
    # gloo with device tensors: the host op [10, 50) and the copy back [40, 45) it launched are one call; the
    # staging copy [5, 8) launched before it is communication time but no call of its own.
    kernels = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "on_device": [True, False, True],
            "start_us": [5.0, 10.0, 40.0],
            "end_us": [8.0, 50.0, 45.0],
            "dur_us": [3.0, 40.0, 5.0],
            "call_name": ["c10d::allreduce_", "gloo:all_reduce", "gloo:all_reduce"],
            "call_start_us": [4.0, 10.0, 10.0],
            "collective": ["AllReduce"] * 3,
            "dtype": ["float32"] * 3,
            "elem_size": [4] * 3,
            "size_bytes": [None, 400, 400],
            "group_size": [2] * 3,
            "pg_key": ["0"] * 3,
            "pg_ranks": ["[0, 1]"] * 3,
            "comm_kind": ["copy engine", "host", "copy engine"],
            "moves_data": [True] * 3,
            "staging_copy": [True, False, False],
        }
    )
    windows = pl.DataFrame({"rank": [0], "step": [1], "window_start_us": [0.0], "window_end_us": [100.0]})
    found = step_calls(kernels, windows)
    assert found.select("dur_us", "kernels", "comm_kind", "size_bytes").rows() == [
        (50.0 - 10.0, 2, "host", 400)
    ]


def test_gradient_allreduce_takes_the_group_with_the_most_bytes() -> None:
    frame = pl.DataFrame(
        {
            "rank": [0, 0, 0, 0],
            "step": [1, 1, 2, 1],
            "collective": ["AllReduce"] * 3 + ["AllReduce"],
            "dtype": ["bfloat16", "bfloat16", "bfloat16", "int64"],
            "elem_size": [2, 2, 2, 8],
            "size_bytes": [600, 400, 1000, 10**6],
            "group_size": [4, 4, 4, 4],
            "pg_key": ["dp", "dp", "dp", "dp"],
        }
    )
    found = gradient_allreduce(frame)  # the int64 all-reduce is no gradient
    assert found["params"] == (600 + 400) / 2
    assert (found["group"], found["elem_size"], found["workers"]) == ("dp", 2, 4)


def test_group_override_from_the_nccl_log_reprices_its_calls() -> None:
    socket = Link("inter", "TCP sockets", 1.25e9, 50e-6, "nccl log", "nccl log", "NET/Socket")
    frame = price(calls([("AllReduce", 10**8, 2, "[0, 1]", 1.0)]), inputs(group_links=(("0", socket),)))
    assert frame["link"][0] == "TCP sockets"
    assert frame["t_pred_us"][0] == pytest.approx(2 * 50.0 + 1e8 / 1.25e9 * 1e6)


def test_what_if_doubling_workers_and_batch_by_hand() -> None:
    four = calls([("AllReduce", 10**8, 4, "[0, 1, 2, 3]", 1.0)])
    model = inputs(intra=replace(INTRA, alpha_s=0.0))
    now = 2 * 3 / 4 * 1e8 / 100e9 * 1e6 / 1000  # f(4) S / B over T_comp, alpha = 0
    assert gamma_at(four, model, comp_pred_us=1000.0) == pytest.approx(now)
    # 2x workers at the same global batch: n 4 -> 8 (still one node), T_comp halves
    assert gamma_at(four, model, 1000.0, workers_factor=2.0) == pytest.approx(
        now * (2 * 7 / 8) / (2 * 3 / 4) * 2
    )
    assert gamma_at(four, model, 1000.0, batch_factor=2.0) == pytest.approx(now / 2)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 workers on one node, P = 20M, b = 64, R = 100 TFLOP/s, B = 100 GB/s, alpha = 0, FLOPs recorded."""
    folder = tmp_path_factory.mktemp("dp")
    write_run(data_parallel_scenario(8, 20_000_000, 64, 100e12, 100e9, steps=3), folder)
    return folder


MODEL_OPTIONS = ModelOptions(peak_flops=100e12, efficiency=1.0, bandwidth_Bps=100e9, alpha_s=0.0)


def test_synthetic_run_measured_and_predicted_gamma_agree(synthetic: Path) -> None:
    options = RunOptions(model=replace(MODEL_OPTIONS, local_batch=64))
    found = analyze(load_run(str(synthetic), workers=1), options).prediction
    assert found is not None
    # b stated on the command line: FLOPs are 6 P b (P from the gradient all-reduce), before the trace's flops
    assert found.inputs.flops_source == "6 P b"
    closed = 2 * 7 / 8 * 2 * 100e12 / (6 * 64 * 100e9)  # seeds' closed form: 2(K-1)/K g R / (6 b B)
    assert found.run["median_gamma_pred"] == pytest.approx(closed, rel=1e-6)
    assert found.run["median_gamma"] == pytest.approx(found.run["median_gamma_pred"], rel=0.05)
    assert found.run["gamma_ratio"] == pytest.approx(1.0, rel=0.05)
    assert found.waiting_measured
    assert "agree" in found.sentence
    assert found.inputs.params == 20_000_000  # gradient bytes per step / 2 B
    assert found.what_if is not None
    assert found.what_if.closed_form_gamma == pytest.approx(closed)


def test_synthetic_run_without_flops_uses_6pb(tmp_path: Path) -> None:
    write_run(data_parallel_scenario(4, 10_000_000, 32, 50e12, 50e9, steps=2, with_flops=False), tmp_path)
    options = replace(MODEL_OPTIONS, peak_flops=50e12, bandwidth_Bps=50e9, local_batch=32)
    found = analyze(load_run(str(tmp_path), workers=1), RunOptions(model=options)).prediction
    assert found is not None
    assert found.inputs.flops_source == "6 P b"
    closed = 2 * 3 / 4 * 2 * 50e12 / (6 * 32 * 50e9)
    assert found.run["median_gamma_pred"] == pytest.approx(closed, rel=1e-6)
    assert found.run["median_gamma"] == pytest.approx(closed, rel=0.05)
    sources = {a.name: a.source for a in found.inputs.assumptions}
    assert sources["P (parameters)"] == "trace"
    assert sources["b (local batch)"] == "command line"


def test_unknown_device_is_a_note_not_a_crash(tmp_path: Path) -> None:
    scenario = replace(
        data_parallel_scenario(2, 1_000_000, 8, 10e12, 10e9, steps=1), device_name="Mystery Accelerator 9000"
    )
    write_run(scenario, tmp_path)
    found = analyze(load_run(str(tmp_path), workers=1)).prediction
    assert found is not None
    assert any("unknown device" in note and "--peak-flops" in note for note in found.inputs.notes)
    assert found.run["gamma_pred"] is None
    assert found.calls["t_pred_us"].is_null().all()
    given = ModelOptions(peak_flops=10e12, bandwidth_Bps=10e9)
    priced = analyze(load_run(str(tmp_path), workers=1), RunOptions(model=given)).prediction
    assert priced is not None
    assert priced.run["gamma_pred"] is not None
    assert math.isfinite(priced.run["gamma_pred"])


def test_scope_override_and_command_line_precedence(synthetic: Path) -> None:
    socket = LinkOverride("intra", "sockets", 1e9, 20e-6, "NET/Socket")
    run = load_run(str(synthetic), workers=1)
    from_log = analyze(run, RunOptions(model=ModelOptions(link_overrides=(socket,)))).prediction
    assert from_log is not None
    assert from_log.inputs.intra is not None
    assert (from_log.inputs.intra.bandwidth_Bps, from_log.inputs.intra.source) == (1e9, "nccl log")
    given = ModelOptions(bandwidth_Bps=5e9, link_overrides=(socket,))
    from_cli = analyze(run, RunOptions(model=given)).prediction
    assert from_cli is not None
    assert from_cli.inputs.intra is not None
    assert (from_cli.inputs.intra.bandwidth_Bps, from_cli.inputs.intra.source) == (5e9, "command line")


def test_synthetic_run_with_latency_meets_the_model_factor_by_factor(tmp_path: Path) -> None:
    write_run(data_parallel_scenario(4, 10_000_000, 32, 50e12, 50e9, steps=2, alpha_s=10e-6), tmp_path)
    options = ModelOptions(peak_flops=50e12, efficiency=1.0, bandwidth_Bps=50e9, alpha_s=10e-6)
    found = analyze(load_run(str(tmp_path), workers=1), RunOptions(model=options)).prediction
    assert found is not None
    # 4 buckets of the 2e7 gradient bytes: 2(K-1)/K g P / B + 4 x 2(K-1) alpha, over 6 P b / R
    comm_s = 2 * 3 / 4 * 2 * 10_000_000 / 50e9 + 4 * 2 * 3 * 10e-6
    comp_s = 6 * 10_000_000 * 32 / 50e12
    assert found.run["median_gamma_pred"] == pytest.approx(comm_s / comp_s, rel=1e-6)
    assert found.run["median_gamma"] == pytest.approx(comm_s / comp_s, rel=0.05)
    for column in ("waiting", "latency", "bandwidth_eff", "compute_eff", "residual"):
        assert found.run[column] == pytest.approx(1.0, rel=1e-3), column
