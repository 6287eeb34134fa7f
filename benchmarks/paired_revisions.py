"""One command run by two revisions of traceview in alternating pairs (issue 42): CPU seconds of the whole
process tree and its peak RSS, the median ratio after / before with its range.

    python benchmarks/paired_revisions.py --before HEAD~1 --pairs 5 -- summary sample_traces/dp8_ideal --json
    python benchmarks/paired_revisions.py --before HEAD~1 --import traceview.map.rank_summary
    python benchmarks/paired_revisions.py --before HEAD~1 --pairs 7 \
        --map ../shared/data/real/kineto/hta_amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz

Each revision is assembled as installed (`git archive`, the package folders put where `pyproject.toml`'s
`package-dir` puts them, every module compiled to bytecode) in a temporary folder, and each run is a fresh
interpreter (`-P`) importing that copy first on `PYTHONPATH` (its pool workers inherit it). `--before` is
any git revision; the other side is `--after` (a revision) or else the working tree as it is. With
`--import MODULE` a run imports that module and nothing else (the fixed cost of a process of that role);
with `--reduce RUN` the figure is the reduce's own CPU seconds (every thread; the median of five in one
process, after one unmeasured); with `--map TRACE` it is the map's CPU seconds per rank of that one
trace (`summarize`, every thread: the median of five blocks of eight summaries in one process, after one
unmeasured; the parse is not counted). Pairs alternate their order (before first, then after first), so a
drift of the machine touches both sides; the machine's other load still moves each figure, which is why the
ratios are the figures to read.
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

ROOT = Path(__file__).resolve().parents[1]
REDUCE_OUT = Path(tempfile.gettempdir(), f"paired-revisions-reduce-{os.getpid()}.txt")
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


REDUCE_RUNNER = """
import statistics, sys, tempfile, time
from pathlib import Path
from traceview.map.rank_summary import summarize
from traceview.parsers import kineto
from traceview.reduce.reduce import reduce_summaries
files = sorted(p for p in Path(sys.argv[1]).iterdir() if "rank" in p.name and ".json" in p.name)
summaries = [summarize(kineto.parse(f), ranks_in_run=len(files)) for f in files]
reduce_summaries(summaries)
spent = []
for _ in range(5):
    start = time.process_time()
    reduce_summaries(summaries)
    spent.append(time.process_time() - start)
Path(sys.argv[2]).write_text(str(statistics.median(spent)))
"""
"""`--reduce RUN`: the run's ranks summarised in this process, then the median CPU seconds (every thread) of
five reduces of them, written to the file named second."""

MAP_RUNNER = """
import statistics, sys, time
from pathlib import Path
from traceview.map.rank_summary import summarize
from traceview.parsers import kineto
trace = kineto.parse(Path(sys.argv[1])).validate()
summarize(trace)
spent = []
for _ in range(5):
    start = time.process_time()
    for _ in range(8):
        summarize(trace)
    spent.append((time.process_time() - start) / 8)
Path(sys.argv[2]).write_text(str(statistics.median(spent)))
"""
"""`--map TRACE`: the trace parsed once and summarised once, then the median CPU seconds (every thread) of one
summary over five blocks of eight, written to the file named second (the figure `measure` reads)."""


def check_imported_from(packages: Path) -> None:
    """Stop unless a run imports traceview (and its parsers, mapped apart in the source tree) from
    `packages`: `-P` keeps the working folder off the path, and the copy comes before an editable install."""
    probe = "import traceview.core.engine as a, traceview.parsers.kineto as b; print(a.__file__, b.__file__)"
    environment = {**os.environ, "PYTHONPATH": str(packages)}
    found = subprocess.run(
        [sys.executable, "-P", "-c", probe], env=environment, check=True, capture_output=True, text=True
    ).stdout.split()
    if not all(Path(file).is_relative_to(packages) for file in found):
        raise SystemExit(f"a run would import {found}, not the copy in {packages}")


def measure(
    packages: Path, command: list[str], accepted: frozenset[int] = frozenset({0})
) -> tuple[float, float]:
    """CPU seconds of the tree (the child and every process it reaped) and the tree's peak RSS in MiB; a
    run that exits with a code outside `accepted` stops the benchmark."""
    environment = {**os.environ, "PYTHONPATH": str(packages)}
    child = subprocess.Popen([sys.executable, "-P", *command], env=environment, stdout=subprocess.DEVNULL)
    peak = [0.0]
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(child.pid, peak, stop))
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    sampler.join()
    if child.returncode not in accepted:
        raise SystemExit(f"{command} exited with {child.returncode}")
    if REDUCE_OUT.exists():  # `--reduce`, `--map`: the phase's own CPU seconds in place of the process's
        spent = float(REDUCE_OUT.read_text())
        REDUCE_OUT.unlink()
        return spent, max(peak[0], usage.ru_maxrss / 1024)
    return usage.ru_utime + usage.ru_stime, max(peak[0], usage.ru_maxrss / 1024)


def _sample(root: int, peak: list[float], stop: threading.Event) -> None:
    """The largest RSS of `root`'s process tree, every 20 ms until `stop` (read from /proc)."""
    while not stop.is_set():
        tree = _tree_rss(root)
        if tree is None:
            break
        peak[0] = max(peak[0], tree / 2**20)
        stop.wait(0.02)


def _tree_rss(root: int) -> int | None:
    """Bytes resident in `root` and every process below it; None once `root` is gone."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    if root not in parents:
        return None
    tree, grown = {root}, True
    while grown:
        below = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= below
        grown = bool(below)
    return sum(_rss(pid) for pid in tree)


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="git revision of the other side")
    parser.add_argument("--after", default=None, help="git revision of this side (default: the working tree)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--import", dest="module", default=None, help="only import this module")
    parser.add_argument("--reduce", type=Path, default=None, help="time the reduce of this run's ranks")
    parser.add_argument("--map", type=Path, default=None, help="time the map of this one rank's trace")
    parser.add_argument(
        "--exit-ok",
        type=int,
        nargs="+",
        default=[0],
        help="exit codes a run may end with (4: a rank of a larger job, some inputs not read)",
    )
    parser.add_argument("args", nargs="*", help="traceview's arguments (after --)")
    options = parser.parse_args()
    if options.module:
        command = ["-c", f"import {options.module}"]
    elif options.reduce:
        command = ["-c", REDUCE_RUNNER, str(options.reduce.resolve()), str(REDUCE_OUT)]
    elif options.map:
        command = ["-c", MAP_RUNNER, str(options.map.resolve()), str(REDUCE_OUT)]
    else:
        command = [
            "-c",
            "import sys; from traceview.cli.entry import main; sys.argv[0] = 'traceview'; main()",
            *options.args,
        ]
    with tempfile.TemporaryDirectory() as scratch:
        before = assemble(archived(options.before, Path(scratch, "src")), Path(scratch, "before"))
        after_source = ROOT if options.after is None else archived(options.after, Path(scratch, "src_after"))
        after = assemble(after_source, Path(scratch, "after"))
        for packages in (before, after):
            check_imported_from(packages)
        sides: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for pair in range(options.pairs):
            order = ("before", "after") if pair % 2 == 0 else ("after", "before")
            for side in order:
                packages = before if side == "before" else after
                sides[side].append(measure(packages, command, frozenset(options.exit_ok)))
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
