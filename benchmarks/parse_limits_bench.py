"""Peak memory of hostile traces, and the parse time of a real one, before and after the input limits (issue
16).

Every figure comes from a fresh child process of this interpreter; peak memory is the child's `ru_maxrss` from
`os.wait4`. "Before" runs the same code from a baseline source tree (`git archive` of `--baseline`, by default
the commit before the input limits were added), imported in the child in place of the installed package;
"after" runs the working tree. The inputs, made once in a temporary folder:

- a trace whose one kernel name is `--name-mib` MiB long (default 100), read by `kineto.parse` and by
  `traceview summary --json` (parse, analyses, rendering);
- a gzip bomb, `--bomb-gib` GiB of zero bytes gzipped (default 1; `head -c 1G /dev/zero | gzip`), read by
  `kineto.parse` (before: inflated whole, then refused as not JSON; after: refused by the ratio guard);
- a trace whose header lists `--devices` distinct device names (default 20,000), read by `traceview summary
  --json` (before: the commonest name counted by a scan per name, quadratic; after: at most 64 names kept, one
  count);
- the real trace hta_df_index_resolver: parse time, the median over `--rounds` children (before and after
  alternating) of each child's median of `--repeat` runs of `kineto.parse`, wall and CPU time; and the peak
  memory of `traceview summary --json` on it.

    python benchmarks/parse_limits_bench.py [--name-mib 100] [--bomb-gib 1] [--devices 20000] [--baseline REV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_TRACE = ROOT.parent / "shared/data/real/kineto/hta_df_index_resolver/df_index_resolver.json.gz"
IMPORT_FROM = """
import importlib.util, sys
root = sys.argv[1]
if root != "installed":
    sys.path.insert(0, root)
    import traceview
    for name, folder in (("traceview.parsers", "parsers"), ("traceview.reports", "reports")):
        spec = importlib.util.spec_from_file_location(
            name, f"{root}/{folder}/__init__.py", submodule_search_locations=[f"{root}/{folder}"]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
"""
PARSE = (
    IMPORT_FROM
    + """
from traceview.core.errors import TraceviewError
from traceview.parsers import kineto
try:
    trace = kineto.parse(sys.argv[2])
    longest = trace.gpu["name"].str.len_chars().max()
    print("parsed:", trace.gpu.height, "kernels, longest name", longest, "chars")
except TraceviewError as exc:
    print("refused:", str(exc)[:160])
"""
)
SUMMARY = (
    IMPORT_FROM
    + """
import runpy
sys.argv = ["traceview", "summary", sys.argv[2], "--json"]
runpy.run_module("traceview", run_name="__main__")
"""
)
PARSE_TIME = (
    IMPORT_FROM
    + """
import statistics, time
from traceview.parsers import kineto
walls, cpus = [], []
for _ in range(int(sys.argv[3])):
    start, start_cpu = time.perf_counter(), time.process_time()
    trace = kineto.parse(sys.argv[2])
    walls.append(time.perf_counter() - start)
    cpus.append(time.process_time() - start_cpu)
print(statistics.median(walls), statistics.median(cpus), trace.gpu.height, trace.cpu.height)
"""
)


@dataclass(frozen=True)
class Measurement:
    """One child: wall seconds, peak resident set (MiB), exit code and the last line it printed."""

    wall_s: float
    peak_mib: float
    exit_code: int
    said: str


def measure(script: str, source: str, *args: str) -> Measurement:
    """Run `script` in a child importing traceview from `source`; stdout kept (last line), stderr
    discarded."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(
            [sys.executable, "-c", script, source, *args], stdout=out, stderr=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        lines = out.read().decode(errors="replace").strip().splitlines()
    said = lines[-1][:200] if lines else ""
    return Measurement(wall, usage.ru_maxrss / 1024.0, os.waitstatus_to_exitcode(status), said)


def baseline_tree(revision: str, folder: Path) -> str:
    """The baseline's source files, extracted from git into `folder`."""
    archive = folder / "baseline.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), revision], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "baseline", filter="data")
    return str(folder / "baseline")


def long_name_trace(folder: Path, name_mib: int) -> Path:
    """A small valid trace (base time, three kernels) whose second kernel name is `name_mib` MiB long."""
    kernels = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": 5,
            "args": {"stream": 7},
        }
        for name, ts in (("gemm", 10), ("n" * (name_mib << 20), 20), ("relu", 30))
    ]
    document = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": kernels}
    document["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    path = folder / "long_name.json"
    path.write_text(json.dumps(document))
    return path


def many_devices_trace(folder: Path, devices: int) -> Path:
    """The long-name trace's three kernels, with `devices` distinct names in `deviceProperties`."""
    kernels = [
        {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": ts, "dur": 5, "args": {"stream": 7}}
        for n, ts in (("gemm", 10), ("relu", 20))
    ]
    document = {
        "distributedInfo": {"rank": 0, "world_size": 1},
        "deviceProperties": [{"id": i, "name": f"device {i}"} for i in range(devices)],
        "traceEvents": kernels,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }
    path = folder / "many_devices.json"
    path.write_text(json.dumps(document))
    return path


def gzip_bomb(folder: Path, gib: int) -> Path:
    """`gib` GiB of zero bytes, gzipped a MiB at a time."""
    path = folder / "bomb.json.gz"
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    with path.open("wb") as out:
        for _ in range(gib << 10):
            out.write(compressor.compress(zeros))
        out.write(compressor.flush())
    return path


def compare(label: str, script: str, sources: dict[str, str], *args: str) -> None:
    """Measure `script` before and after; print both and the ratio of peak memory."""
    runs = {side: measure(script, source, *args) for side, source in sources.items()}
    for side, m in runs.items():
        print(
            f"  {label} {side:<6} {m.peak_mib:8.0f} MiB peak, {m.wall_s:6.2f} s, exit {m.exit_code}: {m.said}"
        )
    before, after = runs["before"].peak_mib, runs["after"].peak_mib
    print(f"  {label} peak memory after / before: {after / before:.3f} ({before / after:.1f}x less)")


def compare_parse_times(trace: Path, sources: dict[str, str], repeat: int, rounds: int) -> None:
    """Median parse time (wall and CPU, in the child) before and after, children alternating for `rounds`."""
    medians: dict[str, list[tuple[float, float]]] = {side: [] for side in sources}
    for _ in range(rounds):
        for side, source in sources.items():
            wall, cpu, kernels, cpu_events = measure(PARSE_TIME, source, str(trace), str(repeat)).said.split()
            medians[side].append((float(wall), float(cpu)))
    print(
        f"parse time of {trace.name} ({kernels} kernels, {cpu_events} host events), {rounds} x {repeat} runs:"
    )
    wall_of = {side: statistics.median(w for w, _ in runs) for side, runs in medians.items()}
    cpu_of = {side: statistics.median(c for _, c in runs) for side, runs in medians.items()}
    for side in sources:
        print(f"  {side:<6} median {wall_of[side]:.3f} s wall, {cpu_of[side]:.3f} s CPU")
    print(
        f"  after / before: {wall_of['after'] / wall_of['before']:.3f} wall, "
        f"{cpu_of['after'] / cpu_of['before']:.3f} CPU"
    )


def before_limits() -> str:
    """The commit before the one that added the input limits (`parsers/kineto/limits.py`)."""
    added = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H", "--", "parsers/kineto/limits.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return f"{added[-1]}^"


def main(argv: list[str]) -> int:
    """Make the inputs, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name-mib", type=int, default=100)
    parser.add_argument("--bomb-gib", type=int, default=1)
    parser.add_argument("--devices", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="")
    args = parser.parse_args(argv)
    revision = args.baseline or before_limits()
    with tempfile.TemporaryDirectory(prefix="parse_limits_") as tmp:
        folder = Path(tmp)
        sources = {"before": baseline_tree(revision, folder), "after": "installed"}
        print(f"baseline {revision[:12]} against the working tree {ROOT}")
        name_trace = long_name_trace(folder, args.name_mib)
        print(f"{args.name_mib} MiB kernel name ({name_trace.stat().st_size / 2**20:.0f} MiB file):")
        compare("parse  ", PARSE, sources, str(name_trace))
        compare("summary", SUMMARY, sources, str(name_trace))
        name_trace.unlink()
        bomb = gzip_bomb(folder, args.bomb_gib)
        print(f"gzip bomb: {args.bomb_gib} GiB of zeros in {bomb.stat().st_size / 2**20:.1f} MiB:")
        compare("parse  ", PARSE, sources, str(bomb))
        print(f"{args.devices} distinct device names:")
        compare("summary", SUMMARY, sources, str(many_devices_trace(folder, args.devices)))
        if REAL_TRACE.is_file():
            compare_parse_times(REAL_TRACE, sources, args.repeat, args.rounds)
            print(f"traceview summary --json on {REAL_TRACE.name} (as benchmarks/parse_bench.py runs it):")
            compare("summary", SUMMARY, sources, str(REAL_TRACE))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
