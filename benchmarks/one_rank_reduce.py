"""The reduce of a one-rank run (issue 42): its CPU seconds with the one-rank table of
`traceview.across_ranks.lone_rank` (the parts one rank fixes, skipped) against the full path forced (the
table emptied), in alternating pairs in one process, and where the rest of the reduce goes.

    python benchmarks/one_rank_reduce.py [RANK_FILE ...] [--pairs 7] [--parts]

Each file is read and summarised once (the map, not timed), then reduced `--pairs` times each way, the order
alternating (full first, then skip first), each reduce timed by `time.process_time` (every thread of the
process: polars' pool included). Printed per file: the median CPU seconds of each side with its range, and
the median of the paired ratios skip / full with its range; both documents (`summary --json --full`) are
checked equal first. `--parts` adds the median CPU of each top-level part of the reduce (the functions
`reduce_held` calls), from the skip side. The revision before (the whole reduce, pricing included) is
compared by `paired_revisions.py --before REV --reduce FOLDER`. Other work on the machine moves every
figure; the paired ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from traceview.parsers import kineto
from traceview.reports.json.summary import render_json

from traceview.across_ranks import lone_rank
from traceview.map.rank_summary import RankSummary, summarize
from traceview.reduce import reduce as reduce_module
from traceview.reduce.reduce import reduce_summaries

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "real" / "kineto"
DEFAULT_RANKS = (
    REAL / "h200_pt211_nccl_ddp1" / "ddp_rank0.json.gz",  # one rank, no collective
    REAL / "hta_16rank_job_rank0" / "rank0.json.gz",  # one rank of 16, 80 collectives
    ROOT / "sample_traces" / "dp8_straggler" / "rank-0.pt.trace.json.gz",  # one rank of 8, all-reduces
)


@contextmanager
def full_path() -> Iterator[None]:
    """The reduce with the one-rank table emptied: every part computed."""
    table = lone_rank.LONE_RANK_PARTS
    lone_rank.LONE_RANK_PARTS = {}
    try:
        yield
    finally:
        lone_rank.LONE_RANK_PARTS = table


def reduce_cpu(summaries: list[RankSummary]) -> float:
    """CPU seconds of one reduce of `summaries` (every thread)."""
    start = time.process_time()
    reduce_summaries(summaries)
    return time.process_time() - start


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} (range {min(values):.4f}-{max(values):.4f})"


def measure(path: Path, pairs: int) -> None:
    """The paired figures of one rank (module docstring)."""
    summaries = [summarize(kineto.parse(path), ranks_in_run=1)]
    with full_path():
        full_document = render_json(reduce_summaries(summaries), full=True)
    if render_json(reduce_summaries(summaries), full=True) != full_document:
        raise SystemExit(f"{path}: the documents differ with and without the one-rank table")
    sides: dict[str, list[float]] = {"full": [], "skip": []}
    for pair in range(pairs):
        for side in ("full", "skip") if pair % 2 == 0 else ("skip", "full"):
            if side == "full":
                with full_path():
                    sides[side].append(reduce_cpu(summaries))
            else:
                sides[side].append(reduce_cpu(summaries))
    ratios = [s / f for s, f in zip(sides["skip"], sides["full"], strict=True)]
    print(f"{path.name}: full {_spread(sides['full'])} CPU-s; skip {_spread(sides['skip'])} CPU-s")
    print(f"  skip / full, paired: {_spread(ratios)}  (documents equal)")


def parts(path: Path, rounds: int) -> None:
    """Median CPU milliseconds of each top-level part of the reduce of `path` (the skip side)."""
    summaries = [summarize(kineto.parse(path), ranks_in_run=1)]
    spent: dict[str, list[float]] = {}
    for _ in range(rounds):
        found: Counter[str] = Counter()
        with _timed_parts(found):
            total = reduce_cpu(summaries)
        found["(the rest)"] = total - sum(found.values())
        for name, seconds in found.items():
            spent.setdefault(name, []).append(seconds)
    ranked = sorted(spent.items(), key=lambda item: -statistics.median(item[1]))
    print("  parts (ms):", ", ".join(f"{n} {statistics.median(v) * 1000:.0f}" for n, v in ranked))


@contextmanager
def _timed_parts(found: Counter[str]) -> Iterator[None]:
    """Every function `reduce_held` calls by name from its module, timed into `found` (outermost only)."""
    originals = {
        name: value
        for name, value in vars(reduce_module).items()
        if callable(value)
        and not isinstance(value, type)
        and getattr(value, "__module__", "").startswith("traceview")
        and name not in ("reduce_held", "reduce_summaries", "in_memory")
    }
    depth = [0]

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return function(*args, **kwargs)
            depth[0] += 1
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                found[name] += time.process_time() - start
                depth[0] -= 1

        return run

    for name, function in originals.items():
        setattr(reduce_module, name, timed(name, function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(reduce_module, name, function)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("ranks", nargs="*", type=Path, default=list(DEFAULT_RANKS))
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--parts", action="store_true", help="where the rest of the reduce goes")
    options = parser.parse_args()
    for path in options.ranks:
        measure(path, options.pairs)
        if options.parts:
            parts(path, options.pairs)


if __name__ == "__main__":
    main()
