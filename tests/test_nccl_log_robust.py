"""NCCL_DEBUG log parser on hostile input: huge lines, adversarial text for every pattern, broken gzip,
invalid UTF-8, terminal escapes.

Nothing here is timed: a pattern that backtracks catastrophically does not finish on these inputs (a quadratic
regex on a 64 KiB line is billions of steps), so "the test returns" is the check.
"""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from traceview.parsers import nccl_log
from traceview.parsers.nccl_log._patterns import (
    BODY_PATTERNS,
    COLL_LINE,
    FOREIGN_PATTERNS,
    HOST_TAIL,
    LAUNCHER_PID,
    LINE_START,
    RECORD_ANCHOR,
)
from traceview.reports.text.nccl import render_nccl

from tests.nccl_log_factory import COLL_FORMAT, Writer
from traceview.core.errors import InputError

W = Writer("node-a", 100, 101, 0)
COLL = W.info(COLL_FORMAT, "AllReduce", 1, "0x1", "0x2", 256, 7, 0, 0, "0xa0", 2, "0x9")

# One text each pattern of the tables must match (body patterns at the start of a record body, foreign
# patterns anywhere in a line), in table order: the seeds of the adversarial inputs.
BODY_EXAMPLES = (
    "AllReduce: opCount 1a sendbuff 0x7f00 recvbuff 0x7f00 count 1000 datatype 7 op 0 root 0 comm 0x4000 "
    "[nranks=8] stream 0x99 task 0 globalrank 3",
    "Channel 02/1 : 0[0] -> 3[2] [receive] via NET/IB/0/GDRDMA",
    "Channel 00/02 :    0   3   2   1",
    "Trees [0] 4/-1/-1->2->0|0->2->4/-1/-1 [1] -1/-1/-1->3->2",
    "AllReduce: 1048576 Bytes -> Algo RING proto LL128 time 12.5 channel{Lo..Hi}={0..15} comm 0x4000",
    "ncclCommInitRankConfig comm 0x4000 rank 5 nranks 8 cudaDev 3 nvmlDev 3 busId 4f000 commId 0xabc - Init "
    "COMPLETE",
    "comm 0x4000 rank 5 nRanks 8 nNodes 2 localRanks 4 localRank 1 MNNVL 0",
    "24 coll channels, 2 collnet channels, 16 nvls channels, 32 p2p channels, 2 p2p channels per peer",
    "Init timings - ncclCommInitRank: rank 0 nranks 8 total 1.23 (kernels 0.1, alloc 0.2)",
    "NCCL_SOCKET_IFNAME set by environment to eth0.",
    "NCCL version 2.21.5+cuda12.4",
    "Using network Socket",
    "Bootstrap : Using [0]eth0:10.0.0.1<0>",
    "P2P plugin IBext",
    "Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
    "Assigned NET plugin Socket to comm",
    "Successfully loaded external network plugin /opt/rocm/lib/librccl-net.so",
    "Using non-device net plugin version 0",
    "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>",
    "Connected all rings",
    "transport/net.cc:870 -> 2",
)
FOREIGN_EXAMPLES = (
    "[PG ID 0 PG GUID 0(default_pg) Rank 5] ProcessGroupNCCL created ncclComm_ 0x4000 on CUDA device: 3",
    "[E ProcessGroupNCCL.cpp:821] [Rank 5] Watchdog caught collective operation timeout",
    "RuntimeError: NCCL error in: x.cpp:12, unhandled system error",
    "NCCL version 2.18.1+cuda12.1",
)
# The other regexes of the module and how the parser applies them, with their seed.
OTHER_REGEXES = (
    (RECORD_ANCHOR, "search", "[0] misc/socket.cc:50 NCCL WARN "),
    (LINE_START, "match", "node-a:100:101 [0] misc/socket.cc:50 NCCL INFO "),
    (COLL_LINE, "match", COLL),
    (LAUNCHER_PID, "search", "(RayTrainWorker pid=400, ip=10.0.0.4)"),
    (HOST_TAIL, "search", "node-a.b_c:100:101"),
)
TABLE = [
    *((p.regex, "match", e) for p, e in zip(BODY_PATTERNS, BODY_EXAMPLES, strict=True)),
    *((p.regex, "search", e) for p, e in zip(FOREIGN_PATTERNS, FOREIGN_EXAMPLES, strict=True)),
    *OTHER_REGEXES,
]
_TOKEN = re.compile(r"\d+|[A-Za-z]+|\s+|.")


def adversarial(seed: str, length: int) -> list[str]:
    """Lines of about `length` characters from `seed`: each of its tokens repeated in place until the line is
    that long, followed by nothing, by a character no pattern accepts, or by the rest of the seed."""
    lines = []
    for token in _TOKEN.finditer(seed):
        head, piece, rest = seed[: token.start()], token.group(), seed[token.end() :]
        filler = (piece * (length // len(piece) + 1))[:length]
        lines += [head + filler + tail for tail in ("", "\x00", rest)]
    return lines


def test_every_pattern_has_a_matching_seed() -> None:
    for regex, how, seed in TABLE:
        assert getattr(regex, how)(seed) is not None, (regex.pattern, seed)


@pytest.mark.parametrize("index", range(len(TABLE)))
def test_no_pattern_backtracks_catastrophically(index: int) -> None:
    regex, how, seed = TABLE[index]
    for line in adversarial(seed, nccl_log.MAX_LINE_CHARS):  # the longest line the parser matches
        getattr(regex, how)(line)  # returns: linear, or close to it


def test_adversarial_records_parse(tmp_path: Path) -> None:
    """The adversarial bodies as whole records of one log and the foreign ones as lines, under the length cap:
    every line is read, numbers too large for int64 become nulls (no crash)."""
    bodies = [line for seed in BODY_EXAMPLES for line in adversarial(seed, 2048)]
    foreign = [line for seed in FOREIGN_EXAMPLES for line in adversarial(seed, 2048)]
    path = tmp_path / "adversarial.log"
    text = "".join(W.info(body) + "\n" for body in bodies) + "".join(line + "\n" for line in foreign)
    path.write_text(text.replace("\x00", "#"), encoding="utf-8")
    log = nccl_log.parse(path)
    assert log.lines_total == len(bodies) + len(foreign)
    assert log.records >= len(bodies)


def test_numbers_too_large_become_null(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    huge = "9" * 30
    line = W.info(COLL_FORMAT, "AllReduce", 1, "0x1", "0x2", 0, 7, 0, 0, "0xa0", 2, "0x9")
    path.write_text(line.replace("count 0 ", f"count {huge} ") + "\n", encoding="utf-8")
    log = nccl_log.parse(path)
    assert log.collectives["count"].to_list() == [None]
    assert log.collectives["size_bytes"].to_list() == [None]


def test_a_huge_single_line_is_drained_not_matched(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    huge = W.prefix() + "Channel 00 :" + " 1" * (1 << 20) + " x"  # 2 MB: a ring line that never ends right
    path.write_text(f"{COLL}\n{huge}\n{COLL}\n", encoding="utf-8")
    log = nccl_log.parse(path)
    assert (log.lines_total, log.lines_too_long, log.lines_skipped) == (3, 1, 1)
    assert log.collective_calls_seen == 2
    assert any("longer than" in note for note in log.notes)


def test_a_huge_line_without_newline_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "tail.log"
    path.write_text(COLL + "\n" + "NCCL INFO " * 20_000, encoding="utf-8")
    log = nccl_log.parse(path)
    assert (log.lines_total, log.lines_too_long, log.collective_calls_seen) == (2, 1, 1)


def test_invalid_utf8_is_replaced_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "bytes.log"
    bad = W.prefix().encode() + b"NCCL_SOCKET_IFNAME set by environment to e\xffth\xfe0\n"
    path.write_bytes(COLL.encode() + b"\n" + bad + b"\xc3\n")  # \xc3 alone: a cut two-byte sequence
    log = nccl_log.parse(path)
    assert log.chars_replaced == 3
    assert log.settings["NCCL_SOCKET_IFNAME"] == "e\ufffdth\ufffd0"
    assert log.collective_calls_seen == 1


def _gzip(text: str) -> bytes:
    return gzip.compress(text.encode())


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    whole = _gzip("".join(f"{COLL}\n" for _ in range(2000)))
    path = tmp_path / "cut.log.gz"
    path.write_bytes(whole[: len(whole) // 2])
    log = nccl_log.parse(path)
    assert 0 < log.collective_calls_seen < 2000
    assert any("truncated gzip" in note for note in log.notes)


def test_truncated_gzip_without_records_is_refused(tmp_path: Path) -> None:
    whole = _gzip("hello\n" * 5000)
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="truncated gzip"):
        nccl_log.parse(path)


@pytest.mark.parametrize("damage", ["header", "stream"])
def test_corrupt_gzip_is_one_input_error(tmp_path: Path, damage: str) -> None:
    data = bytearray(_gzip("".join(f"{COLL} {i}\n" for i in range(2000))))
    if damage == "header":
        data[:4] = b"BAD!"
    else:
        middle = len(data) // 2
        data[middle : middle + 64] = bytes(64)  # zeros inside the deflate stream
    path = tmp_path / "broken.log.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError) as raised:
        nccl_log.parse(path)
    assert str(path) in str(raised.value)
    assert "\n" not in str(raised.value)


def test_terminal_shows_escapes_not_control_characters(tmp_path: Path) -> None:
    path = tmp_path / "escapes.log"
    lines = [
        W.info("NCCL version 2.18.1\x1b[2J+cuda12"),
        W.info("NCCL_SOCKET_IFNAME set by environment to eth0\x1b]0;owned\x07"),
        W.prefix("WARN") + "peer said \u202eevil\x1b[31m red",
        COLL,
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = io.StringIO()
    render_nccl(nccl_log.parse(path), Console(file=out, width=400, force_terminal=False))
    printed = out.getvalue()
    assert not {"\x1b", "\u202e", "\x07"} & set(printed)
    assert [shown for shown in ("\\x1b", "\\u202e", "\\x07") if shown not in printed] == []
