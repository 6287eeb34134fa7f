"""One command run by two revisions of traceview in alternating pairs (issue 42): CPU seconds of the whole
process tree and its peak RSS, the median ratio after / before with its range.

    python benchmarks/paired_revisions.py --before HEAD~1 --pairs 5 -- summary sample_traces/dp8_ideal --json
    python benchmarks/paired_revisions.py --before HEAD~1 --import traceview.map.rank_summary

Each revision is assembled as installed (`git archive`, the package folders put where `pyproject.toml`'s
`package-dir` puts them, every module compiled to bytecode) in a temporary folder, and each run is a fresh
interpreter importing that copy first on `PYTHONPATH` (its pool workers inherit it). `--before` is any git
revision; the other side is the working tree as it is. With `--import MODULE` a run imports that module and
nothing else (the fixed cost of a process of that role). Pairs alternate their order (before first, then
after first), so a drift of the machine touches both sides; the machine's other load still moves each figure,
which is why the ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import compileall
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"traceview": "traceview", "parsers": "traceview/parsers", "reports": "traceview/reports"}
"""Source folder -> its place in the installed package (pyproject.toml's `package-dir`)."""


def assemble(source: Path, into: Path) -> Path:
    """The packages of the tree at `source` laid out as installed under `into`, compiled; `into` returned."""
    for folder, place in PACKAGE_DIRS.items():
        shutil.copytree(
            source / folder,
            into / place,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    compileall.compile_dir(into / "traceview", quiet=1)
    return into


def archived(revision: str, into: Path) -> Path:
    """The tree of `revision` written under `into` (git archive, nothing of the working tree touched)."""
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, *PACKAGE_DIRS], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return into


def measure(packages: Path, command: list[str]) -> tuple[float, float]:
    """CPU seconds of the tree (the child and every process it reaped) and the tree's peak RSS in MiB."""
    environment = {**os.environ, "PYTHONPATH": str(packages)}
    child = subprocess.Popen([sys.executable, *command], env=environment, stdout=subprocess.DEVNULL)
    peak = [0.0]
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(child.pid, peak, stop))
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"{command} exited with {child.returncode}")
    return usage.ru_utime + usage.ru_stime, max(peak[0], usage.ru_maxrss / 1024)


def _sample(root: int, peak: list[float], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            parent = psutil.Process(root)
            tree = parent.memory_info().rss + sum(
                child.memory_info().rss for child in parent.children(recursive=True)
            )
        except psutil.Error:
            break
        peak[0] = max(peak[0], tree / 2**20)
        stop.wait(0.02)


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="git revision of the other side")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--import", dest="module", default=None, help="only import this module")
    parser.add_argument("args", nargs="*", help="traceview's arguments (after --)")
    options = parser.parse_args()
    if options.module:
        command = ["-c", f"import {options.module}"]
    else:
        command = [
            "-c",
            "import sys; from traceview.cli.entry import main; sys.argv[0] = 'traceview'; main()",
            *options.args,
        ]
    with tempfile.TemporaryDirectory() as scratch:
        before = assemble(archived(options.before, Path(scratch, "src")), Path(scratch, "before"))
        after = assemble(ROOT, Path(scratch, "after"))
        sides: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for pair in range(options.pairs):
            order = ("before", "after") if pair % 2 == 0 else ("after", "before")
            for side in order:
                sides[side].append(measure(before if side == "before" else after, command))
            print(
                f"pair {pair}: "
                + "  ".join(
                    f"{side} {sides[side][-1][0]:.3f} CPU-s {sides[side][-1][1]:.0f} MiB" for side in order
                )
            )
    cpu = [a[0] / b[0] for a, b in zip(sides["after"], sides["before"], strict=True)]
    rss = [a[1] / b[1] for a, b in zip(sides["after"], sides["before"], strict=True)]
    for side, runs in sides.items():
        print(f"{side}: CPU-s {_spread([r[0] for r in runs])}; peak MiB {_spread([r[1] for r in runs])}")
    print(f"after / before, paired: CPU {_spread(cpu)}; peak RSS {_spread(rss)}")


if __name__ == "__main__":
    main()
