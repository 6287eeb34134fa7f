"""The first corpus's last six and the second's last seven: a bomb judged by the bytes it would produce
against a budget (a 10 MB line is no bomb; a 1 GiB bomb is refused within a 512 MiB address space), a
file named `.zst` or `.xz` that is not what its name says (skipped, named: exit 4), an empty thresholds file
(the defaults), `trend` refusing a trace or /dev/null in one line."""

from __future__ import annotations

import gzip
import json
import lzma
import resource
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests import report_factory as rf
from traceview.core.errors import InputError
from traceview.core.reading import ReadLimits, open_bytes

MIB = 1 << 20
NCCL_LINES = (
    b"node-a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 100 - Init COMPLETE\n"
    b"node-a:1:1 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 1 busId 200 - Init COMPLETE\n"
)


def traceview(*args: str, limit_as: int | None = None) -> subprocess.CompletedProcess[str]:
    def limited() -> None:
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    return subprocess.run(
        [sys.executable, "-m", "traceview", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=limited,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def _bomb(path: Path, size: int) -> Path:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\n" * MIB
    with path.open("wb") as out:
        for _ in range(size // MIB):
            out.write(packer.compress(block))
        out.write(packer.flush())
    return path


def test_a_10_mb_line_that_compresses_well_is_no_bomb(tmp_path: Path) -> None:
    """It was refused as a decompression bomb (exit 2): 10 MB inflating 1,000 times is within the budget."""
    log = tmp_path / "long.log.gz"
    log.write_bytes(gzip.compress(NCCL_LINES + b"node-a:1:1 [0] NCCL INFO " + b"x" * (10 * MIB) + b"\n"))
    assert (10 * MIB) / log.stat().st_size > 200
    done = traceview("nccl", str(log))
    assert "decompression bomb" not in done.stderr
    assert done.returncode == 0, done.stderr


def _drain(stream: Any) -> None:
    while stream.read(MIB):
        pass


def test_the_bytes_it_would_produce_decide(tmp_path: Path) -> None:
    """The same ratio: refused when the whole file would pass the budget, read when it would not."""
    bomb = _bomb(tmp_path / "bomb.log.gz", 64 * MIB)
    limits = ReadLimits(ratio_after_bytes=MIB, bomb_budget_bytes=32 * MIB)
    stream, _ = open_bytes(bomb, limits)
    with stream, pytest.raises(InputError, match=r"toward about \d+ bytes, past the budget of 33554432"):
        _drain(stream)
    stream, _ = open_bytes(bomb, ReadLimits(ratio_after_bytes=MIB, bomb_budget_bytes=128 * MIB))
    with stream:
        assert sum(iter(lambda: len(stream.read(MIB)), 0)) == 64 * MIB


@pytest.mark.parametrize("command", ["summary", "nccl"])
def test_a_1_gib_bomb_is_refused_within_512_mib(tmp_path: Path, command: str) -> None:
    """It peaked at 540 MiB: under an address-space limit of 512 MiB it is refused in one line."""
    bomb = _bomb(tmp_path / ("bomb.json.gz" if command == "summary" else "bomb.log.gz"), 1 << 30)
    done = traceview(command, str(bomb), limit_as=512 * MIB)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "a decompression bomb?" in one_line(done)


def test_a_file_not_what_its_name_says_is_named_and_skipped(tmp_path: Path) -> None:
    """Such a file was read as what it held, exit 0: alone it is refused (exit 2), in a run skipped (4)."""
    run = rf.write_run(tmp_path / "run")
    (run / "rank0.json").rename(run / "rank0.json.zst")  # plain JSON named zstd
    done = traceview("summary", str(run / "rank0.json.zst"))
    assert done.returncode == 2
    said = "rank0.json.zst: named as zstd (.zst) but holds no compressed data (not its magic bytes): not read"
    assert one_line(done).endswith(said)
    (run / "rank1.json.xz").write_bytes(gzip.compress((run / "rank1.json").read_bytes()))  # gzip named xz
    (run / "rank1.json").unlink()
    (run / "rank2.json.xz").write_bytes(lzma.compress((run / "rank0.json.zst").read_bytes()))  # as it says
    done = traceview("summary", str(run), "--json")
    assert done.returncode == 4, done.stderr
    assert "rank1.json.xz: named as xz (.xz) but holds gzip data: not read" in done.stderr
    assert said in done.stderr
    assert json.loads(done.stdout)["run"]["files"] == [str(run / "rank2.json.xz")]


def test_an_empty_thresholds_file_means_the_defaults(tmp_path: Path) -> None:
    """It was refused; it states no thresholds."""
    run = rf.write_run(tmp_path / "run")
    saved = tmp_path / "a.json"
    saved.write_text(traceview("summary", str(run), "--json").stdout)
    plain = traceview("compare", str(saved), str(run), "--json")
    for text in ("", "\n\n", "# no thresholds yet\n"):
        empty = tmp_path / "t.toml"
        empty.write_text(text)
        done = traceview("compare", str(saved), str(run), "--json", "--thresholds", str(empty))
        assert done.returncode == plain.returncode == 0, done.stderr
        assert json.loads(done.stdout)["settings"] == json.loads(plain.stdout)["settings"]
        assert traceview("trend", str(saved), "--thresholds", str(empty)).returncode == 0


@pytest.mark.parametrize("given", ["trace", "/dev/null", "text"])
def test_trend_refuses_what_is_no_summary_in_one_line(tmp_path: Path, given: str) -> None:
    """Three lines (a warning, the refusal, the summary of the skipped) became one."""
    run = rf.write_run(tmp_path / "run")
    (tmp_path / "notes.txt").write_text("not a summary\n")
    path = {"trace": str(run / "rank0.json"), "/dev/null": "/dev/null", "text": str(tmp_path / "notes.txt")}
    done = traceview("trend", path[given])
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"traceview: error: {path[given]}: ")
    assert "not a summary" not in line.replace("not a traceview summary", "")  # the text is never quoted
