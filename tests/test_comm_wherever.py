"""Communication wherever it runs (docs/metrics.md section 4): device kernels, copy-engine transfers and host
collective ops, counted once, the device's wait inside a host collective carved out of idle. Factory traces,
expected values as interval arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import kineto_factory as kf
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

GLOO_DIMS = {"Input Dims": [[1000]], "Input type": ["float"]}


def _copy(name: str, ts: float, dur: float, correlation: int, stream: int) -> kf.Event:
    event = kf.memcpy(ts, dur, correlation, stream)
    event["name"] = name
    return event


def _gloo_step(rank: int = 0) -> list[kf.Event]:
    """One CPU step of a rank whose all-reduce runs over gloo with device tensors (PyTorch's layout):
    compute [10, 110); `c10d::allreduce_` on the main thread launches the copy to the host [125, 145) on
    gloo's stream; `gloo:all_reduce` runs on a worker thread [150, 400) and launches the copy back
    [385, 395); the optimizer's kernel [420, 450)."""
    return [
        kf.step(1, 0, 500),
        kf.launch(5, 1),
        kf.kernel("gemm", 10, 100, correlation=1),
        kf.cpu_op("c10d::allreduce_", 115, 15),
        kf.launch(120, 2, name="cudaMemcpyAsync"),
        _copy("Memcpy DtoH (Device -> Pinned)", 125, 20, 2, stream=20),
        kf.cpu_op("gloo:all_reduce", 150, 250, tid=2, cat="user_annotation", args=GLOO_DIMS),
        kf.launch(380, 3, tid=2, name="cudaMemcpyAsync"),
        _copy("Memcpy HtoD (Pinned -> Device)", 385, 10, 3, stream=20),
        kf.launch(410, 4),
        kf.kernel("adam", 420, 30, correlation=4),
    ]


def _analysed(tmp_path: Path, docs: list[dict[str, Any]]) -> RunAnalysis:
    for rank, doc in enumerate(docs):
        kf.write(doc, tmp_path / f"rank{rank}.json")
    return analyze(load_run(str(tmp_path)))


def test_a_host_collective_is_communication_and_the_device_waits_inside_it(tmp_path: Path) -> None:
    analysis = _analysed(tmp_path, [kf.document(_gloo_step(), rank=0, world_size=2)])
    row = analysis.budget.per_step.row(0, named=True)
    step = 450 - 10  # the CPU step's window: its first device activity to its last
    device = (110 - 10) + (145 - 125) + (395 - 385) + (450 - 420)
    device_or_host = (110 - 10) + (145 - 125) + (400 - 150) + (450 - 420)
    assert row["step_us"] == pytest.approx(step)
    assert row["busy_us"] == pytest.approx(device)
    assert row["comm_us"] == pytest.approx((145 - 125) + (400 - 150))  # the copy back lies inside the host op
    assert row["comm_device_us"] == 0
    assert row["comm_copy_us"] == pytest.approx((145 - 125) + (395 - 385))
    assert row["comm_host_us"] == pytest.approx((400 - 150) - (395 - 385))
    assert row["host_comm_wait_us"] == pytest.approx(device_or_host - device)
    assert row["idle_us"] == pytest.approx(step - device_or_host)
    assert row["step_us"] == pytest.approx(row["busy_us"] + row["host_comm_wait_us"] + row["idle_us"])
    assert row["comp_us"] == pytest.approx((110 - 10) + (450 - 420))
    assert row["exposed_comm_us"] == pytest.approx(row["comm_us"])  # nothing computes under it


def test_the_staging_copies_belong_to_the_host_call(tmp_path: Path) -> None:
    analysis = _analysed(tmp_path, [kf.document(_gloo_step(), rank=0, world_size=2)])
    assert analysis.collectives is not None
    rows = analysis.collectives.kernels.select("name", "comm_kind", "staging_copy", "first_in_call").rows()
    assert sorted(rows) == sorted(
        [
            ("Memcpy DtoH (Device -> Pinned)", "copy engine", True, False),
            ("gloo:all_reduce", "host", False, True),
            ("Memcpy HtoD (Pinned -> Device)", "copy engine", True, False),
        ]
    )
    per_rank = analysis.collectives.per_rank.row(0, named=True)
    assert (per_rank["calls"], per_rank["cpu_calls"], per_rank["copy_transfers"]) == (1, 1, 2)
    assert per_rank["comm_us"] == pytest.approx((145 - 125) + (400 - 150))


def test_at_world_size_one_a_host_collective_moves_nothing(tmp_path: Path) -> None:
    analysis = _analysed(tmp_path, [kf.document(_gloo_step(), rank=0, world_size=1)])
    row = analysis.budget.per_step.row(0, named=True)
    device = (110 - 10) + (145 - 125) + (395 - 385) + (450 - 420)
    assert (row["comm_us"], row["host_comm_wait_us"]) == (0, 0)
    assert row["idle_us"] == pytest.approx((450 - 10) - device)


NCCL_ARGS = {
    "Collective name": "_allgather_base",
    "In msg nelems": 256,
    "Out msg nelems": 512,
    "Group size": 2,
    "dtype": "Float",
    "Process Group Name": "0",
    "Process Group Ranks": "[0, 1]",
}


def test_copy_engine_collectives_by_call_and_by_stream(tmp_path: Path) -> None:
    """NCCL 2.28's copy-engine all-gather: memcpy rows on NCCL's stream 30, no kernel. The copy launched
    inside the call is linked by correlation; a copy on the stream of a communication kernel by its stream;
    a copy on the compute stream outside every call stays a memory op, whatever its name."""
    events = [
        kf.step(1, 0, 1000),
        kf.cpu_op("record_param_comms", 100, 30, args=NCCL_ARGS),
        kf.cpu_op("nccl:_all_gather_base", 105, 20),
        kf.launch(110, 1, name="cudaMemcpyAsync"),
        _copy("Memcpy DtoD (Device -> Device)", 200, 50, 1, stream=30),
        kf.launch(300, 2),
        kf.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 310, 40, correlation=2, stream=30),
        kf.launch(400, 3, name="cudaMemcpyAsync"),
        _copy("Memcpy DtoD (Device -> Device)", 410, 20, 3, stream=30),
        kf.launch(500, 4, name="cudaMemcpyAsync"),
        _copy("Memcpy DtoD (Device -> Device)", 510, 30, 4, stream=7),
        kf.launch(600, 5),
        kf.kernel("gemm", 610, 100, correlation=5),
    ]
    analysis = _analysed(tmp_path, [kf.document(events, rank=0, world_size=2)])
    assert analysis.collectives is not None
    rows = analysis.collectives.kernels.select("start_us", "comm_kind", "linked_by", "collective").rows()
    assert rows == [
        (200.0, "copy engine", "correlation", "AllGather"),
        (310.0, "device", "unlinked", "AllReduce"),
        (410.0, "copy engine", "stream", None),
    ]
    row = analysis.budget.per_step.row(0, named=True)
    assert row["comm_us"] == pytest.approx(50 + 40 + 20)
    assert (row["comm_device_us"], row["comm_copy_us"], row["comm_host_us"]) == (40, 50 + 20, 0)
    assert row["busy_us"] == pytest.approx(50 + 40 + 20 + 30 + 100)


def test_user_copies_are_never_collective_transfers_whatever_stream_they_share(tmp_path: Path) -> None:
    """PyTorch symmetric-memory all-reduce kernels run on the compute stream 7 beside the user's own copies
    (`aten::copy_` host-to-device inputs, device-to-device copies): those copies are memory ops, never
    copy-engine transfers. On NCCL's stream 30 a copy launched by `aten::copy_` is the user's too, and a
    copy launched outside every operator (NCCL's own batched copy) is the collective's."""
    symm = "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**, unsigned int)"
    events = [
        kf.step(1, 0, 1000),
        kf.cpu_op("aten::copy_", 100, 20),
        kf.launch(105, 1, name="cudaMemcpyAsync"),
        _copy("Memcpy HtoD (Pageable -> Device)", 150, 30, 1, stream=7),
        kf.launch(200, 2),
        kf.kernel(symm, 210, 40, correlation=2, stream=7),
        kf.cpu_op("aten::copy_", 260, 20),
        kf.launch(265, 3, name="cudaMemcpyAsync"),
        _copy("Memcpy DtoD (Device -> Device)", 300, 10, 3, stream=7),
        kf.launch(400, 4),
        kf.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 410, 40, correlation=4, stream=30),
        kf.cpu_op("aten::copy_", 460, 20),
        kf.launch(465, 5, name="cudaMemcpyAsync"),
        _copy("Memcpy DtoD (Device -> Device)", 500, 15, 5, stream=30),
        kf.launch(600, 6, name="cudaMemcpyBatchAsync"),
        _copy("Memcpy DtoD (Device -> Device)", 610, 25, 6, stream=30),
    ]
    analysis = _analysed(tmp_path, [kf.document(events, rank=0, world_size=2)])
    assert analysis.collectives is not None
    rows = analysis.collectives.kernels.select("start_us", "comm_kind", "linked_by").rows()
    assert rows == [
        (210.0, "device", "unlinked"),
        (410.0, "device", "unlinked"),
        (610.0, "copy engine", "stream"),
    ]
    row = analysis.budget.per_step.row(0, named=True)
    assert row["comm_us"] == pytest.approx(40 + 40 + 25)
    assert (row["comm_device_us"], row["comm_copy_us"]) == (40 + 40, 25)


def test_host_collectives_are_priced_over_the_host_link_or_say_it_is_unknown(tmp_path: Path) -> None:
    from traceview.options.run import build_options
    from traceview.options.user import UserOptions
    from traceview.reduce.pipeline import analyze_files

    kf.write(kf.document(_gloo_step(), rank=0, world_size=2), tmp_path / "rank0.json")
    unknown = analyze_files(tmp_path, parallel_min_bytes=1 << 62)
    assert unknown.prediction is not None
    assert unknown.prediction.missing_input is not None
    assert unknown.prediction.missing_input.startswith("link of the host collectives")
    stated = analyze_files(
        tmp_path, build_options(tmp_path, UserOptions(host_bandwidth="5G")), parallel_min_bytes=1 << 62
    )
    assert stated.prediction is not None
    call = stated.prediction.calls.row(0, named=True)
    assert (call["comm_kind"], call["link"], call["link_source"]) == (
        "host",
        "loopback or shared memory",
        "command line",
    )
    assert call["bandwidth_Bps"] == 5e9
    assert call["dur_us"] == pytest.approx(400 - 150)  # the host op; the copy back inside it counts once
    # AllReduce of 4,000 B over n = 2 (the world: no group named): 2 (n-1) alpha + 2 (n-1)/n S / B
    assert call["t_pred_us"] == pytest.approx((2 * 1 * 20e-6 + 2 * 1 / 2 * 4000 / 5e9) * 1e6)


def _all_to_all(rank: int, args: dict[str, Any]) -> dict[str, Any]:
    events = [
        kf.step(1, 0, 1000),
        kf.cpu_op("record_param_comms", 100, 30, args=args),
        kf.cpu_op("nccl:all_to_all", 105, 20),
        kf.launch(110, 1),
        kf.kernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", 200 + rank, 50, 1, 20),
        kf.launch(300, 2),
        kf.kernel("gemm", 400, 100, correlation=2),
    ]
    return kf.document(events, rank=rank, world_size=2, base_ns=1_700_000_000_000_000_000)


def test_an_all_to_all_is_sized_from_the_input_shape_record_param_comms_keeps(tmp_path: Path) -> None:
    """The DLRM case on every rank: `record_param_comms` names the all_to_all but lost `In msg nelems`; its
    first argument is the input tensor (3,392 int32 elements: `Input Dims` [[3392], [], ...]), the backend
    annotation records no shape. Each rank sizes the call itself: S = 3,392 x 4 B, busbw = S/t (n-1)/n."""
    args = {
        "Collective name": "all_to_all",
        "Input Dims": [[3392], [], [], []],
        "Input type": ["int", "Scalar", "Scalar", "Scalar"],
    }
    analysis = _analysed(tmp_path, [_all_to_all(0, args), _all_to_all(1, args)])
    assert analysis.collectives is not None
    rows = analysis.collectives.kernels.sort("rank").select("rank", "size_bytes", "bytes_source", "busbw_Bps")
    assert rows.get_column("size_bytes").to_list() == [3392 * 4, 3392 * 4]
    assert rows.get_column("bytes_source").to_list() == ["input dims", "input dims"]
    assert rows.item(0, "busbw_Bps") == pytest.approx(3392 * 4 / 50e-6 * (2 - 1) / 2)


def test_a_call_its_own_trace_leaves_unsized_takes_its_peers_size(tmp_path: Path) -> None:
    """The DLRM case: an all_to_all of 3,392 int elements, sized on rank 0 and not on rank 1."""
    sized = {"Collective name": "all_to_all", "In msg nelems": 3392, "Out msg nelems": 3392, "dtype": "Int"}
    analysis = _analysed(tmp_path, [_all_to_all(0, sized), _all_to_all(1, {"Collective name": "all_to_all"})])
    assert analysis.collectives is not None
    rows = analysis.collectives.kernels.sort("rank").select("rank", "size_bytes", "bytes_source", "busbw_Bps")
    assert rows.get_column("size_bytes").to_list() == [3392 * 4, 3392 * 4]
    assert rows.get_column("bytes_source").to_list() == ["call args", "peers"]
    duration_s = 50e-6
    assert rows.item(1, "busbw_Bps") == pytest.approx(3392 * 4 / duration_s * (2 - 1) / 2)  # n = the world, 2
