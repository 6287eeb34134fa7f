"""Collectives (SPEC sections 2 and 3) on small factory traces: linking, bytes, process groups, algbw/busbw
and the tables, with expected values written as arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.reports.html.page import render_html
from traceview.reports.json.summary import summary_document
from typer.testing import CliRunner

import traceview.cli.main  # noqa: F401  (registers every command)
from tests import kineto_factory as kf
from traceview.budget.time_budget import classified_events
from traceview.cli.app import app
from traceview.collectives.kernels import COMM_KERNEL_SCHEMA, EXTRA_SCHEMA, comm_kernels
from traceview.collectives.tables import (
    SIZE_BUCKETS,
    CollectiveAnalysis,
    analyze_collectives,
    size_bucket_exprs,
)
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
BROADCAST = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)"


def comm_args(collective: str, nelems: int, out_nelems: int | None = None, **extra: Any) -> dict[str, Any]:
    """The comm args of a PyTorch 2.x `record_param_comms` (and, in newer traces, of the kernel)."""
    return {
        "Collective name": collective,
        "In msg nelems": nelems,
        "Out msg nelems": nelems if out_nelems is None else out_nelems,
        "dtype": "Float",
        **extra,
    }


PG = {
    "Process Group Name": "3",
    "Process Group Description": "tp",
    "Process Group Ranks": "[0,1,2,3]",
    "Group size": 4,
}


def nested_call(
    ts: float,
    correlation: int,
    c10d: str,
    backend: str,
    rpc_args: dict[str, Any] | None = None,
    backend_args: dict[str, Any] | None = None,
    tid: int = 1,
) -> list[kf.Event]:
    """c10d::* [ts, ts+50) > record_param_comms [ts+5, ts+45) > nccl:* [ts+10, ts+40) > launch at ts+20."""
    return [
        kf.cpu_op(c10d, ts, 50, tid=tid),
        kf.cpu_op("record_param_comms", ts + 5, 40, tid=tid, args=rpc_args or {}),
        kf.cpu_op(backend, ts + 10, 30, tid=tid, cat="user_annotation", args=backend_args or {}),
        kf.launch(ts + 20, correlation, tid=tid),
    ]


def kernels_of(tmp_path: Path, events: list[kf.Event], **doc: Any) -> pl.DataFrame:
    path = kf.write(kf.document(events, **doc), tmp_path / "rank0.json")
    run = load_run(path)
    return comm_kernels(run, classified_events(run))


def analysis_of(tmp_path: Path, events: list[kf.Event], **doc: Any) -> CollectiveAnalysis:
    path = kf.write(kf.document(events, **doc), tmp_path / "rank0.json")
    run = load_run(path)
    return analyze_collectives(run, classified_events(run))


def test_schema_is_the_contract(tmp_path: Path) -> None:
    assert list(COMM_KERNEL_SCHEMA) == [
        "rank",
        "name",
        "start_us",
        "end_us",
        "dur_us",
        "stream",
        "correlation",
        "on_device",
        "collective",
        "algorithm",
        "protocol",
        "reduce_op",
        "dtype",
        "elem_size",
        "in_bytes",
        "out_bytes",
        "size_bytes",
        "group_size",
        "pg_key",
        "pg_name",
        "pg_desc",
        "pg_ranks",
        "seq",
        "call_name",
        "call_start_us",
        "call_end_us",
        "launch_us",
        "linked_by",
        "algbw_Bps",
        "busbw_Bps",
    ]
    floats = {
        "start_us",
        "end_us",
        "dur_us",
        "call_start_us",
        "call_end_us",
        "launch_us",
        "algbw_Bps",
        "busbw_Bps",
    }
    ints = {
        "rank",
        "stream",
        "correlation",
        "elem_size",
        "in_bytes",
        "out_bytes",
        "size_bytes",
        "group_size",
        "seq",
    }
    for column, dtype in COMM_KERNEL_SCHEMA.items():
        expected = (
            pl.Float64
            if column in floats
            else pl.Int64
            if column in ints
            else pl.Boolean
            if column == "on_device"
            else pl.Utf8
        )
        assert dtype == expected, column
    frame = kernels_of(tmp_path, [kf.kernel(ALLREDUCE, 10, 5)])
    assert frame.schema == pl.Schema({**COMM_KERNEL_SCHEMA, **EXTRA_SCHEMA})
    empty = kernels_of(tmp_path, [kf.kernel("gemm", 10, 5)])
    assert empty.height == 0
    assert empty.schema == frame.schema


def test_kernel_args_give_everything(tmp_path: Path) -> None:
    args = comm_args("allreduce", 1_000_000, **PG, Seq=7)
    events = [
        *nested_call(100, 1, "c10d::allreduce_", "nccl:all_reduce", rpc_args=args),
        kf.kernel(ALLREDUCE, 200, 400, correlation=1, stream=20, args=args),
    ]
    row = kernels_of(tmp_path, events).row(0, named=True)
    assert row["linked_by"] == "kernel args"
    assert (row["collective"], row["dtype"], row["elem_size"]) == ("AllReduce", "float32", 4)
    # a NCCL >= 2.19 name says the kernel's specialisation, never the algorithm that ran
    assert (row["algorithm"], row["protocol"], row["reduce_op"]) == (None, None, "Sum")
    assert (row["kernel_specialization"], row["algorithm_source"]) == ("RING_LL", None)
    assert row["in_bytes"] == row["out_bytes"] == row["size_bytes"] == 1_000_000 * 4
    assert (row["group_size"], row["pg_name"], row["pg_desc"], row["pg_ranks"]) == (
        4,
        "3",
        "tp",
        "[0, 1, 2, 3]",
    )
    assert row["pg_key"] == "3"
    assert row["seq"] == 7
    assert (row["call_name"], row["call_start_us"], row["call_end_us"]) == ("c10d::allreduce_", 100, 150)
    assert row["launch_us"] == 120
    assert row["stream"] == 20
    assert row["correlation"] == 1
    assert row["dur_us"] == 400
    assert row["algbw_Bps"] == pytest.approx(4_000_000 / 400e-6)
    assert row["busbw_Bps"] == pytest.approx(4_000_000 / 400e-6 * 2 * (4 - 1) / 4)


def test_correlation_link_takes_args_from_record_param_comms(tmp_path: Path) -> None:
    args = comm_args("allgather_into_tensor_coalesced", 256, out_nelems=1024, **PG)
    events = [
        *nested_call(0, 5, "c10d::allgather_into_tensor_coalesced", "nccl:all_gather", rpc_args=args),
        kf.kernel(ALLGATHER, 60, 10, correlation=5),
    ]
    row = kernels_of(tmp_path, events).row(0, named=True)
    assert row["linked_by"] == "correlation"
    assert row["collective"] == "AllGather"
    assert (row["in_bytes"], row["out_bytes"]) == (256 * 4, 1024 * 4)
    assert row["size_bytes"] == 1024 * 4  # AllGather: the gathered output
    assert row["busbw_Bps"] == pytest.approx(1024 * 4 / 10e-6 * (4 - 1) / 4)
    assert row["pg_source"] == "args"
    assert row["bytes_source"] == "call args"


def test_external_id_links_a_kernel_without_launch(tmp_path: Path) -> None:
    rpc = kf.cpu_op("record_param_comms", 0, 40, args={**comm_args("broadcast", 10), "External id": 77})
    row = kernels_of(
        tmp_path, [rpc, kf.kernel(BROADCAST, 50, 4, correlation=9, args={"External id": 77})]
    ).row(0, named=True)
    assert row["linked_by"] == "external id"
    assert row["collective"] == "Broadcast"
    assert row["size_bytes"] == 40
    assert (row["group_size"], row["group_size_assumed"]) == (
        1,
        True,
    )  # no group named: the default, the world
    assert row["busbw_Bps"] == pytest.approx(40 / 4e-6)  # f = 1 for Broadcast whatever n
    assert row["launch_us"] is None
    assert row["call_name"] == "record_param_comms"


def test_unlinked_kernel_keeps_what_its_name_says(tmp_path: Path) -> None:
    events = [
        *nested_call(0, 1, "c10d::allreduce_", "nccl:all_reduce", tid=2),  # another thread: not containing
        kf.launch(20, 2, tid=1),
        kf.kernel(SENDRECV, 100, 10, correlation=2),
        kf.cpu_op("nccl:all_reduce", 200, 10, cat="user_annotation"),
        kf.launch(215, 3),  # after the call ended: not inside
        kf.kernel(ALLREDUCE, 300, 10, correlation=3),
    ]
    frame = kernels_of(tmp_path, events)
    assert frame.get_column("linked_by").to_list() == ["unlinked", "unlinked"]
    assert frame.get_column("collective").to_list() == ["SendRecv", "AllReduce"]
    assert frame.get_column("size_bytes").null_count() == 2
    assert frame.get_column("busbw_Bps").null_count() == 2
    assert frame.get_column("launch_us").to_list() == [20, 215]
    assert frame.get_column("pg_key").to_list() == ["unknown", "unknown"]


def test_input_dims_of_base_ops_give_output_input_and_group_size(tmp_path: Path) -> None:
    c10d = {"Input Dims": [[32, 4], [8, 4], []], "Input type": ["float", "float", ""]}
    backend = {"Input Dims": [[8, 4]], "Input type": ["float"]}
    events = [
        kf.cpu_op("c10d::_allgather_base_", 0, 50, args=c10d),
        kf.cpu_op("nccl:_all_gather_base", 10, 30, cat="user_annotation", args=backend),
        kf.launch(20, 4),
        kf.kernel(SENDRECV, 60, 8, correlation=4),
    ]
    row = kernels_of(tmp_path, events).row(0, named=True)
    assert row["collective"] == "AllGather"  # the call's, not the kernel name's SendRecv
    assert (row["in_bytes"], row["out_bytes"]) == (8 * 4 * 4, 32 * 4 * 4)
    assert row["group_size"] == (32 * 4) // (8 * 4)
    assert row["size_bytes"] == 32 * 4 * 4
    assert row["bytes_source"] == "input dims"
    assert row["dtype"] == "float32"
    assert row["busbw_Bps"] == pytest.approx(32 * 4 * 4 / 8e-6 * (4 - 1) / 4)
    assert row["call_name"] == "c10d::_allgather_base_"


def test_coalesced_call_sums_its_tensors_and_counts_the_kernel_once(tmp_path: Path) -> None:
    backend = {"Input Dims": [[10], [20, 3], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}
    events = [
        *nested_call(0, 1, "c10d::allreduce_coalesced_", "nccl:allreduce_coalesced", backend_args=backend),
        kf.kernel(ALLREDUCE, 60, 10, correlation=1),
    ]
    analysis = analysis_of(tmp_path, events)
    row = analysis.kernels.row(0, named=True)
    assert row["in_bytes"] == row["size_bytes"] == (10 + 20 * 3) * 2
    assert row["dtype"] == "bfloat16"
    table = analysis.per_collective.row(0, named=True)
    assert (table["calls"], table["kernels"], table["size_bytes"]) == (1, 1, (10 + 20 * 3) * 2)


def test_a_call_that_launches_two_kernels_is_one_call(tmp_path: Path) -> None:
    args = comm_args("alltoall", 100, **PG)
    events = [
        *nested_call(0, 1, "c10d::alltoall_", "nccl:all_to_all", rpc_args=args),
        kf.launch(25, 2),
        kf.kernel(SENDRECV, 60, 10, correlation=1),
        kf.kernel(SENDRECV, 61, 30, correlation=2, stream=8),
    ]
    analysis = analysis_of(tmp_path, events)
    frame = analysis.kernels
    assert frame.get_column("call_kernels").to_list() == [2, 2]
    assert frame.get_column("first_in_call").to_list() == [True, False]
    table = analysis.per_collective.row(0, named=True)
    assert (table["calls"], table["kernels"], table["size_bytes"]) == (1, 2, 100 * 4)
    assert table["total_us"] == 10 + 30
    # T_comm = |[60, 70) u [61, 91)| = 91 - 60
    assert table["share_of_comm"] == pytest.approx((10 + 30) / (91 - 60))


def test_process_group_from_pg_config(tmp_path: Path) -> None:
    groups = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [0, 1, 2, 3]},
        {"pg_name": "5", "pg_desc": "dp", "pg_size": 2, "ranks": [0, 2]},
    ]
    events = [
        kf.cpu_op("record_param_comms", 0, 40, args=comm_args("allreduce", 8, **{"Process Group ID": 5})),
        kf.launch(10, 1),
        kf.kernel(ALLREDUCE, 50, 10, correlation=1),
        kf.cpu_op("record_param_comms", 100, 40, args=comm_args("allreduce", 8, **{"Group size": 4})),
        kf.launch(110, 2),
        kf.kernel(ALLREDUCE, 150, 10, correlation=2),
        kf.cpu_op("record_param_comms", 200, 40, args=comm_args("allreduce", 8)),
        kf.launch(210, 3),
        kf.kernel(ALLREDUCE, 250, 10, correlation=3),
    ]
    info = {"backend": "nccl", "rank": 0, "world_size": 4, "pg_config": groups}
    path = kf.write({**kf.document(events), "distributedInfo": info}, tmp_path / "rank0.json")
    run = load_run(path)
    frame = comm_kernels(run, classified_events(run))
    by_id, by_size, unknown = frame.iter_rows(named=True)
    assert (by_id["pg_name"], by_id["pg_desc"], by_id["pg_ranks"], by_id["group_size"]) == (
        "5",
        "dp",
        "[0, 2]",
        2,
    )
    assert by_id["pg_source"] == "args"
    assert (by_size["pg_name"], by_size["pg_desc"], by_size["pg_source"]) == (
        "0",
        "default_pg",
        "pg_config size",
    )
    assert unknown["pg_name"] is None
    assert unknown["pg_key"] == "unknown"
    assert (unknown["group_size"], unknown["group_size_assumed"]) == (4, True)  # the default group: the world
    only = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]
    path = kf.write(
        {**kf.document(events), "distributedInfo": {**info, "pg_config": only}}, tmp_path / "rank0.json"
    )
    run = load_run(path)
    frame = comm_kernels(run, classified_events(run))
    # The first names group 5 (absent from pg_config), the second says size 4 (contradicts): only the third is
    # filled.
    assert frame.get_column("pg_source").to_list() == ["args", None, "pg_config only group"]
    assert frame.get_column("pg_key").to_list() == ["5", "unknown", "0"]


def test_cpu_only_gloo_call_is_a_row(tmp_path: Path) -> None:
    gloo = kf.cpu_op(
        "gloo:all_reduce",
        10,
        200,
        cat="user_annotation",
        args={"Input Dims": [[1000]], "Input type": ["float"]},
    )
    analysis = analysis_of(tmp_path, [gloo, kf.kernel("gemm", 0, 5)])
    row = analysis.kernels.row(0, named=True)
    assert (row["on_device"], row["linked_by"], row["collective"]) == (False, "cpu call", "AllReduce")
    assert row["size_bytes"] == 4000
    assert row["dur_us"] == 200
    assert row["call_name"] == "gloo:all_reduce"
    assert analysis.linked_share is None  # no device kernel
    rank = analysis.per_rank.row(0, named=True)
    assert (rank["comm_kernels"], rank["cpu_calls"], rank["comm_us"]) == (0, 1, 0)
    assert analysis.per_collective.row(0, named=True)["share_of_comm"] is None


def test_tables_and_percentiles(tmp_path: Path) -> None:
    events: list[kf.Event] = []
    durations = (10.0, 20.0, 40.0)
    for i, dur in enumerate(durations):
        args = comm_args("allreduce", 1000, **PG)
        events += [
            *nested_call(1000 * i, i + 1, "c10d::allreduce_", "nccl:all_reduce", rpc_args=args),
            kf.kernel(ALLREDUCE, 1000 * i + 100, dur, correlation=i + 1),
        ]
    events.append(kf.kernel(SENDRECV, 5000, 30))  # unlinked, no launch
    analysis = analysis_of(tmp_path, events)
    busbw = [4000 / (d * 1e-6) * 2 * 3 / 4 for d in durations]  # descending: 10, 20, 40 us
    table = analysis.per_collective.filter(pl.col("collective") == "AllReduce").row(0, named=True)
    assert table["size_bucket"] == "1 KiB - 16 KiB"
    assert table["pg_key"] == "3"
    assert table["group_size"] == 4
    assert (table["calls"], table["size_bytes"], table["total_us"], table["median_us"]) == (
        3,
        3 * 4000,
        70,
        20,
    )
    assert table["median_busbw_Bps"] == pytest.approx(busbw[1])
    # linear interpolation over the sorted values b40 < b20 < b10: p10 at position 0.2, p90 at 1.8
    assert table["p10_busbw_Bps"] == pytest.approx(busbw[2] + 0.2 * (busbw[1] - busbw[2]))
    assert table["p90_busbw_Bps"] == pytest.approx(busbw[1] + 0.8 * (busbw[0] - busbw[1]))
    assert table["share_of_comm"] == pytest.approx(70 / (70 + 30))
    assert analysis.linked_share == pytest.approx(3 / 4)
    assert analysis.unknown_comm_kernels == 0
    groups = {row["pg_key"]: row for row in analysis.per_process_group.iter_rows(named=True)}
    assert groups["3"]["pg_desc"] == "tp"
    assert groups["3"]["calls"] == 3
    assert groups["3"]["total_us"] == 70
    assert groups["unknown"]["calls"] == 1
    assert groups["unknown"]["size_bytes"] is None
    assert groups["unknown"]["calls_unknown_size"] == 1
    rank = analysis.per_rank.row(0, named=True)
    assert (rank["comm_kernels"], rank["linked_kernels"], rank["calls"]) == (4, 3, 4)
    assert rank["linked_share"] == pytest.approx(3 / 4)
    assert rank["comm_us"] == 100


def test_size_buckets_edges() -> None:
    sizes = pl.DataFrame({"s": [0, 1023, 1024, (1 << 14) - 1, 1 << 30, None]}, schema={"s": pl.Int64})
    labels = sizes.select(size_bucket_exprs(pl.col("s"))).get_column("size_bucket").to_list()
    assert labels == [
        SIZE_BUCKETS[0][1],
        "< 1 KiB",
        "1 KiB - 16 KiB",
        "1 KiB - 16 KiB",
        ">= 1 GiB",
        "unknown",
    ]


def test_unknown_collective_is_counted(tmp_path: Path) -> None:
    analysis = analysis_of(tmp_path, [kf.kernel("ncclDevKernel_Generic(ncclDevComm*)", 0, 10)])
    assert analysis.unknown_comm_kernels == 1
    assert analysis.kernels.row(0, named=True)["collective"] is None
    assert analysis.per_collective.row(0, named=True)["collective"] == "unknown"


def test_two_ranks_on_one_time_base(tmp_path: Path) -> None:
    for rank, base in ((0, 1_700_000_000_000_000_000), (1, 1_700_000_000_000_002_000)):  # rank 1: 2 us later
        args = comm_args("allreduce", 10, **{**PG, "Group size": 2, "Process Group Ranks": "[0, 1]"})
        events = [
            *nested_call(0, 1, "c10d::allreduce_", "nccl:all_reduce", rpc_args=args),
            kf.kernel(ALLREDUCE, 100, 10, correlation=1),
        ]
        kf.write(kf.document(events, rank=rank, world_size=2, base_ns=base), tmp_path / f"rank{rank}.json")
    run = load_run(tmp_path)
    frame = comm_kernels(run, classified_events(run))
    assert frame.get_column("rank").to_list() == [0, 1]
    assert frame.get_column("start_us").to_list() == [100, 100 + 2]
    assert frame.get_column("call_start_us").to_list() == [0, 0 + 2]
    assert frame.get_column("pg_key").to_list() == ["3", "3"]
    groups = analyze_collectives(run, classified_events(run)).per_process_group
    assert groups.row(0, named=True)["ranks_seen"] == "[0, 1]"


def test_analyze_json_html_and_cli(tmp_path: Path) -> None:
    args = comm_args("allreduce", 1000, **PG)
    events = [
        kf.step(1, 0, 1000),
        *nested_call(10, 1, "c10d::allreduce_", "nccl:all_reduce", rpc_args=args),
        kf.kernel("gemm", 20, 50),
        kf.kernel(ALLREDUCE, 100, 10, correlation=1, stream=20, args=args),
    ]
    path = kf.write(kf.document(events), tmp_path / "rank0.json")
    analysis = analyze(load_run(path))
    assert analysis.collectives is not None
    assert analysis.collectives.linked_share == 1
    assert analysis.gate_figures()["comm_linked_share"] == 1
    document = summary_document(analysis)["collectives"]
    assert document["per_collective"][0]["size_bytes"] == 4000
    html = render_html(analysis)
    assert 'id="fig-busbw-allreduce"' in html
    assert 'id="table-collectives"' in html
    runner = CliRunner()
    result = runner.invoke(app, ["collectives", str(path)])
    assert result.exit_code == 0
    assert "AllReduce" in result.stdout
    assert "100.0% linked" in result.stdout
    result = runner.invoke(app, ["collectives", str(path), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["per_rank"][0]["calls"] == 1


def test_simulated_data_parallel_run_gives_back_its_bandwidth(tmp_path: Path) -> None:
    """The simulator times each all-reduce as f(n) * S / B (alpha = 0), so busbw = S / t * f(n) =
    B exactly."""
    from tests.simulate.engine import write_run
    from tests.simulate.scenario import data_parallel_scenario

    bandwidth, params, buckets, workers, steps = 50e9, 1_000_000, 4, 4, 3
    scenario = data_parallel_scenario(workers, params, 8, 100e12, bandwidth, buckets=buckets, steps=steps)
    write_run(scenario, tmp_path)
    run = load_run(tmp_path, workers=1)
    analysis = analyze_collectives(run, classified_events(run))
    kernels = analysis.kernels
    assert kernels.height == workers * steps * buckets
    assert analysis.linked_share == 1
    assert kernels.get_column("collective").unique().to_list() == ["AllReduce"]
    assert kernels.get_column("group_size").unique().to_list() == [workers]
    assert kernels.get_column("size_bytes").unique().to_list() == [params * 2 // buckets]  # bf16 gradients
    assert kernels.get_column("busbw_Bps").to_list() == pytest.approx([bandwidth] * kernels.height, rel=1e-6)


def test_names_from_the_trace_are_escaped_in_the_report(tmp_path: Path) -> None:
    evil = "<img src=x onerror=alert(1)>"
    args = comm_args(
        "allreduce", 1000, **{**PG, "Process Group Name": evil, "Process Group Description": evil}
    )
    events = [
        kf.step(1, 0, 1000),
        *nested_call(10, 1, "c10d::allreduce_", "nccl:all_reduce", rpc_args=args),
        kf.kernel(ALLREDUCE, 100, 10, correlation=1, args=args),
    ]
    html = render_html(analyze(load_run(kf.write(kf.document(events), tmp_path / "rank0.json"))))
    assert evil not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
