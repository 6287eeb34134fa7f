"""What the kernels analysis (issue 23) costs: `traceview summary RANK --json` with and without it, in paired
runs.

    python benchmarks/kernels_cost.py [--rank FILE] [--repeat 7]

Each run is a fresh process running the command (`traceview.cli.main.main`) on one rank (default: the 54 MB
`hta_df_index_resolver`, read in the command's own process); the runs "without" replace the map's kernels part
(`traceview.map.rank_summary.rank_kernel_parts`) by one that returns no rows, so everything else is the same
work. The two kinds alternate (with, without, with, ...), so a drift of the machine touches both. Printed per
run: the command's wall seconds and the process's; then the medians and the ratio with / without (target
<= 1.10), and the ratio of the medians of the pairs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _bytecode import compile_sources

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RANK = ROOT.parent / "shared/data/real/kineto/hta_df_index_resolver/df_index_resolver.json.gz"
TARGET = 1.10
RUNNER = """
import sys, time, io, contextlib
rank, with_section = sys.argv[1], sys.argv[2] == "with"
from traceview.map import rank_summary
if not with_section:
    from traceview.kernels.parts import KernelParts
    rank_summary.rank_kernel_parts = lambda *args, **kwargs: KernelParts.empty()
from traceview.cli.main import main
sys.argv = ["traceview", "summary", rank, "--json", "--quiet"]
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit:
        pass
print(time.perf_counter() - start)
"""


def run_once(rank: Path, with_section: bool) -> tuple[float, float, float]:
    """(the command's wall seconds, the process's wall seconds, the process's CPU seconds: user + system of
    every thread) of one fresh run."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(rank), "with" if with_section else "without"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"the command failed with exit code {child.returncode}")
    return (
        float(output.strip().splitlines()[-1]),
        time.perf_counter() - start,
        usage.ru_utime + usage.ru_stime,
    )


def _median_ratio(pairs: list[tuple[tuple[float, ...], tuple[float, ...]]], index: int) -> tuple[float, ...]:
    """(median with, median without, their ratio, the median of the paired ratios) of one measure."""
    with_values = [p[0][index] for p in pairs]
    without_values = [p[1][index] for p in pairs]
    paired = statistics.median(w / o for w, o in zip(with_values, without_values, strict=True))
    with_median, without_median = statistics.median(with_values), statistics.median(without_values)
    return with_median, without_median, with_median / without_median, paired


def main(argv: list[str]) -> int:
    """Alternate the runs, print each and the medians; exit 1 when the CPU time's paired ratio passes the
    target (CPU seconds move least with the machine's load)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=Path, default=DEFAULT_RANK)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    compile_sources(ROOT)  # timed as installed (benchmarks/_bytecode.py)
    run_once(args.rank, True)  # warm the file cache
    pairs = []
    print(
        f"{'run':>4} {'with: command s':>16} {'process s':>10} {'CPU s':>7} {'without: command s':>19} "
        f"{'process s':>10} {'CPU s':>7}"
    )
    for index in range(args.repeat):
        pair = (run_once(args.rank, True), run_once(args.rank, False))
        pairs.append(pair)
        (wc, wp, wu), (oc, op, ou) = pair
        print(f"{index:>4} {wc:>16.3f} {wp:>10.3f} {wu:>7.3f} {oc:>19.3f} {op:>10.3f} {ou:>7.3f}")
    for name, index in (("command wall", 0), ("process wall", 1), ("process CPU", 2)):
        with_median, without_median, ratio, paired = _median_ratio(pairs, index)
        print(
            f"{name:>12}: with {with_median:.3f} s, without {without_median:.3f} s: ratio {ratio:.3f}, "
            f"median of the paired ratios {paired:.3f}"
        )
    cpu_paired = _median_ratio(pairs, 2)[3]
    print(f"target: the CPU time's paired ratio <= {TARGET}: {'met' if cpu_paired <= TARGET else 'NOT met'}")
    return 0 if cpu_paired <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
