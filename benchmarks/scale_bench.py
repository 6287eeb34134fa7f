"""Memory and time as ranks grow: the map/reduce pipeline against holding every parsed rank (the baseline).

    python benchmarks/scale_bench.py --rank TRACE.json.gz --ranks 1 8 32 64 [--workers 2]

Builds N ranks by replicating one real rank (its `distributedInfo.rank` rewritten to 0..N-1) into a temporary
folder, then runs, each in a fresh process: the baseline (`load_run` then `analyze`: every rank's parsed trace
held until the end) and the pipeline (`traceview.reduce.pipeline.analyze_files`: one parse per worker,
summaries only) with one worker and with `--workers`. Prints wall time and the peak RSS of the whole process
tree (the parent and its workers together, sampled from /proc every 20 ms), and the ratios: peak(N) /
peak(first N) per method, and pipeline / baseline.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNNERS = {
    "baseline": "from traceview.reduce.analysis import analyze; from traceview.load.inputs import load_run; "
    "analyze(load_run(sys.argv[1], workers=1))",
    "pipeline x1": "import traceview; traceview.analyze(sys.argv[1], workers=1)",
    "pipeline xW": "import traceview; traceview.analyze(sys.argv[1], workers=int(sys.argv[2]))",
}


def replicate(source: Path, ranks: int, folder: Path) -> None:
    """`ranks` copies of `source` as rank-<r>.json.gz, each with distributedInfo.rank = r and world_size =
    ranks (a copy that kept its world size would be set apart as another job's, and no figure would cover
    it)."""
    raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
    rank_field = re.compile(rb'("distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*)-?\d+')
    world_field = re.compile(rb'("distributedInfo"\s*:\s*\{[^{}]*?"world_size"\s*:\s*)-?\d+')
    sized, _ = world_field.subn(lambda m: m.group(1) + str(ranks).encode(), raw, count=1)
    for rank in range(ranks):
        text, found = rank_field.subn(lambda m, r=rank: m.group(1) + str(r).encode(), sized, count=1)
        if not found:
            document = json.loads(raw)
            document.setdefault("distributedInfo", {}).update(rank=rank, world_size=ranks)
            text = json.dumps(document).encode()
        (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(text, compresslevel=1))


def _tree_rss_kib(root: int) -> int:
    """RSS of `root` and every descendant, from /proc (KiB)."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            for task in Path(f"/proc/{pid}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, AttributeError):
            continue
    return total


def measure(code: str, folder: Path, workers: int) -> tuple[float, float]:
    """(wall seconds, peak tree RSS MiB) of `code`, each from a fresh process of its own: the wall time from
    one that nothing watches (sampling /proc takes CPU from the workers on a small machine), the peak from
    one sampled every 20 ms."""
    command = [sys.executable, "-c", "import sys; " + code, str(folder), str(workers)]
    start = time.perf_counter()
    if subprocess.run(command, check=False).returncode:
        raise SystemExit(f"{code!r} failed")
    wall = time.perf_counter() - start
    process = subprocess.Popen(command)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _tree_rss_kib(process.pid))
        time.sleep(0.02)
    if process.returncode:
        raise SystemExit(f"{code!r} failed with exit code {process.returncode}")
    return wall, peak / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=Path, required=True, help="one rank's trace to replicate")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=list(RUNNERS), choices=list(RUNNERS))
    args = parser.parse_args()
    rows: dict[str, list[tuple[int, float, float]]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.ranks:
            folder = Path(tmp) / f"n{count}"
            folder.mkdir()
            replicate(args.rank, count, folder)
            for method in args.methods:
                wall, peak = measure(RUNNERS[method], folder, args.workers)
                rows[method].append((count, wall, peak))
                print(
                    f"{method:12s} N={count:4d}  wall {wall:7.2f} s  peak RSS (tree) {peak:8.1f} MiB",
                    flush=True,
                )
    print("\nratios")
    for method, found in rows.items():
        first = found[0]
        for count, wall, peak in found[1:]:
            print(
                f"{method:12s} N={count:4d}/{first[0]}: peak x{peak / first[2]:.2f}, wall "
                f"x{wall / first[1]:.2f}"
            )
    if "baseline" in rows:
        for method, found in rows.items():
            for (count, wall, peak), (_, base_wall, base_peak) in zip(found, rows["baseline"], strict=True):
                if method != "baseline":
                    print(
                        f"{method:12s} N={count:4d} vs baseline: peak x{peak / base_peak:.2f}, wall "
                        f"x{wall / base_wall:.2f}"
                    )


if __name__ == "__main__":
    main()
