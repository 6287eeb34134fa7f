"""`traceview hang` on hand-made Flight Recorder dumps (tests/flight_recorder_factory.py): the classes gloo
cannot show (NCCL point-to-point ops, several groups and their chains, a group whose members disagree, a rank
without a dump), the in-flight rule at its limits, the older format versions, and bad input: a malicious
pickle refused without running, truncated, empty and foreign files, one line each.

Expected values are the factory's own settings and arithmetic on them, never traceview's output.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.flight_recorder_factory import Op, RankDump, steady, write_dumps
from traceview.flight_recorder.analysis import analyze_hang
from traceview.flight_recorder.inputs import dump_paths, read_dumps
from traceview.flight_recorder.rules import DIVERGED_FACTOR, IN_FLIGHT_DURATIONS, IN_FLIGHT_FLOOR_S

WORLD = (0, 1, 2, 3)


def _hang(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", "hang", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def _analyse(folder: Path) -> Any:
    return analyze_hang(*read_dumps(dump_paths([folder])))


def _missing_rank_job(culprit_dumped_s: float, duration_ms: float | None = None) -> list[RankDump]:
    """Four ranks: 4 collectives done (one a second); ranks 0-2 enter #5 at 5 s, rank 3 never does and is
    dumped at `culprit_dumped_s`; the others at 100 s."""
    ops = steady(WORLD, 4, duration_ms=duration_ms)
    for rank in (0, 1, 2):
        ops[rank].append(Op("all_reduce", 5, created_s=5.0))
    return [RankDump(r, ops[r], dumped_s=culprit_dumped_s if r == 3 else 100.0) for r in WORLD]


@pytest.mark.parametrize("version", ["2.10", "2.4", "2.2"])
@pytest.mark.parametrize("as_json", [False, True])
def test_missing_rank_in_every_version(tmp_path: Path, version: str, as_json: bool) -> None:
    dumps = _missing_rank_job(culprit_dumped_s=100.0)
    for dump in dumps:
        dump.version = version
    write_dumps(tmp_path, dumps, as_json=as_json)
    analysis = _analyse(tmp_path)
    first = analysis.findings[0]
    assert (first.kind, first.status, first.group, first.seq) == ("missing_rank", "divergence", "0", 5)
    assert first.ranks_waiting == (0, 1, 2)
    assert first.ranks_apart == (3,)
    assert first.waited_s == pytest.approx(100.0 - 5.0)
    assert first.stack == "train_step (train.py:44)"  # the factory's frame of record 4 (40 + 4)
    table = analysis.positions.filter(analysis.positions["rank"] == 3).row(0, named=True)
    assert table["last_enqueued"] == 4
    assert table["waited_s"] is None  # its last collective (#4) completed: it waits in none
    waiting = analysis.positions.filter(analysis.positions["rank"] == 0).row(0, named=True)
    assert waiting["waited_s"] == pytest.approx(100.0 - 5.0)  # in #5 since 5 s, dumped at 100 s


def test_typed_lists_read_as_lists(tmp_path: Path) -> None:
    write_dumps(tmp_path, _missing_rank_job(100.0), typed_lists=True)
    assert b"build_intlist" in (tmp_path / "nccl_trace_rank_0").read_bytes()
    analysis = _analyse(tmp_path)
    assert analysis.positions["input_sizes"].to_list()[0] == "[[1024]]"


@pytest.mark.parametrize(
    ("culprit_dumped_s", "duration_ms", "verdict"),
    [
        (5.0 + IN_FLIGHT_FLOOR_S / 2, None, "agree"),  # younger than the floor
        (5.0 + IN_FLIGHT_FLOOR_S * 2, None, "unsure"),  # between the floor and 3x it
        (5.0 + IN_FLIGHT_FLOOR_S * DIVERGED_FACTOR, None, "divergence"),
        # a job whose collectives take 0.5 s: in flight under 10 x 0.5 = 5 s
        (5.0 + 0.5 * IN_FLIGHT_DURATIONS * 0.9, 500.0, "agree"),
        (5.0 + 0.5 * IN_FLIGHT_DURATIONS * 1.5, 500.0, "unsure"),
    ],
)
def test_young_collective_in_flight(
    tmp_path: Path, culprit_dumped_s: float, duration_ms: float | None, verdict: str
) -> None:
    write_dumps(tmp_path, _missing_rank_job(culprit_dumped_s, duration_ms))
    analysis = _analyse(tmp_path)
    assert analysis.verdict == verdict
    expected_limit = max(IN_FLIGHT_FLOOR_S, IN_FLIGHT_DURATIONS * (duration_ms or 0) / 1000)
    assert analysis.in_flight_limit_s == pytest.approx(expected_limit)
    done = _hang(tmp_path)
    assert done.returncode == (1 if verdict == "divergence" else 0), done.stderr
    assert done.stdout.splitlines()[0].startswith(
        {"agree": "HANG: the ranks agree", "unsure": "HANG UNSURE", "divergence": "HANG DIVERGED"}[verdict]
    )


def test_op_and_dtype_mismatch(tmp_path: Path) -> None:
    ops = steady(WORLD, 3)
    ops[0].append(Op("broadcast", 4, created_s=4.0))
    for rank in (1, 2, 3):
        ops[rank].append(Op("all_reduce", 4, created_s=4.0, dtype="BFloat16" if rank == 3 else "Float"))
    write_dumps(tmp_path, [RankDump(r, ops[r]) for r in WORLD])
    findings = {f.kind: f for f in _analyse(tmp_path).findings}
    assert findings["op_mismatch"].ranks_apart == (0,)
    assert findings["op_mismatch"].seq == 4
    assert {side.op: side.ranks for side in findings["op_mismatch"].sides} == {
        "all_reduce": (1, 2, 3),
        "broadcast": (0,),
    }
    dtype = findings["size_mismatch"]
    assert [(side.ranks, side.input_dtypes) for side in dtype.sides] == [
        ((1, 2), '["Float"]'),
        ((3,), '["BFloat16"]'),
    ]


def test_send_without_its_receive(tmp_path: Path) -> None:
    ops = steady(WORLD, 2)
    ops[0].append(Op("send", 1, peer=1, created_s=3.0))
    write_dumps(tmp_path, [RankDump(r, ops[r]) for r in WORLD])
    p2p = [f for f in _analyse(tmp_path).findings if f.kind == "unmatched_p2p"]
    assert [(f.ranks_waiting, f.ranks_apart, f.seq) for f in p2p] == [((0,), (1,), 1)]
    assert p2p[0].waited_s == pytest.approx(100.0 - 3.0)


def test_matched_sends_agree(tmp_path: Path) -> None:
    ops = steady(WORLD, 2)
    ops[0].append(Op("send", 1, peer=1, created_s=3.0, state="completed"))
    ops[1].append(Op("recv", 1, peer=0, created_s=3.0, state="completed"))
    write_dumps(tmp_path, [RankDump(r, ops[r]) for r in WORLD])
    assert _analyse(tmp_path).verdict == "agree"


def test_group_membership_disagreement(tmp_path: Path) -> None:
    dumps = [RankDump(r, steady(WORLD, 2)[r], groups={"0": WORLD, "7": (0, 1)}) for r in WORLD]
    dumps[2].groups["7"] = (0, 2)
    write_dumps(tmp_path, dumps)
    found = [f for f in _analyse(tmp_path).findings if f.kind == "membership"]
    assert [(f.group, f.ranks_apart) for f in found] == [("7", (2,))]


def test_wait_chain_across_groups(tmp_path: Path) -> None:
    """Ranks 0, 1 wait in group 0 #12 for 2 and 3; rank 2 waits in group 1 #57 for rank 3, which is behind."""
    groups = {"0": WORLD, "1": (2, 3)}
    ops = {r: [Op("all_reduce", s, created_s=float(s)) for s in range(1, 12)] for r in WORLD}
    for rank in (0, 1):
        ops[rank].append(Op("all_reduce", 12, created_s=12.0))
    for rank in (2, 3):
        ops[rank] += [Op("all_gather", s, group="1", created_s=20.0 + s / 100) for s in range(1, 57)]
    ops[2].append(Op("all_gather", 57, group="1", created_s=30.0))
    write_dumps(tmp_path, [RankDump(r, ops[r], groups=groups) for r in WORLD])
    analysis = _analyse(tmp_path)
    assert analysis.chains[0] == (
        "rank 0 waits in group 0 #12 for rank 2, which is in group 1 #57 (all_gather) for "
        "rank 3, which is in group 1 #56 (all_gather)"
    )
    assert (
        analysis.findings[0].group == "0"
    )  # the earliest: group 0 #12 was entered at 12 s, group 1 #57 at 30 s


def test_rank_without_a_dump_is_the_likeliest_culprit(tmp_path: Path) -> None:
    dumps = _missing_rank_job(100.0)[:3]  # rank 3 never wrote a dump
    write_dumps(tmp_path, dumps)
    done = _hang(tmp_path, "--json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    kinds = {(f["kind"], tuple(f["ranks_apart"])) for f in document["findings"]}
    assert ("missing_dump", (3,)) in kinds
    assert document["missing_ranks"] == [3]
    assert "likeliest culprit" in document["headline"]


def test_healthy_job_without_one_dump_exits_4(tmp_path: Path) -> None:
    ops = steady(WORLD, 5)
    write_dumps(tmp_path, [RankDump(r, ops[r]) for r in (0, 1, 2)])
    done = _hang(tmp_path)
    assert done.returncode == 4, done.stderr
    assert "no dump for rank(s) 3" in done.stderr
    assert "could not be read" not in done.stderr  # every dump given was read: only rank 3's is absent


def test_malicious_pickle_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(pickle.dumps({"version": "2.10", "entries": [Payload()]}, protocol=2))
    done = _hang(dump)
    assert done.returncode == 2
    assert not marker.exists()
    assert done.stderr.count("\n") == 1
    assert "pickle refused" in done.stderr
    assert "system" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "empty file"),
        (b"hello, not a dump\n", "neither a pickle nor JSON"),
        (json.dumps({"traceEvents": []}).encode(), "no `entries`"),
    ],
)
def test_empty_and_foreign_files_one_line(tmp_path: Path, content: bytes, said: str) -> None:
    bad = tmp_path / "dump_rank_0"
    bad.write_bytes(content)
    done = _hang(bad)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert said in done.stderr


def test_truncated_dumps_named_among_the_others(tmp_path: Path) -> None:
    paths = write_dumps(tmp_path, [RankDump(r, steady(WORLD, 3)[r]) for r in WORLD])
    whole = paths[1].read_bytes()
    paths[1].write_bytes(whole[: len(whole) // 2])
    (tmp_path / "nccl_trace_rank_2.gz").write_bytes(gzip.compress(paths[2].read_bytes())[:40])
    paths[2].unlink()
    done = _hang(tmp_path)
    assert done.returncode == 4, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "dump skipped" in line]
    assert len(warnings) == 2
    assert "2 dump(s) could not be read" in done.stderr
    assert "nccl_trace_rank_1" in warnings[0]
    assert "cut short" in warnings[0]
    alone = _hang(paths[1])
    assert alone.returncode == 2
    assert alone.stderr.count("\n") == 1


def test_gzip_dump_reads_as_the_plain_one(tmp_path: Path) -> None:
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    paths = write_dumps(plain, _missing_rank_job(100.0))
    packed.mkdir()
    for path in paths:
        target = packed / f"{path.name}.pickle.gz"
        target.write_bytes(gzip.compress(path.read_bytes()))
        os.utime(target, ns=(path.stat().st_mtime_ns, path.stat().st_mtime_ns))
    assert [f.sentence for f in _analyse(packed).findings] == [f.sentence for f in _analyse(plain).findings]


def test_folder_without_dumps_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    done = _hang(tmp_path)
    assert done.returncode == 2
    assert "without Flight Recorder dumps" in done.stderr
