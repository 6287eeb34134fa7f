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
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


def run_once(rank: Path, with_section: bool) -> tuple[float, float]:
    """(the command's wall seconds, the process's wall seconds) of one fresh run."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(rank), "with" if with_section else "without"],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1]), time.perf_counter() - start


def main(argv: list[str]) -> int:
    """Alternate the runs, print each and the medians; exit 1 past the target ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=Path, default=DEFAULT_RANK)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    run_once(args.rank, True)  # warm the file cache
    pairs: list[tuple[tuple[float, float], tuple[float, float]]] = []
    print(
        f"{'run':>4} {'with: command s':>16} {'process s':>10} {'without: command s':>19} {'process s':>10}"
    )
    for index in range(args.repeat):
        pair = (run_once(args.rank, True), run_once(args.rank, False))
        pairs.append(pair)
        (wc, wp), (oc, op) = pair
        print(f"{index:>4} {wc:>16.3f} {wp:>10.3f} {oc:>19.3f} {op:>10.3f}")
    with_command = statistics.median(p[0][0] for p in pairs)
    without_command = statistics.median(p[1][0] for p in pairs)
    with_process = statistics.median(p[0][1] for p in pairs)
    without_process = statistics.median(p[1][1] for p in pairs)
    paired = statistics.median(p[0][0] / p[1][0] for p in pairs)
    ratio = with_command / without_command
    print(f"\nmedian command: with {with_command:.3f} s, without {without_command:.3f} s: ratio {ratio:.3f}")
    process_ratio = with_process / without_process
    print(
        f"median process: with {with_process:.3f} s, without {without_process:.3f} s: "
        f"ratio {process_ratio:.3f}"
    )
    print(f"median of the paired ratios (command): {paired:.3f} (target <= {TARGET})")
    return 0 if paired <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
