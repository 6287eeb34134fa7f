"""No output over any input, none cut short (docs/metrics.md, "Errors and exit codes"): every file a command
reads is refused as its output (`--history` alone is updated in place, atomically, under its lock); a write
to stdout that fails or falls short (EFBIG past `ulimit -f`, ENOSPC on /dev/full, an injected short write)
exits 2 in one line; nothing is analysed nor printed before a refusal of the output; a history on a full disk
survives whole; a history lock held elsewhere is waited for, then named."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import report_factory as rf
from traceview.cli import streams

TRACEVIEW = [sys.executable, "-m", "traceview"]


def traceview(*args: str, **settings: object) -> subprocess.CompletedProcess[str]:
    done: subprocess.CompletedProcess[str] = subprocess.run(  # type: ignore[call-overload]
        [*TRACEVIEW, *args], capture_output=True, text=True, timeout=300, check=False, **settings
    )
    return done


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs, a saved summary of the first, a thresholds file, a history, an NCCL log and a run.json."""
    root = tmp_path_factory.mktemp("outputs")
    for name in ("a", "b"):
        rf.write_run(root / name)
    (root / "b" / "nccl.log").write_text(
        "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 busId 100 - Init COMPLETE\n"
    )
    traces = [{"rank": rank, "path": f"rank{rank}.json"} for rank in (0, 1)]
    manifest = {"schema_version": "1.0", "kind": "traceview-run", "traces": traces}
    (root / "b" / "run.json").write_text(json.dumps(manifest))
    summary = traceview("summary", str(root / "a"), "--json")
    (root / "a.json").write_text(summary.stdout)
    (root / "t.toml").write_text("[compare]\n")
    assert traceview("trend", str(root / "a.json"), "--history", str(root / "h.parquet")).returncode == 0
    return root


OVER_AN_INPUT = [
    ("a thresholds file", ("compare", "{a.json}", "{b}", "--thresholds", "{t.toml}", "-o", "{t.toml}")),
    ("a saved summary", ("compare", "{a.json}", "{b}", "-o", "{a.json}")),
    ("a rank of a run", ("compare", "{a.json}", "{b}", "-o", "{b}/rank1.json")),
    ("a run.json", ("compare", "{a.json}", "{b}/run.json", "-o", "{b}/run.json")),
    ("a run's NCCL log", ("compare", "{a.json}", "{b}", "-o", "{b}/nccl.log")),
    ("trend's thresholds", ("trend", "{a.json}", "--thresholds", "{t.toml}", "-o", "{t.toml}")),
    ("trend's summary", ("trend", "{a.json}", "-o", "{a.json}")),
    ("trend's history", ("trend", "{a.json}", "--history", "{h.parquet}", "-o", "{h.parquet}")),
    ("report over a log", ("report", "{b}", "-o", "{b}/nccl.log")),
    ("report over run.json", ("report", "{b}/run.json", "-o", "{b}/run.json")),
]


def _args(args: tuple[str, ...], lab: Path) -> list[str]:
    names = {"{a.json}": "a.json", "{b}": "b", "{t.toml}": "t.toml", "{h.parquet}": "h.parquet"}
    out = []
    for arg in args:
        filled = arg
        for key, name in names.items():
            filled = filled.replace(key, str(lab / name))
        out.append(filled)
    return out


@pytest.mark.parametrize(("kind", "args"), OVER_AN_INPUT, ids=[case[0] for case in OVER_AN_INPUT])
def test_no_output_over_any_input(lab: Path, kind: str, args: tuple[str, ...]) -> None:
    """`compare --thresholds t.toml -o t.toml` replaced the thresholds with the page (exit 0)."""
    argv = _args(args, lab)
    target = Path(argv[argv.index("-o") + 1])
    before = digest(target)
    done = traceview(*argv)
    assert done.returncode == 2, done.stderr
    assert "is an input of this command" in one_line(done)
    assert done.stdout == ""
    assert digest(target) == before


def test_compare_to_dev_full_prints_nothing_before_its_refusal(lab: Path) -> None:
    """`compare -o /dev/full` printed the whole analysis, then exited 2."""
    done = traceview("compare", str(lab / "a.json"), str(lab / "b"), "-o", "/dev/full")
    assert done.returncode == 2
    assert "-o /dev/full: is a character device, not a file" in one_line(done)
    assert done.stdout == ""


def _file_size_limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("command", [("summary", "--json"), ("summary",), ("collectives",)])
def test_stdout_past_the_file_size_limit_is_one_line(
    lab: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """`summary --json > file` under `ulimit -f` exited 0 with the JSON cut at 4,096 bytes."""
    out = tmp_path / "out"
    with out.open("wb") as handle:
        done = subprocess.run(
            [*TRACEVIEW, command[0], str(lab / "a"), *command[1:]],
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            preexec_fn=lambda: _file_size_limit(4096),
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert "standard output: cannot write: File too large" in one_line(done)
    assert out.stat().st_size <= 4096  # the redirect keeps what was written before the failure


def test_stdout_on_a_full_device_is_one_line(lab: Path) -> None:
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [*TRACEVIEW, "summary", str(lab / "a"), "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 2
    assert "standard output: cannot write: No space left on device" in one_line(done)


def test_a_short_write_is_finished_or_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that takes part of the bytes is continued; one that takes none, or fails, raises."""
    taken: list[bytes] = []

    def in_parts(descriptor: int, data: memoryview) -> int:
        taken.append(bytes(data[:3]))
        return min(3, len(data))

    monkeypatch.setattr(streams.os, "write", in_parts)
    streams.write_all(1, b"0123456789")
    assert b"".join(taken) == b"0123456789"
    monkeypatch.setattr(streams.os, "write", lambda descriptor, data: 0)
    with pytest.raises(OSError, match="short write: 10 of 10 bytes not written"):
        streams.write_all(1, b"0123456789")

    def no_space(descriptor: int, data: memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    read, write = os.pipe()
    guard = streams.GuardedStream(os.fdopen(write, "w"), "standard output", quiet_errors=False)
    monkeypatch.setattr(streams.os, "write", no_space)
    with pytest.raises(streams.StdoutFailed, match="standard output: cannot write: No space left on device"):
        guard.write("x" * 100)
    os.close(read)


def test_a_broken_pipe_stays_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    guard = streams.GuardedStream(os.fdopen(write, "w"), "standard output", quiet_errors=False)
    os.close(read)
    with pytest.raises(streams.StdoutClosed):
        guard.write("x")


def test_a_held_history_lock_is_waited_for_then_named(lab: Path, tmp_path: Path) -> None:
    """A history lock held by another process made `trend` wait forever without a word."""
    history = tmp_path / "h.parquet"
    shutil.copy(lab / "h.parquet", history)
    lock = tmp_path / "h.parquet.lock"
    holder = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    os.write(holder, b"pid 4242 on node-7 since 2026-11-20T02:00:00Z\n")
    try:
        started = time.monotonic()
        done = traceview("trend", str(lab / "a.json"), "--history", str(history), "--lock-timeout", "1")
        waited = time.monotonic() - started
    finally:
        os.close(holder)
    line = one_line(done)
    assert done.returncode == 2
    assert "locked by another writer (pid 4242 on node-7 since 2026-11-20T02:00:00Z" in line
    assert "waited 1 s (--lock-timeout)" in line
    assert waited < 60
    assert digest(history) == digest(lab / "h.parquet")
    again = traceview("trend", str(lab / "a.json"), "--history", str(history), "--lock-timeout", "1")
    assert again.returncode == 0, again.stderr  # released: the next writer goes on
    assert lock.read_text() == ""  # the holder's line went with its hold


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="cannot mount a small file system here (unshare -rm)")
def test_history_and_report_on_a_really_full_file_system(lab: Path, tmp_path: Path) -> None:
    """`trend --history` on a full disk exited 3 (a polars error); the old history must survive, one line."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f'mount -t tmpfs -o size=256k tmpfs "{disk}" && cp "{lab}/h.parquet" "{disk}/" && '
        f'touch "{disk}/h.parquet.lock" && (cat /dev/zero > "{disk}/fill" 2>/dev/null; true) && '
        f'sha256sum "{disk}/h.parquet" && '
        f'"$0" -m traceview trend "{lab}/a.json" --history "{disk}/h.parquet"; echo "trend=$?"; '
        f'"$0" -m traceview report "{lab}/a" -o "{disk}/r.html"; echo "report=$?"; '
        f'sha256sum "{disk}/h.parquet"; ls -a "{disk}"'
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, sys.executable],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = done.stdout.splitlines()
    assert "trend=2" in said, done.stdout + done.stderr
    assert "report=2" in said
    sums = [line.split()[0] for line in said if line.endswith("/h.parquet")]
    assert len(sums) == 2
    assert sums[0] == sums[1]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert errors[0].startswith("traceview: error: --history ")
    assert "No space left on device" in errors[0]
    assert errors[-1].startswith("traceview: error: -o ")
    assert "Traceback" not in done.stderr
    assert not [line for line in said if line.startswith(".traceview-")]
