"""Wall time and peak memory of `traceview summary` against HolisticTraceAnalysis (HTA), GitHub issue 2.

Both sides run in a fresh subprocess of the same interpreter, so interpreter start and imports count on both
(each from compiled bytecode, as installed: `benchmarks/_bytecode.py`):

- ours: `python -m traceview summary TRACE --json > /dev/null` (parse + analyse + render, the full CLI path);
- HTA: `TraceAnalysis(trace_dir=...)` (load) + `get_comm_comp_overlap()` + `get_temporal_breakdown()`, on a
  copy of the trace in a temporary folder (made once, outside the timing).

Peak memory is the child's `ru_maxrss` from `os.wait4` (Linux: the largest resident set of the child or of
any process it waited for; neither side forks for a single-rank trace). Repetitions alternate ours/HTA and
the median is reported; CPU time (user + system) is printed too, as it moves less than wall time on a busy
machine. Targets (issue 26): at least 6x faster, at most half HTA's peak memory, at least 150 MB of text
per CPU-second of the map (a third subprocess times the map alone, `summarize_files` of the trace as a
worker runs it, by `time.process_time`: every thread, no start-up, imports, reduce or output); the
throughput of the whole command is printed beside it.

    python benchmarks/parse_bench.py [TRACE] [--repeat N]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _bytecode import compile_sources

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2]
    / "shared/data/real/kineto/hta_df_index_resolver/df_index_resolver.json.gz"
)
HTA_SCRIPT = """
import logging, sys
from hta.trace_analysis import TraceAnalysis
logging.disable(logging.CRITICAL)
analysis = TraceAnalysis(trace_dir=sys.argv[1])
analysis.get_comm_comp_overlap(visualize=False)
analysis.get_temporal_breakdown(visualize=False)
"""
MAP_SCRIPT = """
import sys, time
from traceview.map.executors import MapTask, summarize_files
summarize_files([MapTask(sys.argv[1])])  # warm: the map's first queries build polars' caches
start = time.process_time()
summarize_files([MapTask(sys.argv[1])])
print(time.process_time() - start)
"""
TARGET_SPEEDUP = 6.0
TARGET_MEMORY_RATIO = 0.5
TARGET_THROUGHPUT = 150.0


@dataclass(frozen=True)
class Measurement:
    """One subprocess run: wall seconds, CPU seconds (user + system) and peak resident set in MiB."""

    wall_s: float
    cpu_s: float
    peak_mib: float


def measure(command: list[str]) -> Measurement:
    """Run `command` with stdout/stderr discarded; its wall time and peak RSS. Raises on a non-zero exit."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{command[:4]}... exited with {child.returncode}")
    return Measurement(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0)


def ours_command(trace: Path) -> list[str]:
    """The traceview CLI on the trace, JSON summary."""
    return [sys.executable, "-m", "traceview", "summary", str(trace), "--json"]


def hta_command(folder: Path) -> list[str]:
    """HTA's load and the two analyses on the folder."""
    return [sys.executable, "-c", HTA_SCRIPT, str(folder)]


def map_cpu_s(trace: Path) -> float:
    """CPU seconds (every thread of the process) of the map of the trace alone: what a worker spends on the
    rank (parse, checks, every analysis of the map), without start-up, imports, the reduce or the output."""
    done = subprocess.run(
        [sys.executable, "-c", MAP_SCRIPT, str(trace)], check=True, capture_output=True, text=True
    )
    return float(done.stdout.split()[-1])


def text_bytes(trace: Path) -> int:
    """Bytes of the trace's JSON text (uncompressed)."""
    raw = trace.read_bytes()
    return len(gzip.decompress(raw)) if raw[:2] == b"\x1f\x8b" else len(raw)


def median(values: list[Measurement]) -> Measurement:
    """Median of each figure, taken separately."""
    return Measurement(
        statistics.median(m.wall_s for m in values),
        statistics.median(m.cpu_s for m in values),
        statistics.median(m.peak_mib for m in values),
    )


def run(trace: Path, repeat: int) -> tuple[list[Measurement], list[Measurement], list[float]]:
    """`repeat` alternating runs of each side, and of the map alone."""
    ours: list[Measurement] = []
    hta: list[Measurement] = []
    mapped: list[float] = []
    with tempfile.TemporaryDirectory(prefix="parse_bench_") as tmp:
        shutil.copy(trace, Path(tmp) / trace.name)
        for _ in range(repeat):
            ours.append(measure(ours_command(trace)))
            hta.append(measure(hta_command(Path(tmp))))
            mapped.append(map_cpu_s(trace))
    return ours, hta, mapped


def report(trace: Path, ours: list[Measurement], hta: list[Measurement], mapped: list[float]) -> bool:
    """Print every run, the medians and the ratios; True when both targets are met."""
    print(f"trace: {trace} ({trace.stat().st_size / 2**20:.1f} MiB on disk), {len(ours)} repetitions")
    for label, runs in (("traceview summary", ours), ("HTA load+overlap+breakdown", hta)):
        listed = ", ".join(f"{m.wall_s:.2f} s ({m.cpu_s:.2f} s CPU) / {m.peak_mib:.0f} MiB" for m in runs)
        print(f"  {label:<28} {listed}")
    mine, theirs = median(ours), median(hta)
    speedup = theirs.wall_s / mine.wall_s
    memory_ratio = mine.peak_mib / theirs.peak_mib
    for label, m in (("traceview", mine), ("HTA", theirs)):
        print(
            f"median {label + ':':<10} {m.wall_s:.2f} s wall, {m.cpu_s:.2f} s CPU, {m.peak_mib:.0f} MiB peak "
            f"RSS"
        )
    print(f"speed-up (HTA / traceview wall): {speedup:.2f}x (target >= {TARGET_SPEEDUP:.0f}x)")
    print(f"speed-up on CPU time: {theirs.cpu_s / mine.cpu_s:.2f}x")
    print(f"memory ratio (traceview / HTA peak): {memory_ratio:.2f} (target <= {TARGET_MEMORY_RATIO})")
    text_mb = text_bytes(trace) / 1e6
    print(
        f"throughput: {text_mb:.1f} MB of text / {mine.cpu_s:.2f} CPU-s of the whole command = "
        f"{text_mb / mine.cpu_s:.0f} MB/s per CPU-second"
    )
    map_s = statistics.median(mapped)
    print(
        f"map throughput: {text_mb:.1f} MB / {map_s:.2f} CPU-s of the map alone "
        f"({', '.join(f'{s:.2f}' for s in mapped)}) = {text_mb / map_s:.0f} MB/s per CPU-second "
        f"(target >= {TARGET_THROUGHPUT:.0f})"
    )
    return speedup >= TARGET_SPEEDUP and memory_ratio <= TARGET_MEMORY_RATIO


def main(argv: list[str]) -> int:
    """Measure, print, and exit 0 when the targets are met, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    compile_sources(ROOT)  # timed as installed (benchmarks/_bytecode.py)
    ours, hta, mapped = run(args.trace, args.repeat)
    return 0 if report(args.trace, ours, hta, mapped) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
