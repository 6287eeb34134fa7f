"""The Kineto traces of the same job joined to the dumps: where each rank's trace stopped, in the first
finding's group (`traceview.flight_recorder.traces`).

Hand-made dumps (tests/flight_recorder_factory.py): rank 3 never enters collective 5 of group 0. Hand-made
traces (tests/kineto_factory.py) with `record_param_comms` naming the group and the sequence number, with
neither (the `c10d::*` operator alone, as gloo's traces are), and none; and a real NCCL trace
(hta_nccl_data, whose `record_param_comms` name the group and no sequence number) counted by a plain scan of
its JSON. The gloo job whose ranks flushed a profiled window before the hang is in tests/test_hang_job.py.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import kineto_factory as kf
from tests.flight_recorder_factory import Op, RankDump, steady, write_dumps
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.flight_recorder.inputs import dump_paths
from traceview.flight_recorder.job import hang_job

WORLD, CULPRIT, PLANTED = (0, 1, 2, 3), 3, 5


def _dumps(folder: Path) -> Path:
    ops = steady(WORLD, PLANTED - 1)
    for rank in WORLD:
        if rank != CULPRIT:
            ops[rank].append(Op("all_reduce", PLANTED, created_s=5.0))
    write_dumps(folder, [RankDump(rank, ops[rank]) for rank in WORLD])
    return folder


def _comms(count: int, group: str | None, with_seq: bool) -> list[kf.Event]:
    """`count` all-reduces 100 us apart: the `c10d::allreduce_` operator with a `record_param_comms` inside
    naming `group` (and the sequence number 1, 2, ...), or the operator alone when `group` is None."""
    events = []
    for seq in range(1, count + 1):
        ts = 100.0 * seq
        events.append(kf.cpu_op("c10d::allreduce_", ts, 50.0))
        if group is not None:
            args: dict[str, Any] = {"Collective name": "allreduce", "Process Group Name": group}
            args |= {"Seq": seq} if with_seq else {}
            events.append(kf.cpu_op("record_param_comms", ts + 1, 40.0, args=args))
    return events


def _trace(folder: Path, rank: int, events: list[kf.Event]) -> None:
    kf.write(kf.document(events, rank=rank, world_size=len(WORLD)), folder / f"trace_rank{rank}.json")


def test_sequence_numbers_and_order_and_no_trace(tmp_path: Path) -> None:
    folder = _dumps(tmp_path / "job")
    _trace(folder, 0, _comms(PLANTED, "0", with_seq=True))  # it entered the planted one too
    _trace(folder, 1, _comms(PLANTED - 2, "0", with_seq=False))  # the window stopped two earlier
    _trace(folder, 2, _comms(PLANTED - 1, None, with_seq=False))  # no group named (the operator alone)
    _trace(folder, 3, [kf.cpu_op("aten::mm", 10.0, 5.0)])  # profiled, but no collective
    analysis = hang_job([folder])
    assert analysis.findings[0].ranks_apart == (CULPRIT,)
    assert analysis.kineto_traces is not None
    assert len(analysis.kineto_traces) == 4
    sides = {side.ranks: side for side in analysis.kineto_at_first}
    assert set(sides) == {(0,), (1,), (2,), (3,)}
    assert (sides[(0,)].state, sides[(0,)].collective, sides[(0,)].seq) == ("seq", "AllReduce", PLANTED)
    assert (sides[(1,)].state, sides[(1,)].order, sides[(1,)].seq) == ("order", PLANTED - 2, None)
    assert (sides[(2,)].state, sides[(2,)].order) == ("order_any_group", PLANTED - 1)
    assert sides[(3,)].state == "no_call"
    assert f"#{PLANTED} of group 0" in sides[(0,)].sentence
    assert "its trace recorded no collective" in sides[(3,)].sentence


def test_ranks_without_a_trace_are_said(tmp_path: Path) -> None:
    folder = _dumps(tmp_path / "job")
    for rank in (0, 1):
        _trace(folder, rank, _comms(PLANTED, "0", with_seq=True))
    analysis = hang_job([folder])
    sides = [(side.ranks, side.state) for side in analysis.kineto_at_first]
    assert sides == [((0, 1), "seq"), ((2, 3), "no_trace")]
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "hang", str(folder), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    document = json.loads(done.stdout)
    assert [side["ranks"] for side in document["kineto_at_first_finding"]] == [[0, 1], [2, 3]]
    assert sorted(row["rank"] for row in document["kineto_last_calls"]) == [0, 1]


def test_no_trace_written(tmp_path: Path) -> None:
    analysis = hang_job([_dumps(tmp_path / "job")])
    assert analysis.kineto_traces == ()
    assert analysis.kineto_last_calls is None
    assert analysis.kineto_at_first == ()
    text = subprocess.run(
        [sys.executable, "-m", "traceview", "hang", str(tmp_path / "job")],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert "none written (a hung job rarely flushes its profiler)" in text


def test_a_compressed_trace_named_by_rank_is_not_taken_for_a_dump(tmp_path: Path) -> None:
    folder = _dumps(tmp_path / "job")
    kf.write(kf.document(_comms(2, "0", True), rank=1), folder / "rank1.json.gz")
    assert [path.name for path in dump_paths([folder])] == [f"nccl_trace_rank_{r}" for r in WORLD]


@requires_shared
def test_real_nccl_trace_group_and_order(tmp_path: Path) -> None:
    """hta_nccl_data (rank 0 of 2): its `record_param_comms` name group "0" and no sequence number; the
    expected order is their count in the JSON, the expected collective the last one's `Collective name`."""
    source = REAL_KINETO / "hta_nccl_data" / "nccl_data.json.gz"
    events = json.loads(gzip.decompress(source.read_bytes()))["traceEvents"]
    comms = sorted(
        (event["ts"], event["args"]["Collective name"])
        for event in events
        if event.get("name") == "record_param_comms" and event["args"].get("Process Group Name") == "0"
    )
    assert comms
    assert comms[-1][1] == "allreduce"
    folder = _dumps(tmp_path / "job")
    shutil.copy(source, folder / source.name)
    analysis = hang_job([folder])
    sides = {side.ranks[0]: side for side in analysis.kineto_at_first}
    assert (sides[0].state, sides[0].collective, sides[0].order) == ("order", "AllReduce", len(comms))
    assert sides[1].ranks == (1, 2, 3)
    assert sides[1].state == "no_trace"


@pytest.mark.parametrize("unreadable", [b"{not json", b""])
def test_an_unreadable_trace_is_named(tmp_path: Path, unreadable: bytes) -> None:
    folder = _dumps(tmp_path / "job")
    _trace(folder, 0, _comms(PLANTED, "0", with_seq=True))
    (folder / "broken.pt.trace.json.gz").write_bytes(gzip.compress(unreadable))
    analysis = hang_job([folder])
    assert [Path(path).name for path, _ in analysis.kineto_unread] == ["broken.pt.trace.json.gz"]
    assert analysis.kineto_at_first[0].ranks == (0,)
