"""Cost per rank (issue 26): wall time, CPU time of the whole process tree, peak RSS of the tree and of the
parent, as the ranks of a run grow and per worker count; the fixed cost per rank and the parallel
efficiency from them.

    python benchmarks/rank_cost.py --ranks 64 256 1024 --workers 0 1 2   # tiny ranks (default rank)
    python benchmarks/rank_cost.py --rank ../shared/data/real/kineto/hta_nccl_data/nccl_data.json.gz \\
        --ranks 8 64 128 --workers 2

Builds N copies of one real rank (default `hta_amd_mi250`: 67 KB of text, one step) into a temporary folder,
each with its own `distributedInfo` (rank r of a world of N) and its own timestamps (every `ts` moved by r x
1.25 ms plus a jitter of r x 7 us), so no two files are equal and nothing computed for one file can serve
another. Then `traceview summary FOLDER --json --quiet` runs in a fresh process per (N, workers): workers 0 is
the map in the command's own process (no pool), workers W >= 1 a pool of W processes whatever the input's
size.

Printed per row: wall seconds; CPU seconds of the whole tree (user + system of the command and of every worker
it reaped, from `os.wait4`) and per rank; peak RSS of the tree and of the parent alone (sampled every 50 ms
from /proc); the serial part (the command's wall time outside the map: start-up, imports, the reduce, the
JSON). Then per worker count: the fixed cost per rank (the least-squares slope of the tree's CPU seconds over
N), the parent's memory per extra rank (slope of the parent's peak over N), the tree's peak at the largest N
over the smallest; per N: the parallel efficiency of W workers, T(best one-process configuration) / (W x
T(W)), and the serial fraction (serial part / wall of the one-process run). Runs of a row alternate with
`--repeat` > 1 and the median is kept.

With `--cores`, each run is given only the cores it is measured on, by the child's CPU affinity (as `taskset`
or a cluster's cpuset would; traceview sizes its workers and their threads from them,
`traceview.core.cores`): W workers on W cores, the one-process map on one. The efficiency is then the
strong-scaling one, T(one process, one core) / (W x T(W workers, W cores)): how much of each added core the
map turns into speed. Without it, every run has every core, and a single process's polars threads already
use them, so its efficiency says whether more workers help on this machine, not whether cores are used.

    python benchmarks/rank_cost.py --ranks 256 1024 --workers 0 1 2 --cores --repeat 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import psutil
from _bytecode import compile_sources

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared/data/real/kineto"
DEFAULT_RANK = REAL / "hta_amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
RANK_SHIFT_US = 1250.0
JITTER_US = 7.0
RUNNER = """
import inspect, json, os, sys, time
start = time.perf_counter()
folder, workers, timings, cpus = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if cpus:  # the cores this run is given, before anything starts (its workers inherit them)
    os.sched_setaffinity(0, [int(cpu) for cpu in cpus.split(",")])
import traceview.reduce.pipeline as pipeline
from traceview.cli.main import main
inner, marks = pipeline.map_ranks, {}
def map_ranks(*args, **kwargs):
    bound = inspect.signature(inner).bind(*args, **kwargs)
    bound.arguments["workers"] = max(workers, 1)
    bound.arguments["parallel_min_bytes"] = 1 << 62 if workers == 0 else 0
    marks["map_start"] = time.perf_counter()
    try:
        yield from inner(*bound.args, **bound.kwargs)  # the ranks as they are read (and held)
    finally:
        marks["map_end"] = time.perf_counter()
pipeline.map_ranks = map_ranks
sys.argv = ["traceview", "summary", folder, "--json", "--quiet"]
try:
    main()
except SystemExit as stop:
    code = stop.code
end = time.perf_counter()
with open(timings, "w") as out:
    json.dump({"wall": end - start, "map": marks["map_end"] - marks["map_start"], "code": code}, out)
sys.exit(code)
"""


@dataclass(frozen=True)
class Row:
    """One run of the command: wall and serial seconds, CPU seconds of the tree, peaks in MiB."""

    ranks: int
    workers: int
    cores: int | None
    wall_s: float
    serial_s: float
    cpu_s: float
    tree_peak_mib: float
    parent_peak_mib: float


def _shifted(events: list[Any], delta_us: float) -> None:
    for event in events:
        if isinstance(event, dict) and isinstance(event.get("ts"), int | float):
            event["ts"] = event["ts"] + delta_us


def replicate(source: Path, ranks: int, folder: Path) -> None:
    """`ranks` copies of `source` as rank-<r>.json.gz, each with its own rank and timestamps (module
    docstring)."""
    raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
    for rank in range(ranks):
        document = msgspec.json.decode(raw)
        info = document.setdefault("distributedInfo", {})
        info.update(rank=rank, world_size=ranks)
        info.setdefault("backend", "nccl")
        _shifted(document.get("traceEvents", []), rank * (RANK_SHIFT_US + JITTER_US))
        (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(msgspec.json.encode(document), 1))


def _sampled(root: int, peaks: dict[str, float], stop: threading.Event) -> None:
    """Largest RSS of `root`'s tree and of `root` alone, every 50 ms until `stop`."""
    while not stop.is_set():
        try:
            parent = psutil.Process(root)
            own = parent.memory_info().rss
            tree = own + sum(_rss(child) for child in parent.children(recursive=True))
        except psutil.Error:
            break
        peaks["tree"] = max(peaks["tree"], tree / 2**20)
        peaks["parent"] = max(peaks["parent"], own / 2**20)
        stop.wait(0.05)


def _rss(process: psutil.Process) -> int:
    try:
        return int(process.memory_info().rss)
    except psutil.Error:
        return 0


def _given(cores: int | None) -> str:
    """The first `cores` CPUs of this process's, comma-separated ("" for all of them)."""
    if cores is None:
        return ""
    chosen = sorted(os.sched_getaffinity(0))[:cores]
    if len(chosen) < cores:
        raise SystemExit(f"--cores: {cores} cores asked for, this process may use {len(chosen)}")
    return ",".join(map(str, chosen))


def measure(folder: Path, ranks: int, workers: int, cores: int | None = None) -> Row:
    """One fresh process of `traceview summary` on `folder`, on its first `cores` CPUs when given (module
    docstring)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as timings:
        command = [sys.executable, "-c", RUNNER, str(folder), str(workers), timings.name, _given(cores)]
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        peaks, stop = {"tree": 0.0, "parent": 0.0}, threading.Event()
        sampler = threading.Thread(target=_sampled, args=(child.pid, peaks, stop), daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        stop.set()
        sampler.join()
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode not in (0, 1):
            raise SystemExit(f"summary of {folder} exited {child.returncode}")
        phases = json.loads(Path(timings.name).read_text())
    serial = max(wall - phases["map"], 0.0)
    cpu = usage.ru_utime + usage.ru_stime
    return Row(ranks, workers, cores, wall, serial, cpu, peaks["tree"], peaks["parent"])


def median_row(rows: list[Row]) -> Row:
    """Each figure's median over repeated runs of one configuration."""
    first = rows[0]
    figures = ("wall_s", "serial_s", "cpu_s", "tree_peak_mib", "parent_peak_mib")
    values = {name: statistics.median(getattr(r, name) for r in rows) for name in figures}
    return Row(first.ranks, first.workers, first.cores, **values)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else float("nan")


def _label(workers: int, cores: int | None = None) -> str:
    label = "in-process" if workers == 0 else f"{workers} worker{'s' if workers > 1 else ''}"
    return label if cores is None else f"{label} on {cores} core{'s' if cores > 1 else ''}"


def report(rows: list[Row]) -> None:
    """The derived figures of the module docstring."""
    counts = sorted({r.workers for r in rows})
    print("\nper worker count")
    for workers in counts:
        mine = sorted((r for r in rows if r.workers == workers), key=lambda r: r.ranks)
        if len(mine) < 2:
            continue
        fixed = slope([(r.ranks, r.cpu_s) for r in mine]) * 1000
        parent = slope([(r.ranks, r.parent_peak_mib) for r in mine])
        growth = mine[-1].tree_peak_mib / mine[0].tree_peak_mib
        print(
            f"  {_label(workers):11s} CPU per extra rank (tree) {fixed:7.1f} ms; parent memory per extra "
            f"rank "
            f"{parent:6.3f} MiB; tree peak N={mine[-1].ranks}/N={mine[0].ranks} x{growth:.2f}"
        )
    print("\nper N (efficiency against the best one-process configuration)")
    for ranks in sorted({r.ranks for r in rows}):
        mine = {r.workers: r for r in rows if r.ranks == ranks}
        single = [mine[w] for w in (0, 1) if w in mine]
        if not single:
            continue
        best = min(single, key=lambda r: r.wall_s)
        parts = [
            f"{_label(w, r.cores)} {best.wall_s / (max(w, 1) * r.wall_s):.2f}"
            for w, r in sorted(mine.items())
            if w >= 1
        ]
        print(
            f"  N={ranks:5d}: best one-process {_label(best.workers, best.cores)} {best.wall_s:.2f} s; "
            f"serial fraction {best.serial_s / best.wall_s:.3f} ({best.serial_s:.2f} s); "
            f"efficiency: {', '.join(parts)}"
        )


def main() -> None:
    """Build the copies, measure every (N, workers), print the rows and the derived figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=Path, default=DEFAULT_RANK, help="the real rank to copy")
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="0: no pool")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row, alternating; the median kept")
    parser.add_argument(
        "--cores", action="store_true", help="W workers on W cores, in-process on one (module docstring)"
    )
    args = parser.parse_args()
    compile_sources(ROOT)  # timed as installed (benchmarks/_bytecode.py)
    rows: list[Row] = []
    print(f"rank {args.rank.name}; {os.cpu_count()} CPUs; {_where()}")
    with tempfile.TemporaryDirectory(prefix="rank_cost_") as tmp:
        for count in args.ranks:
            folder = Path(tmp) / f"n{count}"
            folder.mkdir()
            replicate(args.rank, count, folder)
            runs: dict[int, list[Row]] = {w: [] for w in args.workers}
            for _ in range(args.repeat):
                for workers in args.workers:
                    cores = max(workers, 1) if args.cores else None
                    runs[workers].append(measure(folder, count, workers, cores))
            for workers in args.workers:
                row = median_row(runs[workers])
                rows.append(row)
                print(
                    f"N={count:5d} {_label(row.workers, row.cores):11s} wall {row.wall_s:7.2f} s (serial "
                    f"{row.serial_s:5.2f} s)"
                    f"  CPU {row.cpu_s:7.2f} s = {1000 * row.cpu_s / count:6.1f} ms/rank"
                    f"  peak tree {row.tree_peak_mib:7.1f} MiB, parent {row.parent_peak_mib:7.1f} MiB",
                    flush=True,
                )
    report(rows)


def _where() -> str:
    code = subprocess.run(
        [sys.executable, "-c", "import traceview; print(traceview.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"traceview from {code.stdout.strip()}"


if __name__ == "__main__":
    main()
