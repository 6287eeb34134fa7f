"""The alpha-beta cost model against the seeds (section 4.1 of seeds/000_*.txt) and hand arithmetic."""

from __future__ import annotations

import math

import polars as pl
import pytest

from tests import closed_form_reference as ref
from traceview.core import costmodel as cm
from traceview.core.errors import UsageError
from traceview.core.vocab import CANONICAL_COLLECTIVES
from traceview.prediction import closed_form as cf

# The constants of the seeds' Code 4.1.1.
P_7B = 7e9
GLOBAL_BATCH = 2048
R = 312e12
B = 600e9
G_BYTES = 2.0

# Output 4.1.1 as printed in the seeds text (the data rows, verbatim).
OUTPUT_4_1_1 = """\
     1         2048        275.69             0.00     0.000
     4          512         68.92            35.00     0.508
    16          128         17.23            43.75     2.539  <- comm-bound
    64           32          4.31            45.94    10.664  <- comm-bound
   256            8          1.08            46.48    43.164  <- comm-bound
  1024            2          0.27            46.62   173.164  <- comm-bound"""

# Table 4.1.1 as printed in the seeds text: P, compute (ms), all-reduce (ms), gamma; K = 64, local batch 32.
TABLE_4_1_1 = [
    (1e8, "0.06", "0.66", "10.66"),
    (7e8, "0.43", "4.59", "10.66"),
    (7e9, "4.31", "45.94", "10.66"),
    (7e10, "43.08", "459.38", "10.66"),
]


def _book_row(k: int, local: int, tc: float, ta: float) -> str:
    """One line formatted exactly as the seeds' Code 4.1.1 prints it."""
    flag = "  <- comm-bound" if ta > tc else ""
    ratio = ta / tc
    return f"{k:>6d} {local:>12d} {tc * 1e3:>13.2f} {ta * 1e3:>16.2f} {ratio:>9.3f}{flag}"


def test_strong_scaling_sweep_prints_output_4_1_1() -> None:
    sweep = ref.strong_scaling_sweep(P_7B, GLOBAL_BATCH, R, B, G_BYTES, workers=[1, 4, 16, 64, 256, 1024])
    assert sweep.columns == ["K", "local_batch", "t_comp_s", "t_comm_s", "gamma"]
    lines = []
    for row in sweep.iter_rows(named=True):
        assert row["local_batch"] == int(row["local_batch"])
        assert row["gamma"] == pytest.approx(row["t_comm_s"] / row["t_comp_s"])
        lines.append(_book_row(row["K"], int(row["local_batch"]), row["t_comp_s"], row["t_comm_s"]))
    assert "\n".join(lines) == OUTPUT_4_1_1


def test_sweep_rows_by_hand() -> None:
    sweep = ref.strong_scaling_sweep(P_7B, GLOBAL_BATCH, R, B, G_BYTES, workers=[4, 16])
    # K = 4: b = 512, T_comp = 6 * 7e9 * 512 / 312e12, T_comm = 2 * 3/4 * 2 * 7e9 / 600e9 = 0.035 s.
    assert sweep["t_comp_s"][0] == pytest.approx(6 * 7e9 * 512 / 312e12)
    assert sweep["t_comm_s"][0] == pytest.approx(0.035)
    # gamma(16) = 2 * 15/16 * 2 * 312e12 / (6 * 128 * 600e9) = 2.5390625
    assert sweep["gamma"][1] == pytest.approx(2.5390625)


@pytest.mark.parametrize(("params", "compute_ms", "allreduce_ms", "gamma"), TABLE_4_1_1)
def test_table_4_1_1(params: float, compute_ms: str, allreduce_ms: str, gamma: str) -> None:
    tc = ref.compute_time_s(params, 32, R)
    ta = ref.allreduce_time_s(params, G_BYTES, 64, B)
    assert f"{tc * 1e3:.2f}" == compute_ms
    assert f"{ta * 1e3:.2f}" == allreduce_ms
    assert f"{ta / tc:.2f}" == gamma
    assert f"{cf.gamma_closed_form(64, G_BYTES, R, 32, B):.2f}" == gamma


def test_closed_form_by_hand() -> None:
    # 2 * 63/64 * 2 * 312e12 / (6 * 32 * 600e9) = 1.96875 * 6.24e14 / 1.152e14
    assert cf.gamma_closed_form(64, 2, 312e12, 32, 600e9) == pytest.approx(1.96875 * 6.24e14 / 1.152e14)
    assert cf.gamma_closed_form(1, 2, 312e12, 32, 600e9) == 0.0


def test_break_even_workers_exercise_4_1_1() -> None:
    # gamma(K) = (K-1) g R / (3 G B) = 1  =>  K = 1 + 3 * 2048 * 600e9 / (2 * 312e12)
    #                                          = 1 + 3.6864e15 / 6.24e14
    expected = 1 + 3.6864e15 / 6.24e14
    k = cf.break_even_workers(GLOBAL_BATCH, G_BYTES, R, B)
    assert k == pytest.approx(expected)
    assert k == pytest.approx(6.907692307692308)
    assert 4 < k < 16
    # At the break-even K the closed form with b = G / K gives gamma = 1, whatever P is.
    assert cf.gamma_closed_form(k, G_BYTES, R, GLOBAL_BATCH / k, B) == pytest.approx(1.0)


def test_latency_floor_exercise_4_1_2() -> None:
    alpha = 5e-6
    # K = 1024: latency floor 2 * 1023 * 5e-6 = 10.23 ms on top of 2 * 1023/1024 * 14e9 / 600e9 s.
    bandwidth_term = 2 * 1023 / 1024 * 14e9 / 600e9
    with_latency = ref.allreduce_time_s(P_7B, G_BYTES, 1024, B, alpha_s=alpha)
    assert with_latency == pytest.approx(bandwidth_term + 0.01023)
    assert f"{with_latency * 1e3:.2f}" == "56.85"  # 46.62 (Output 4.1.1) + 10.23
    sweep = ref.strong_scaling_sweep(P_7B, GLOBAL_BATCH, R, B, G_BYTES, workers=[1024], alpha_s=alpha)
    assert sweep["t_comm_s"][0] == pytest.approx(with_latency)
    # Latency equals bandwidth when 2(K-1) alpha = 2(K-1)/K g P / B, i.e. P = K alpha B / g = 1.536e9.
    crossover = ref.latency_crossover_params(1024, alpha, G_BYTES, B)
    assert crossover == pytest.approx(1024 * 5e-6 * 600e9 / 2)
    assert crossover == pytest.approx(1.536e9)
    at_crossover = ref.allreduce_time_s(crossover, G_BYTES, 1024, B, alpha_s=alpha)
    assert at_crossover == pytest.approx(2 * 2 * 1023 * alpha)
    # The same latency floor is collective_time_s's k(n) * alpha for a ring all-reduce.
    assert cm.collective_time_s("AllReduce", 1024, 0, alpha, B) == pytest.approx(0.01023)


BUS_FACTORS_N8 = {
    "AllReduce": 2 * 7 / 8,
    "AllGather": 7 / 8,
    "ReduceScatter": 7 / 8,
    "AllToAll": 7 / 8,
    "Broadcast": 1.0,
    "Reduce": 1.0,
    "SendRecv": 1.0,
    "Send": 1.0,
    "Recv": 1.0,
    "Barrier": 0.0,
    "Gather": 7 / 8,
    "Scatter": 7 / 8,
}

RING_STEPS_N8 = {
    "AllReduce": 14,
    "AllGather": 7,
    "ReduceScatter": 7,
    "AllToAll": 7,
    "Broadcast": 7,
    "Reduce": 7,
    "SendRecv": 1,
    "Send": 1,
    "Recv": 1,
    "Barrier": 14,
    "Gather": 7,
    "Scatter": 7,
}


@pytest.mark.parametrize(("collective", "factor"), BUS_FACTORS_N8.items())
def test_bus_factor(collective: str, factor: float) -> None:
    assert cm.bus_factor(collective, 8) == pytest.approx(factor)


@pytest.mark.parametrize(("collective", "steps"), RING_STEPS_N8.items())
def test_ring_latency_steps(collective: str, steps: int) -> None:
    assert cm.latency_steps(collective, 8) == steps


def test_tree_latency_steps() -> None:
    assert cm.latency_steps("AllReduce", 8, "tree") == 3  # log2 8 (SPEC 5)
    assert cm.latency_steps("Broadcast", 16, "tree") == 4
    assert cm.latency_steps("SendRecv", 16, "tree") == 1
    with pytest.raises(UsageError, match="no tree algorithm"):
        cm.latency_steps("AllGather", 8, "tree")


def test_names_are_case_and_underscore_tolerant() -> None:
    assert cm.bus_factor("all_reduce", 4) == 1.5
    assert cm.bus_factor("ALLREDUCE", 4) == 1.5
    assert cm.bus_factor("all_to_all", 4) == 0.75


def test_bad_collective_or_group_size() -> None:
    with pytest.raises(UsageError, match="unknown collective 'AllGatherV'"):
        cm.bus_factor("AllGatherV", 4)
    with pytest.raises(UsageError, match="group size"):
        cm.bus_factor("AllReduce", 0)


def test_collective_time_by_hand() -> None:
    # AllReduce over 8 ranks, 1 GB, alpha 1 us, B 300 GB/s: 14 * 1e-6 + 1.75 * 1e9 / 300e9
    assert cm.collective_time_s("AllReduce", 8, 1e9, 1e-6, 300e9) == pytest.approx(14e-6 + 1.75 / 300)
    # AllGather output of 64 MB over 4 ranks, tree not allowed, ring: 3 * 5e-6 + 0.75 * 64e6 / 50e9
    assert cm.collective_time_s("AllGather", 4, 64e6, 5e-6, 50e9) == pytest.approx(15e-6 + 0.75 * 64e6 / 50e9)
    # Tree all-reduce: log2(8) = 3 steps
    tree = cm.collective_time_s("AllReduce", 8, 1e9, 1e-6, 300e9, algorithm="tree")
    assert tree == pytest.approx(3e-6 + 1.75 / 300)


def _frame() -> pl.DataFrame:
    names = [*BUS_FACTORS_N8, "all_gather", "Gatherv"]
    rows = [(name, n) for name in names for n in (1, 2, 3, 8, 64)]
    return pl.DataFrame(
        {
            "collective": [name for name, _ in rows],
            "group_size": [n for _, n in rows],
            "size_bytes": [1e6 * (i + 1) for i in range(len(rows))],
        }
    )


@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_expressions_agree_with_scalars(algorithm: cm.Algorithm) -> None:
    frame = _frame().with_columns(
        bus=cm.bus_factor_expr(pl.col("collective"), pl.col("group_size")),
        steps=cm.latency_steps_expr(pl.col("collective"), pl.col("group_size"), algorithm),
        time_s=cm.collective_time_expr(
            pl.col("collective"), pl.col("group_size"), pl.col("size_bytes"), 2e-6, 100e9, algorithm=algorithm
        ),
    )
    for row in frame.iter_rows(named=True):
        args = (row["collective"], row["group_size"])
        if row["collective"] == "Gatherv":
            assert row["bus"] is None
            assert row["time_s"] is None
            continue
        assert row["bus"] == pytest.approx(cm.bus_factor(*args))
        try:
            expected = cm.collective_time_s(*args, row["size_bytes"], 2e-6, 100e9, algorithm=algorithm)
        except UsageError:
            assert row["steps"] is None
            continue
        assert row["steps"] == pytest.approx(cm.latency_steps(*args, algorithm))
        assert row["time_s"] == pytest.approx(expected)


def _dp_buckets(grad_bytes: float, bucket_bytes: float, workers: int) -> pl.DataFrame:
    """A data-parallel step's gradient all-reduce as DDP buckets: full buckets and one remainder."""
    full = int(grad_bytes // bucket_bytes)
    sizes = [float(bucket_bytes)] * full + [grad_bytes - full * bucket_bytes]
    return pl.DataFrame({"collective": "AllReduce", "group_size": workers, "size_bytes": sizes})


@pytest.mark.parametrize("workers", [2, 8, 64, 1024])
def test_closed_form_agrees_with_sum_of_collectives(workers: int) -> None:
    local_batch = 16
    grad_bytes = G_BYTES * P_7B
    buckets = _dp_buckets(grad_bytes, 25 * 2**20, workers)
    comm = sum(
        cm.collective_time_s("AllReduce", workers, size, 0.0, B) for size in buckets["size_bytes"].to_list()
    )
    comp = ref.compute_time_s(P_7B, local_batch, R)
    closed = cf.gamma_closed_form(workers, G_BYTES, R, local_batch, B)
    assert comm / comp == pytest.approx(closed, rel=1e-12)
    assert ref.gamma_sum_form(buckets, comp, 0.0, B) == pytest.approx(closed, rel=1e-12)


def test_what_if_closed_form() -> None:
    shape = ref.DataParallelShape(
        workers=16, local_batch=128, grad_bytes_per_param=2, flops_per_s=R, bandwidth_bytes_per_s=B
    )
    base = 2 * 15 / 16 * 2 * R / (6 * 128 * B)
    assert shape.gamma() == pytest.approx(base)
    # 2x workers, fixed global batch: K = 32, b = 64.
    assert ref.gamma_with_workers(shape) == pytest.approx(2 * 31 / 32 * 2 * R / (6 * 64 * B))
    # 2x workers, fixed local batch: K = 32, b = 128.
    weak = ref.gamma_with_workers(shape, hold_global_batch=False)
    assert weak == pytest.approx(2 * 31 / 32 * 2 * R / (6 * 128 * B))
    assert ref.gamma_with_local_batch(shape) == pytest.approx(base / 2)
    assert ref.gamma_with_bandwidth(shape, 2 * B) == pytest.approx(base / 2)


def test_what_if_sum_form_matches_closed_form() -> None:
    shape = ref.DataParallelShape(
        workers=16, local_batch=128, grad_bytes_per_param=2, flops_per_s=R, bandwidth_bytes_per_s=B
    )
    buckets = _dp_buckets(G_BYTES * P_7B, 25 * 2**20, 16)
    comp = ref.compute_time_s(P_7B, 128, R)
    doubled = ref.gamma_sum_form_what_if(buckets, comp, 0.0, B, group_size_factor=2, compute_factor=0.5)
    assert doubled == pytest.approx(ref.gamma_with_workers(shape))
    bigger_batch = ref.gamma_sum_form_what_if(buckets, comp, 0.0, B, compute_factor=2)
    assert bigger_batch == pytest.approx(ref.gamma_with_local_batch(shape))
    faster = ref.gamma_sum_form_what_if(buckets, comp, 0.0, 4 * B)
    assert faster == pytest.approx(ref.gamma_with_bandwidth(shape, 4 * B))


def test_sum_form_refuses_what_it_cannot_price() -> None:
    frame = pl.DataFrame(
        {"collective": ["AllReduce", "Gatherv"], "group_size": [4, 4], "size_bytes": [1e6, 1e6]}
    )
    with pytest.raises(UsageError, match="Gatherv"):
        ref.predicted_comm_time_s(frame, 1e-6, B)
    gathers = pl.DataFrame({"collective": ["AllGather"], "group_size": [4], "size_bytes": [1e6]})
    with pytest.raises(UsageError, match="tree"):
        ref.predicted_comm_time_s(gathers, 1e-6, B, algorithm="tree")


def test_sum_form_with_latency_by_hand() -> None:
    frame = pl.DataFrame(
        {"collective": ["AllReduce", "SendRecv"], "group_size": [4, 2], "size_bytes": [8e6, 1e6]}
    )
    # AllReduce: 6 * 1e-6 + 1.5 * 8e6 / 1e10; SendRecv: 1e-6 + 1e6 / 1e10
    expected = 6e-6 + 1.5 * 8e6 / 1e10 + 1e-6 + 1e6 / 1e10
    assert ref.predicted_comm_time_s(frame, 1e-6, 1e10) == pytest.approx(expected)
    assert ref.gamma_sum_form(frame, 0.01, 1e-6, 1e10) == pytest.approx(expected / 0.01)
    assert math.isclose(cm.FLOPS_PER_PARAM_PER_EXAMPLE, 6.0)


def test_every_canonical_collective_can_be_priced() -> None:
    for collective in CANONICAL_COLLECTIVES:
        assert cm.collective_time_s(collective, 4, 1e6, 1e-6, 1e9) >= 0.0


def test_expression_nulls_for_empty_groups() -> None:
    frame = pl.DataFrame({"collective": ["AllReduce"], "group_size": [0]})
    assert frame.select(cm.bus_factor_expr(pl.col("collective"), pl.col("group_size"))).item() is None
