"""The collectives of a rank with little or no communication: fast paths give what the full queries give."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests import kineto_factory as kf
from traceview.budget.time_budget import classified_events
from traceview.collectives import calls, kernels
from traceview.collectives.calls import call_counts, launches, makes_calls
from traceview.collectives.groups import config_groups_query, with_process_groups, without_process_groups
from traceview.collectives.kernels import COMM_KERNEL_SCHEMA, EXTRA_SCHEMA, comm_kernels
from traceview.collectives.tables import SUSPECTED_SCHEMA, suspected_comm_kernels
from traceview.load.inputs import load_run
from traceview.model.trace import Run


def _run(tmp_path: Path, events: list[kf.Event]) -> Run:
    return load_run(kf.write(kf.document(events, world_size=8), tmp_path / "rank0.json"))


def _compute_only(tmp_path: Path) -> Run:
    """Compute kernels and memory copies launched under plain operators: no communication at all."""
    return _run(
        tmp_path,
        [
            kf.cpu_op("aten::mm", 0, 30),
            kf.launch(5, 1),
            kf.kernel("ampere_sgemm_128x64_nn", 10, 20, correlation=1),
            kf.cpu_op("aten::copy_", 40, 30),
            kf.launch(45, 2, name="cudaMemcpyAsync"),
            kf.memcpy(50, 10, correlation=2),
            kf.memcpy(70, 10, correlation=3, stream=8),
        ],
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("aten::mm", False),
        ("ProfilerStep#1", False),
        ("my_record_param_comms", False),
        ("c10d::allreduce_", True),
        ("record_param_comms", True),
        ("nccl:all_reduce", True),
        ("gloo:barrier", True),
    ],
)
def test_makes_calls_reads_the_call_families(tmp_path: Path, name: str, expected: bool) -> None:
    assert makes_calls(_run(tmp_path, [kf.cpu_op(name, 0, 10)])) is expected


def test_a_rank_without_communication_has_no_comm_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _compute_only(tmp_path)
    events = classified_events(run)
    fast = comm_kernels(run, events)
    assert fast.height == 0
    assert fast.schema == pl.Schema({**COMM_KERNEL_SCHEMA, **EXTRA_SCHEMA})
    monkeypatch.setattr(kernels, "makes_calls", lambda _: True)  # the linking queries run
    assert fast.equals(comm_kernels(run, events))


def test_a_rank_without_calls_counts_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _compute_only(tmp_path)
    fast = call_counts(run)
    assert fast.height == 0
    assert fast.schema == pl.Schema({"rank": pl.Int64, "name": pl.Utf8, "family": pl.Utf8, "calls": pl.Int64})
    monkeypatch.setattr(calls, "_any_candidate", lambda _: True)  # the counting query runs
    assert fast.equals(call_counts(run))


def test_call_counts_read_only_the_calls(tmp_path: Path) -> None:
    events = [
        kf.cpu_op("aten::mm", 0, 10),
        kf.cpu_op("c10d::allreduce_", 10, 10),
        kf.cpu_op("c10d::allreduce_", 30, 10),
        kf.cpu_op("c10d::wait", 50, 10),  # no collective: not a call
        kf.cpu_op("nccl:all_reduce", 60, 10, cat="user_annotation"),
        kf.launch(65, 1),
    ]
    counts = call_counts(_run(tmp_path, events))
    assert counts.rows() == [(0, "c10d::allreduce_", "c10d", 2), (0, "nccl:all_reduce", "backend", 1)]


def test_events_without_suspects_have_none(tmp_path: Path) -> None:
    events = classified_events(_compute_only(tmp_path))
    suspects = suspected_comm_kernels(events)
    assert suspects.height == 0
    assert suspects.schema == pl.Schema(SUSPECTED_SCHEMA)


def test_a_run_without_pg_config_keeps_the_groups_of_the_args(tmp_path: Path) -> None:
    frame = pl.LazyFrame(
        {
            "rank": [0, 0, 0],
            "name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "gloo:all_reduce", "nccl:all_reduce"],
            "stream": [7, 101, None],
            "pg_name": ["3", None, None],
            "pg_desc": ["tp", None, None],
            "pg_ranks": [None, "[0, 1]", None],
            "group_size": [None, 2, None],
        },
        schema_overrides={"stream": pl.Int64, "group_size": pl.Int64},
    )
    groups = config_groups_query(_compute_only(tmp_path))
    full = with_process_groups(frame, groups).collect()
    assert full.get_column("pg_source").to_list() == ["args", "args", None]
    fast = without_process_groups(frame).collect()
    assert fast.schema == full.schema
    assert fast.equals(full)


def test_a_frame_without_cpu_only_ops_needs_no_worker_pools(tmp_path: Path) -> None:
    groups = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [0, 1, 2, 3]},
        {"pg_name": "5", "pg_desc": "dp", "pg_size": 2, "ranks": [0, 2]},
    ]
    info = {"backend": "nccl", "rank": 0, "world_size": 4, "pg_config": groups}
    path = kf.write(
        {**kf.document([kf.cpu_op("aten::mm", 0, 10)]), "distributedInfo": info}, tmp_path / "r.json"
    )
    frame = pl.LazyFrame(
        {
            "rank": [0, 0, 0],
            "name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * 3,
            "stream": [7, 7, 8],
            "pg_name": ["5", None, None],
            "pg_desc": [None, None, None],
            "pg_ranks": [None, None, None],
            "group_size": [None, 4, None],
        },
        schema_overrides={"pg_desc": pl.Utf8, "pg_ranks": pl.Utf8, "group_size": pl.Int64},
    )
    groups_query = config_groups_query(load_run(path))
    full = with_process_groups(frame, groups_query).collect()
    assert full.get_column("pg_source").to_list() == ["args", "pg_config size", None]
    fast = with_process_groups(frame, groups_query, pools=False).collect()
    assert fast.schema == full.schema
    assert fast.equals(full)


def test_launches_keep_the_first_call_of_each_correlation(tmp_path: Path) -> None:
    events = [kf.launch(10, 2), kf.launch(20, 1), kf.launch(30, 2), kf.cpu_op("aten::mm", 40, 5)]
    rows = launches(_run(tmp_path, events)).select("rank", "correlation", "launch_us").rows()
    assert rows == [(0, 2, 10.0), (0, 1, 20.0)]
