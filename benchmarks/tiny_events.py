"""Cost per event at scale (issue 42): one rank of N tiny events, `traceview summary RANK --json` in a fresh
process: CPU seconds of the process tree, wall seconds, peak RSS of the tree, and from them microseconds and
bytes of peak memory per event and per MB of JSON text.

    python benchmarks/tiny_events.py --events 250000 1250000 [--folder /tmp/tiny] [--repeat 1]

The rank is synthetic and shaped like a real one: steps (`ProfilerStep#k` on the host), in each step
operators (`cpu_op`), each with one launch (`cuda_runtime` `cudaLaunchKernel`) and its kernel (a few
microseconds, on one stream, linked by correlation), one event in 32 a NCCL all-reduce kernel with its
collective call. Events are as small as Kineto writes them (a name, times, a few ids); N counts every complete
event written.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _bytecode import compile_sources

ROOT = Path(__file__).resolve().parents[1]
OPS_PER_STEP = 1000
"""Operators per step (each with a launch and a kernel: three events)."""
RUN = "import sys; from traceview.cli.entry import main; sys.argv[0] = 'traceview'; main()"


def write_rank(path: Path, events: int) -> None:
    """A rank of about `events` complete events (module docstring), written plain."""
    ops = max(1, events // 3)
    steps = max(1, ops // OPS_PER_STEP)
    head = '{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [\n'
    with path.open("w") as out:
        out.write(head)
        clock = 1_000_000.0
        for step in range(steps):
            step_ops = OPS_PER_STEP if step < steps - 1 else ops - OPS_PER_STEP * (steps - 1)
            out.write(
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 1, "tid": 1, '
                f'"ts": {clock:.3f}, "dur": {step_ops * 10.0 + 5:.3f}}},\n'
            )
            for op in range(step_ops):
                start = clock + op * 10.0
                correlation = step * OPS_PER_STEP + op + 1
                kernel = "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if op % 32 == 31 else f"gemm_{op % 7}"
                out.write(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, '
                    f'"ts": {start:.3f}, "dur": 6.0, "args": {{"External id": {correlation}}}}},\n'
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
                    f'"ts": {start + 1:.3f}, "dur": 4.0, "args": {{"correlation": {correlation}}}}},\n'
                    f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": 0, "tid": 7, '
                    f'"ts": {start + 6:.3f}, "dur": 3.0, "args": {{"device": 0, "stream": 7, '
                    f'"correlation": {correlation}}}}},\n'
                )
            clock += step_ops * 10.0 + 20.0
        out.write('{"ph": "i", "name": "end", "ts": 0, "pid": 1, "tid": 1}\n]}\n')


def measure(path: Path) -> tuple[float, float, float]:
    """CPU seconds of the tree, wall seconds and peak RSS (MiB): the tree's, sampled every 20 ms, or the
    largest process's own high-water mark (`ru_maxrss`, exact) where that is higher: a sample misses a peak
    that lasts less than its period, and one rank runs in one process."""
    start = time.perf_counter()
    # -P: the copy on PYTHONPATH, never a `traceview` folder in the working directory
    command = [sys.executable, "-P", "-c", RUN, "summary", str(path), "--json", "--quiet"]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = [0.0]
    stop = threading.Event()

    def sample() -> None:
        process = psutil.Process(child.pid)
        while not stop.is_set():
            try:
                tree = [process, *process.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree) / 2**20)
            except psutil.Error:
                pass
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    stop.set()
    sampler.join()
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited with {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime, wall, max(peak[0], usage.ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[250_000, 1_250_000])
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    compile_sources(ROOT)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="tiny_events_"))
    print("events | text MB | CPU s | wall s | peak MiB | us/event | bytes/event | peak MiB per text MB")
    for events in args.events:
        path = folder / f"tiny_{events}.json"
        if not path.exists():
            write_rank(path, events)
        text_mb = path.stat().st_size / 1e6
        for _ in range(args.repeat):
            cpu, wall, peak = measure(path)
            print(
                f"{events:,} | {text_mb:.1f} | {cpu:.2f} | {wall:.2f} | {peak:.0f} | "
                f"{cpu / events * 1e6:.1f} | {peak * 2**20 / events:.0f} | {peak / text_mb:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
