"""Throughput of the NCCL_DEBUG log parser: write a synthetic log of SIZE_MB (default 1024) and parse it.

    python benchmarks/nccl_log_bench.py [SIZE_MB [DISTINCT_COUNTS]]

The log is written streaming (a block of lines repeated with fresh opCounts): per block, 8 processes' COLL
lines (80%), TUNING lines, transport and init lines, one WARN, and non-NCCL application lines (skipped).
DISTINCT_COUNTS 0 (the default) gives every block a new element count, so the distinct call keys the parser
counts by grow with the log (a quarter of the COLL lines: the worst case); N > 0 cycles the count over N values,
as a training job's fixed set of bucket sizes does (the call totals then stay a few hundred rows).
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


def main() -> None:
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
