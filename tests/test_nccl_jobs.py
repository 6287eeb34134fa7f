"""`traceview nccl` on a folder of logs read as jobs (docs/metrics.md, "NCCL log", "Jobs"): one job's ranks
each in their own log (one rank's log missing) and a second job whose init failed, in one folder: two jobs,
each communicator merged over its ranks (`7 of 8`, the missing rank named), failures in the first line, a
gate on them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from traceview.parsers import nccl_log

from tests import nccl_log_factory as nf
from tests.shared_data import REAL_NCCL_LOGS, requires_shared
from traceview.nccl.jobs import group_logs, nccl_jobs

WORLD, MISSING, HOSTS = 8, 5, ("gpu-a", "gpu-b")
JOB_A, GROUP_A, JOB_B = 0xA1A1A1A1, 0xA2A2A2A2, 0xB1B1B1B1
COLL = nf.COLL_FORMAT


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def rank_log(rank: int) -> str:
    """Rank `rank` of job A (8 ranks on two hosts): the world communicator and, for ranks 0-3, a group of
    four."""
    host = HOSTS[rank // 4]
    writer = nf.Writer(host, 1000 + rank, 2000 + rank, rank % 4)
    comm, group = f"0x{0x5000 + rank:x}", f"0x{0x6000 + rank:x}"
    right, left = (rank + 1) % WORLD, (rank - 1) % WORLD
    via = "P2P/IPC" if rank // 4 == right // 4 else "NET/IB/0/GDRDMA"
    lines = [
        writer.info("NCCL version 2.21.5+cuda12.4"),
        writer.info(nf.RING_LIST_NEW, 0, 2, "   0   1   2   3   4   5   6   7"),
        writer.info(nf.RING_LIST_NEW, 1, 2, "   0   1   2   3   4   5   6   7"),
        writer.info(nf.CHANNEL_NEW, 0, 2, left, left % 4, rank, rank % 4, via),
        writer.info(nf.trees_line(nf.TREES_NEW, (0, -1, -1, -1, rank, left))),
        writer.info(
            nf.INIT_FORMATS["2.21+"],
            "ncclCommInitRank",
            comm,
            rank,
            WORLD,
            rank % 4,
            rank % 4,
            0x1000 + rank,
            JOB_A,
        ),
        writer.info(nf.TUNING_NEW + " comm %s", "AllReduce", 1 << 20, "RING", "LL128", 0, 1, comm),
        writer.info(COLL, "AllReduce", 1, "0x1", "0x2", 1 << 18, 7, 0, 0, comm, WORLD, "0x9"),
    ]
    if rank < 4:
        lines.append(
            writer.info(
                nf.INIT_FORMATS["2.21+"],
                "ncclCommSplit",
                group,
                rank,
                4,
                rank % 4,
                rank % 4,
                0x1000 + rank,
                GROUP_A,
            )
        )
    return "\n".join(lines) + "\n"


def failed_job_log(rank: int) -> str:
    """Job B, two ranks on one host: rank 1's init fails (both on one GPU)."""
    writer = nf.Writer("gpu-c", 3000 + rank, 4000 + rank, 0)
    state = "COMPLETE" if rank == 0 else "START"
    init = (
        f"ncclCommInitRank comm 0x{0x7000 + rank:x} rank {rank} nranks 2 cudaDev 0 nvmlDev 0 busId 1000 "
        f"commId 0x{JOB_B:x} - Init {state}"
    )
    lines = [writer.info("NCCL version 2.21.5+cuda12.4"), writer.info(init)]
    if rank == 1:
        lines.append(
            writer.prefix("WARN").replace("NCCL WARN", "init.cc:900 NCCL WARN")
            + "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"
        )
        lines.append(writer.info("%s:%d -> %d", "init.cc", 1500, 5))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("nccl-logs")
    for rank in range(WORLD):
        if rank != MISSING:
            (logs / f"train.rank{rank}.log").write_text(rank_log(rank), encoding="utf-8")
    for rank in (0, 1):
        (logs / f"other-job.{rank}.log").write_text(failed_job_log(rank), encoding="utf-8")
    return logs


def test_logs_are_grouped_into_two_jobs(folder: Path) -> None:
    logs = [nccl_log.parse(path) for path in sorted(folder.iterdir())]
    groups = group_logs(logs)
    assert sorted(len(group) for group in groups) == [2, WORLD - 1]
    jobs = nccl_jobs(logs)
    train = next(job for job in jobs if len(job.logs) == WORLD - 1)
    rows = {row["comm_key"]: row for row in train.communicators.iter_rows(named=True)}
    world = rows[f"commId 0x{JOB_A:x}"]
    assert (world["nranks"], world["ranks_seen"], world["missing_ranks"]) == (WORLD, WORLD - 1, [MISSING])
    assert world["init_complete"] == WORLD - 1
    assert world["init_failed"] == 0
    assert world["hosts"] == list(HOSTS)
    assert set(world["transports"]) == {"P2P", "NET/IB"}
    assert (world["ring_channels"], world["tree_channels"]) == (2, 1)
    assert world["algo_proto"] == ["RING/LL128"]
    group = rows[f"commId 0x{GROUP_A:x}"]
    assert (group["nranks"], group["ranks_seen"], group["missing_ranks"]) == (4, 4, [])
    other = next(job for job in jobs if len(job.logs) == 2)
    assert other.communicators.row(0, named=True)["init_failed"] == 1
    assert other.errors >= 2  # the init that never completed, and the error trace / duplicate GPU
    assert train.errors == 0


def test_the_command_headlines_the_failure_and_shows_each_job(folder: Path) -> None:
    done = traceview("nccl", str(folder))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("NCCL FAILED: init failed x1 (job ")
    assert "Duplicate GPU" in done.stdout
    assert "Job 1 of 2" in done.stdout
    assert "Job 2 of 2" in done.stdout
    assert f"{WORLD - 1} of {WORLD} (missing {MISSING})" in done.stdout
    gated = traceview("nccl", str(folder), "--fail-on", "nccl_errors>0")
    assert gated.returncode == 1
    assert "nccl_errors>0" in gated.stderr
    misspelled = traceview("nccl", str(folder), "--fail-on", "nccl_error>0")
    assert misspelled.returncode == 2
    assert "did you mean nccl_errors" in misspelled.stderr
    assert misspelled.stdout == ""  # refused before any log was read


def test_globs_and_json(folder: Path) -> None:
    done = traceview("nccl", f"{folder}/train.rank*.log", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert len(document["jobs"]) == 1
    assert document["headline"].startswith("NCCL: 1 job(s), 2 communicator(s), no init error")
    assert document["figures"] == {"nccl_errors": 0.0, "nccl_fallbacks": 0.0}
    world = document["jobs"][0]["communicators"][0]
    assert world["missing_ranks"] == [MISSING]
    assert "hosts_by_rank" in document  # the logs read together, as before


def test_a_healthy_job_alone_passes_the_gate(folder: Path) -> None:
    done = traceview("nccl", f"{folder}/train.rank*.log", "--fail-on", "nccl_errors>0")
    assert done.returncode == 0, done.stderr


def test_fragments_that_state_no_version_nor_size_stay_apart(tmp_path: Path) -> None:
    """Logs with no commId, no NCCL version and no init line (pasted fragments): nothing links them, so each
    is a job of its own; two older-NCCL logs of one version and world size are one job."""
    for name, host in (("a.log", "gpu-x"), ("b.log", "gpu-y")):
        writer = nf.Writer(host, 10, 11, 0)
        (tmp_path / name).write_text(writer.info(nf.CHANNEL_NEW, 0, 2, 1, 1, 0, 0, "P2P/IPC") + "\n")
    for rank in (0, 1):
        writer = nf.Writer("gpu-z", 20 + rank, 30 + rank, rank)
        old_init = (
            f"comm 0x{0x900 + rank:x} rank {rank} nranks 2 cudaDev {rank} busId {rank}000 - Init COMPLETE"
        )
        lines = [writer.info("NCCL version 2.10.3+cuda11.0"), writer.info(old_init)]
        (tmp_path / f"old.{rank}.log").write_text("\n".join(lines) + "\n")
    logs = [nccl_log.parse(path) for path in sorted(tmp_path.iterdir())]
    groups = group_logs(logs)
    assert sorted(sorted(Path(log.path).name for log in group) for group in groups) == [
        ["a.log"],
        ["b.log"],
        ["old.0.log", "old.1.log"],
    ]


@requires_shared
def test_the_real_logs_each_their_own_job() -> None:
    """The real logs come from different threads and machines (their provenance): no two are one job."""
    paths = sorted(REAL_NCCL_LOGS.glob("*.log"))
    groups = group_logs([nccl_log.parse(path) for path in paths])
    assert sorted(len(group) for group in groups) == [1] * len(paths)


def test_a_communicator_seen_only_in_coll_lines_counts_no_rank_seen(tmp_path: Path) -> None:
    """A process that prints a communicator's COLL lines but not its init line (a pasted excerpt) shows the
    communicator without saying its rank in it: no rank is identified, so every rank of its size is named
    missing and the two counts add up to the size (0 + 8 == 8), never one rank seen beside all 8 missing."""
    writer = nf.Writer("gpu-a", 10, 11, 2)
    nranks = 8
    coll = writer.info(
        nf.COLL_FORMAT, "AllReduce", 0x13, "0x7f00", "0x7f00", 1024, 7, 0, 0, "0x7e00", nranks, "0x1"
    )
    (tmp_path / "excerpt.log").write_text(writer.info("NCCL version 2.18.1+cuda12.1") + "\n" + coll + "\n")
    (job,) = nccl_jobs([nccl_log.parse(tmp_path / "excerpt.log")])
    (row,) = job.communicators.iter_rows(named=True)
    assert (row["nranks"], row["ranks_seen"], row["missing_ranks"]) == (nranks, 0, list(range(nranks)))
    assert row["ranks_seen"] + len(row["missing_ranks"]) == row["nranks"]
