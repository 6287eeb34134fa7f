"""The fixed cost of a pool worker's imports with and without bytecode (issue 42), in alternating pairs: CPU
seconds of a fresh interpreter importing what a map worker imports, under `PYTHONDONTWRITEBYTECODE=1`.

    python benchmarks/editable_bytecode.py --pairs 5

"without": the source tree as an editable install leaves it when nothing compiled it (every module compiled
in memory at each import, as each pool worker did); "with": the same tree after the build backend's
`compile_package_folders` (tools/build_backend/traceview_build.py), which an editable install now runs.
Both are copies of this working tree laid out as installed (`paired_revisions.assemble`'s layout), so the
editable finder's own cost is left out of both. The floor, polars and msgspec alone, is measured in the
same pairs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"traceview": "traceview", "parsers": "traceview/parsers", "reports": "traceview/reports"}
WORKER_IMPORTS = (
    "import traceview.map.executors, traceview.map.rank_summary, traceview.map.packed, "
    "traceview.parsers.kineto.batch, traceview.load.inputs, traceview.events.kernel_names"
)
"""What a local pool worker imports to summarise its batch (`traceview.map.executors.summarize_files`)."""
FLOOR = "import polars, msgspec, multiprocessing, concurrent.futures.process"


def laid_out(into: Path) -> Path:
    """This tree's packages copied under `into` as installed, without bytecode."""
    for folder, place in PACKAGE_DIRS.items():
        shutil.copytree(ROOT / folder, into / place, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return into


def cpu_of(packages: Path, statement: str) -> float:
    """CPU seconds (user + system) of a fresh interpreter running `statement` with `packages` first."""
    environment = {**os.environ, "PYTHONPATH": str(packages), "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.Popen([sys.executable, "-P", "-c", statement], env=environment)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{statement!r} failed")
    return usage.ru_utime + usage.ru_stime


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=5)
    pairs = parser.parse_args().pairs
    spec = importlib.util.spec_from_file_location(
        "traceview_build", ROOT / "tools" / "build_backend" / "traceview_build.py"
    )
    assert spec is not None
    assert spec.loader is not None
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    with tempfile.TemporaryDirectory() as scratch:
        without = laid_out(Path(scratch, "without"))
        with_bytecode = laid_out(Path(scratch, "with"))
        backend.compile_package_folders(with_bytecode)
        sides: dict[str, list[float]] = {"without": [], "with": [], "floor": []}
        for pair in range(pairs):
            order = ("without", "with") if pair % 2 == 0 else ("with", "without")
            for side in order:
                sides[side].append(cpu_of(without if side == "without" else with_bytecode, WORKER_IMPORTS))
            sides["floor"].append(cpu_of(without, FLOOR))
            print(f"pair {pair}: " + "  ".join(f"{s} {sides[s][-1]:.3f} CPU-s" for s in (*order, "floor")))
    for side, values in sides.items():
        print(f"{side}: CPU-s {_spread(values)}")
    ratios = [a / b for a, b in zip(sides["with"], sides["without"], strict=True)]
    print(f"with / without, paired: {_spread(ratios)}")


if __name__ == "__main__":
    main()
