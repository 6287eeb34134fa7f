"""The critical path's own cost per tiny rank (issue 36's budget, docs/scaling.md): the same code with and
without the path, paired, so that nothing else merged since moves the figure.

    python benchmarks/path_cost.py --ranks 32 160 --pairs 6           # CPU of the tree, alternating pairs
    python benchmarks/path_cost.py --ranks 32 160 --instructions      # instructions under valgrind

The working tree is laid out as installed twice (`paired_revisions.assemble`); in the second copy the
map's path (`rank_summary._critical_path`) and the reduce's (`reduce._critical_path`) return empty results.
Copies of the 67 KB `hta_amd_mi250` rank with distinct ranks and timestamps (`rank_cost.replicate`) are
summarised by each copy: `summary FOLDER --json --quiet --workers 1`, a fresh process a run, CPU seconds of
the tree (`paired_revisions.measure`); with `--instructions`, the map in the command's own process on one
polars thread under valgrind (instructions are the figure without the machine's noise; a run takes
minutes). Printed: per N the medians and the paired ratio with its range; then the fixed cost per rank (the
slope over N) with and without the path and their ratio (the budget: at most 1.10).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from paired_revisions import ROOT, assemble, measure
from rank_cost import DEFAULT_RANK, replicate, slope

WITHOUT_PATH = {
    "traceview/map/rank_summary.py": """

def _critical_path(classed, host, windows, kernels, syncs):  # type: ignore[no-redef]  # benchmark only
    from traceview.critical_path.holders import HOLDER_SCHEMA
    from traceview.critical_path.sweep import PER_STEP_SCHEMA
    from traceview.model.trace import empty_frame
    return empty_frame(PER_STEP_SCHEMA), empty_frame(HOLDER_SCHEMA), empty_nodes(), set(), {}
""",
    "traceview/reduce/reduce.py": """

def _critical_path(frames, budget, crossrank, ranks):  # type: ignore[no-redef]  # benchmark only
    from traceview.critical_path.analysis import empty_critical_path
    return empty_critical_path()
""",
}
"""What the copy without the path appends to two modules (a later definition replaces the earlier)."""
IN_PROCESS = """
import inspect, sys
import traceview.reduce.pipeline as pipeline
from traceview.cli.main import main
inner = pipeline.map_ranks
def map_ranks(*args, **kwargs):
    bound = inspect.signature(inner).bind(*args, **kwargs)
    bound.arguments["parallel_min_bytes"] = 1 << 62
    yield from inner(*bound.args, **bound.kwargs)
pipeline.map_ranks = map_ranks
sys.argv = ["traceview", "summary", sys.argv[1], "--json", "--quiet"]
main()
"""
"""`--instructions`: the command with its map in its own process (no pool: valgrind follows one process)."""


def copies(into: Path) -> dict[str, Path]:
    """The working tree laid out as installed, with the path and without it."""
    with_path = assemble(ROOT, into / "with")
    without = assemble(ROOT, into / "without")
    for module, tail in WITHOUT_PATH.items():
        target = without / module
        target.write_text(target.read_text() + tail)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-f", str(without)], check=True)
    return {"without": without, "with": with_path}


def instructions(packages: Path, folder: Path) -> float:
    """Instructions of one run of the command (`IN_PROCESS`) on one polars thread, from valgrind."""
    one_thread = {"POLARS_MAX_THREADS": "1", "PYTHONHASHSEED": "0"}
    environment = {**os.environ, "PYTHONPATH": str(packages), **one_thread}
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    done = subprocess.run(
        [*command, sys.executable, "-P", "-c", IN_PROCESS, str(folder)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.findall(r"I\s+refs:\s+([\d,]+)", done.stderr)
    return float(found[-1].replace(",", ""))


def cpu_pairs(packages: dict[str, Path], folder: Path, pairs: int) -> dict[str, list[float]]:
    """CPU seconds of the tree per copy, `pairs` alternating pairs."""
    command = ["-m", "traceview", "summary", str(folder), "--json", "--quiet", "--workers", "1"]
    spent: dict[str, list[float]] = {name: [] for name in packages}
    for pair in range(pairs):
        for name in list(packages)[:: 1 if pair % 2 == 0 else -1]:
            spent[name].append(measure(packages[name], command)[0])
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[32, 160])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--instructions", action="store_true", help="valgrind instruction counts")
    parser.add_argument("--rank", type=Path, default=DEFAULT_RANK)
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind")
    with tempfile.TemporaryDirectory() as scratch:
        packages = copies(Path(scratch))
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in packages}
        for ranks in args.ranks:
            folder = Path(scratch, f"ranks-{ranks}")
            folder.mkdir()
            replicate(args.rank, ranks, folder)
            if args.instructions:
                spent = {name: [instructions(copy, folder)] for name, copy in packages.items()}
            else:
                spent = cpu_pairs(packages, folder, args.pairs)
            ratios = sorted(b / a for a, b in zip(spent["without"], spent["with"], strict=True))
            medians = {name: statistics.median(values) for name, values in spent.items()}
            print(
                f"N={ranks:5d}: without the path {medians['without']:.4g}, with it {medians['with']:.4g}; "
                f"with / without {statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})"
            )
            for name, median in medians.items():
                figures[name].append((ranks, median))
        if len(args.ranks) > 1:
            slopes = {name: slope(points) for name, points in figures.items()}
            print(
                f"per extra rank: without {slopes['without']:.4g}, with {slopes['with']:.4g}; "
                f"with / without {slopes['with'] / slopes['without']:.3f} (budget 1.10)"
            )


if __name__ == "__main__":
    main()
