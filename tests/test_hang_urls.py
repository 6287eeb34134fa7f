"""`traceview hang` on dumps at URLs, listed as the other commands list them (`traceview.core.location`): a
prefix ("folder") of dumps, a glob, one object; a local S3-compatible server (moto) on the loopback stands
in for S3, as in tests/test_url_input.py (CI installs `traceview[remote]` and moto).

The dumps are hand-made (tests/flight_recorder_factory.py): rank 3 never enters collective 5 of group 0,
which ranks 0-2 entered at 5 s. An object's dump time is its store's modification time (the upload here),
checked against the clock around the upload.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.flight_recorder_factory import SECOND_NS, START_NS, Op, RankDump, steady, write_dumps
from tests.s3_server import s3_server
from traceview.flight_recorder.analysis import analyze_hang
from traceview.flight_recorder.inputs import dump_paths, read_dumps, traces_beside

NEEDED = ("fsspec", "s3fs", "moto", "flask")
if any(importlib.util.find_spec(name) is None for name in NEEDED):
    if os.environ.get("CI") == "true":
        raise ImportError("s3fs or moto is missing: .ci/run installs traceview[remote] and moto[server]")
    pytest.skip("URL input needs pip install 'traceview[remote]' 'moto[server]'", allow_module_level=True)

BUCKET, WORLD, CULPRIT = "hangs", (0, 1, 2, 3), 3
KINETO = {"schemaVersion": 1, "traceEvents": []}


def _job(folder: Path) -> list[Path]:
    ops = steady(WORLD, 4)
    for rank in WORLD:
        if rank != CULPRIT:
            ops[rank].append(Op("all_reduce", 5, created_s=5.0))
    return write_dumps(folder, [RankDump(rank, ops[rank]) for rank in WORLD])


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A moto S3 server with bucket `hangs`: `job/` holds the four dumps, a note and a Kineto trace (JSON
    named like a rank's file), `empty/` a note only. Yields the environment, the local copy and the clock
    around the upload (ns)."""
    local = tmp_path_factory.mktemp("hang_urls") / "job"
    with s3_server(BUCKET) as (env, storage):
        before = time.time_ns()
        for dump in _job(local):
            storage.put_file(str(dump), f"{BUCKET}/job/{dump.name}")
        after = time.time_ns()
        storage.pipe_file(f"{BUCKET}/job/notes_rank_7.txt", b"not a dump")
        storage.pipe_file(f"{BUCKET}/job/trace_rank_0.json", json.dumps(KINETO).encode())
        storage.pipe_file(f"{BUCKET}/empty/notes.txt", b"nothing here")
        yield {"env": env, "local": local, "uploaded": (before, after)}


def _hang(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", "hang", *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, check=False)


def test_a_prefix_lists_its_dumps_only(bucket: dict[str, Any]) -> None:
    found = dump_paths([f"s3://{BUCKET}/job/"])
    assert sorted(str(path) for path in found) == [f"s3://{BUCKET}/job/nccl_trace_rank_{r}" for r in WORLD]
    assert traces_beside([f"s3://{BUCKET}/job/"], found) == (1, (f"s3://{BUCKET}/job/trace_rank_0.json",))


def test_a_prefix_reads_as_the_local_folder(bucket: dict[str, Any]) -> None:
    remote = analyze_hang(*read_dumps(dump_paths([f"s3://{BUCKET}/job"]), workers=1))
    local = analyze_hang(*read_dumps(dump_paths([bucket["local"]]), workers=1))
    assert [(f.kind, f.group, f.seq, f.ranks_apart) for f in remote.findings] == [
        (f.kind, f.group, f.seq, f.ranks_apart) for f in local.findings
    ]
    assert remote.findings[0].ranks_apart == (CULPRIT,)
    assert {source for *_, source in remote.dumps} == {"file"}  # the object's modification time
    before, after = bucket["uploaded"]
    created_ns = START_NS + 5 * SECOND_NS  # the waiting ranks entered collective 5 at 5 s
    waited = remote.findings[0].waited_s
    assert waited is not None
    assert (before - created_ns) / 1e9 - 1.0 <= waited <= (after - created_ns) / 1e9 + 1.0  # 1 s: S3's grain


def test_a_glob_and_one_object(bucket: dict[str, Any]) -> None:
    glob = dump_paths([f"s3://{BUCKET}/job/nccl_trace_rank_[0-2]"])
    assert [str(path) for path in glob] == [f"s3://{BUCKET}/job/nccl_trace_rank_{r}" for r in (0, 1, 2)]
    one = dump_paths([f"s3://{BUCKET}/job/nccl_trace_rank_1"])
    assert [str(path) for path in one] == [f"s3://{BUCKET}/job/nccl_trace_rank_1"]
    assert traces_beside([f"s3://{BUCKET}/job/nccl_trace_rank_1"], one) is None  # no folder named


def test_cli_on_a_glob_names_the_missing_rank(bucket: dict[str, Any]) -> None:
    done = _hang(bucket["env"], f"s3://{BUCKET}/job/nccl_trace_rank_[0-2]", "--json")
    assert done.returncode == 1, done.stderr  # a divergence outranks the missing dump (4)
    first = json.loads(done.stdout)["findings"][0]
    assert (first["kind"], first["seq"], first["ranks_apart"]) == ("missing_dump", 5, [CULPRIT])


def test_a_prefix_without_dumps_is_a_usage_error(bucket: dict[str, Any]) -> None:
    done = _hang(bucket["env"], f"s3://{BUCKET}/empty/")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "Flight Recorder dumps" in done.stderr
