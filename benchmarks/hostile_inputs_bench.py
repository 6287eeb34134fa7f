"""Time and peak memory of `traceview` on hostile inputs, before and after issue 22's bounded reads.

Each figure is one fresh child running the command line (`traceview summary FILE --json` for a trace,
`traceview nccl FILE` for a log) with a time limit (`--timeout`, default 120 s: a child past it is killed and
said so); peak memory is the child's `ru_maxrss` from `os.wait4`. "Before" imports the package from a baseline
source tree (`git archive` of `--baseline`, by default main before issue 22), "after" from the working tree.
Inputs, made once in a temporary folder:

- a gzip bomb of `--bomb-gib` GiB of zero bytes (default 10), and one of spaces after `{"traceEvents": [` (the
  same size: it passes the check of the first bytes, so only the ratio guard stops it), as traces;
- a gzip bomb of 1 GiB of newlines, as an NCCL log;
- a 4 GiB sparse file (`truncate`: no byte stored), as a trace and as an NCCL log.

    python benchmarks/hostile_inputs_bench.py [--bomb-gib 10] [--baseline REV] [--timeout 120]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parse_limits_bench import IMPORT_FROM, ROOT, baseline_tree

COMMAND = (
    IMPORT_FROM
    + """
import runpy
sys.argv = ["traceview", *sys.argv[2:]]
runpy.run_module("traceview", run_name="__main__")
"""
)


def bomb(path: Path, gib: int, byte: bytes, start: bytes = b"") -> Path:
    """`gib` GiB of `byte` after `start`, one gzip stream (`head -c 10G /dev/zero | gzip`), a MiB
    at a time."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = byte * (1 << 20)
    with path.open("wb") as out:
        out.write(compressor.compress(start))
        for _ in range(gib << 10):
            out.write(compressor.compress(block))
        out.write(compressor.flush())
    return path


def sparse(path: Path, gib: int) -> Path:
    with path.open("wb") as out:
        out.truncate(gib << 30)
    return path


def measure(source: str, timeout: float, *args: str) -> str:
    """Run the command in a child importing traceview from `source`: wall time, peak memory, exit,
    first line."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [sys.executable, "-c", COMMAND, source, *args], stdout=subprocess.DEVNULL, stderr=err
        )
        killed = False
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                os.kill(child.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.05)
        wall = time.perf_counter() - start
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    said = "killed at the time limit" if killed else (lines[0][:110] if lines else "")
    code = os.waitstatus_to_exitcode(status)
    return f"{wall:7.2f} s, {usage.ru_maxrss / 1024:7.0f} MiB peak, exit {code}: {said}"


def main(argv: list[str]) -> int:
    """Make the inputs, measure before and after, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bomb-gib", type=int, default=10)
    parser.add_argument("--baseline", default="4a374ae")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hostile_") as tmp:
        folder = Path(tmp)
        sources = {"before": baseline_tree(args.baseline, folder), "after": "installed"}
        cases = [
            (
                f"{args.bomb_gib} GiB gzip bomb of zeros as a trace",
                "summary",
                bomb(folder / "zeros.json.gz", args.bomb_gib, b"\0"),
            ),
            (
                f"{args.bomb_gib} GiB gzip bomb, JSON start then spaces",
                "summary",
                bomb(folder / "spaces.json.gz", args.bomb_gib, b" ", b'{"traceEvents": ['),
            ),
            (
                "1 GiB gzip bomb of newlines as an NCCL log",
                "nccl",
                bomb(folder / "newlines.log.gz", 1, b"\n"),
            ),
            ("4 GiB sparse file as a trace", "summary", sparse(folder / "sparse.json", 4)),
            ("4 GiB sparse file as an NCCL log", "nccl", sparse(folder / "sparse.log", 4)),
        ]
        print(f"baseline {args.baseline} against the working tree {ROOT}; limit {args.timeout:g} s per child")
        for label, command, path in cases:
            print(f"{label} ({path.stat().st_size / 2**20:.1f} MiB on disk):")
            for side, source in sources.items():
                extra = ["--json"] if command == "summary" else []
                print(f"  {side:<6} {measure(source, args.timeout, command, str(path), *extra)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
