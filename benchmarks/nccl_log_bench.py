"""Throughput of the NCCL_DEBUG log parser: write a synthetic log of SIZE_MB (default 1024) and parse it.

    python benchmarks/nccl_log_bench.py [SIZE_MB [DISTINCT_COUNTS]]
    python benchmarks/nccl_log_bench.py long [SIZE_MB]

`long` (SIZE_MB default 10) times single lines of SIZE_MB each, the hostile inputs of a fuzzer (record starts
repeated, a ring line that never ends right, a COLL prefix and digits, plain text without a newline), against
the baseline of an ordinary log of the same size in the same run, and prints each one's time and its ratio to
the baseline: the parser drains such a line unread (`parsers.nccl_log.MAX_LINE_CHARS`), so the ratio stays
near or under 1. Then the same text cut into 60 KB lines, which are matched: the time stays linear in the size
(a few times the baseline where every line holds thousands of records).

The log is written streaming (a block of lines repeated with fresh opCounts): per block, 8 processes' COLL
lines (80%), TUNING lines, transport and init lines, one WARN, and non-NCCL application lines (skipped).
DISTINCT_COUNTS 0 (the default) gives every block a new element count, so the distinct call keys the parser
counts by grow with the log (a quarter of the COLL lines: the worst case); N > 0 cycles the count over N
values, as a training job's fixed set of bucket sizes does (the call totals then stay a few hundred rows).
Prints MB/s of parsing and the peak resident memory of the process (resource.getrusage).
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

from traceview.parsers import nccl_log

COLL = (
    "node{node}:{pid}:{pid} [{dev}] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f00c4000000 recvbuff "
    "0x7f00bc000000 count {count} datatype 7 op 0 root 0 comm 0x5631f0816b{dev}0 [nranks=64] "
    "stream 0x5631f0021140\n"
)
OTHER = (
    "node{node}:{pid}:{pid} [{dev}] NCCL INFO AllReduce: {count} Bytes -> Algo RING proto SIMPLE "
    "channel{{Lo..Hi}}={{0..31}}\n",
    "node{node}:{pid}:{pid} [{dev}] NCCL INFO Channel 02/0 : {dev}[{dev}] -> 9[1] [send] "
    "via NET/IB/0/GDRDMA\n",
    "node{node}:{pid}:{pid} [{dev}] NCCL INFO comm 0x5631f0816b{dev}0 rank {dev} nranks 64 cudaDev {dev} "
    "nvmlDev {dev} busId 1b000 commId 0x996ee6f117cb8e1e - Init COMPLETE\n",
    "node{node}:{pid}:{pid} [{dev}] misc/socket.cc:50 NCCL WARN Net : Connection closed by remote peer\n",
    "[rank{dev}]: step {op} loss 0.{count} lr 3e-4 tokens/s 123456\n",
)


def write_log(path: Path, size_bytes: int, distinct_counts: int = 0) -> int:
    """Write about `size_bytes` of synthetic log to `path`; return the bytes written (module doc)."""
    written = 0
    op = 0
    with path.open("w", encoding="utf-8") as handle:
        while written < size_bytes:
            block: list[str] = []
            for dev in range(8):
                count = 1000 + (op % distinct_counts if distinct_counts else op)
                fields = {"node": dev // 4, "pid": 1000 + dev, "dev": dev, "count": count, "op": op}
                block.extend(COLL.format(**fields) for _ in range(4))
                block.append(OTHER[(op + dev) % len(OTHER)].format(**fields))
            op += 1
            text = "".join(block)
            handle.write(text)
            written += len(text)
    return written


MATCHED_CHARS = 60_000
"""Length of the hostile lines that are matched (under `parsers.nccl_log.MAX_LINE_CHARS`)."""
LONG_LINES = {
    "record starts repeated": "h:1:1 [0] NCCL INFO ",
    "ring line, never ends right": " 1",
    "COLL prefix then digits": "0",
    "plain text, no newline": "NCCL INFO via ",
}
LONG_LINE_HEADS = {
    "record starts repeated": "",
    "ring line, never ends right": "h:1:1 [0] NCCL INFO Channel 00 :",
    "COLL prefix then digits": "h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x2 count ",
    "plain text, no newline": "",
}


def _timed_parse(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    log = nccl_log.parse(path)
    return time.perf_counter() - start, log.lines_too_long


def long_lines(size_mb: float) -> None:
    """Parse time of each hostile single line (module doc) against an ordinary log of the same size."""
    size = int(size_mb * 1024 * 1024)
    valid = "h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    with tempfile.TemporaryDirectory() as tmp:
        baseline_path = Path(tmp) / "baseline.log"
        write_log(baseline_path, size, 100)
        baseline, _ = _timed_parse(baseline_path)
        print(f"baseline: ordinary log of {size_mb:g} MB in {baseline:.2f} s")
        for name, piece in LONG_LINES.items():
            path = Path(tmp) / "long.log"
            head = LONG_LINE_HEADS[name]
            body = (piece * ((size - len(head)) // len(piece) + 1))[: size - len(head)]
            end = "" if name.endswith("no newline") else "\n"
            path.write_text(valid + head + body + end, encoding="utf-8")
            elapsed, too_long = _timed_parse(path)
            print(
                f"{name}: one {size_mb:g} MB line in {elapsed:.3f} s ({too_long} line drained unread), "
                f"{elapsed / baseline:.3f} x the baseline"
            )
            short = (head + body)[:MATCHED_CHARS] + "\n"  # just under the cap: matched, every pattern tried
            path.write_text(valid + short * (size // len(short)), encoding="utf-8")
            elapsed, _ = _timed_parse(path)
            print(
                f"{name}: {size_mb:g} MB of {MATCHED_CHARS // 1000} KB lines in {elapsed:.3f} s, "
                f"{elapsed / baseline:.3f} x the baseline"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "long":
        long_lines(float(sys.argv[2]) if len(sys.argv) > 2 else 10.0)
        return
    size_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 1024.0
    distinct_counts = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl_bench.log"
        start = time.perf_counter()
        size = write_log(path, int(size_mb * 1024 * 1024), distinct_counts)
        print(f"wrote {size / 1e6:.0f} MB in {time.perf_counter() - start:.1f} s")
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        log = nccl_log.parse(path)
        elapsed = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"parsed {log.lines_total} lines, {log.records} records, {log.collective_calls_seen} COLL lines "
        f"({log.collective_rows_kept} kept as rows), {log.call_totals.height} distinct call keys"
    )
    print(f"parse time {elapsed:.1f} s, throughput {size / 1e6 / elapsed:.1f} MB/s")
    print(f"peak RSS {peak_kib / 1024:.0f} MiB (before parse {rss_before / 1024:.0f} MiB)")
    print(
        f"collectives frame {log.collectives.estimated_size('mb'):.0f} MB, "
        f"call totals {log.call_totals.estimated_size('mb'):.0f} MB in memory"
    )


if __name__ == "__main__":
    main()
