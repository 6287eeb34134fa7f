"""The reduce and the report at cluster scale: N realistic rank summaries, varied, reduced and rendered.

    python benchmarks/reduce_scale.py --ranks 64 256 1024

Summarises the 8 ranks of `sample_traces/dp8_straggler` once (the map), then builds N summaries from them:
rank r is rank r % 8's summary renumbered, its times jittered by up to 0.5 ms (a seeded draw), its process
group the world of N ranks. Prints, per N: the time of the reduce (matching, clocks, stragglers, bubbles,
prediction, verdict), of the JSON and of the HTML report, the report's size, and the peak RSS of this process;
and the ratios against the smallest N.
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from dataclasses import replace
from pathlib import Path

import polars as pl
from traceview.reports.html.page import render_html
from traceview.reports.json.summary import render_json

from traceview.load.inputs import load_run
from traceview.map.rank_summary import RankSummary, summarize
from traceview.model.trace import TraceMeta
from traceview.reduce.reduce import reduce_summaries

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"


def _ranked(summary: RankSummary) -> list[str]:
    """The summary's frames keyed by rank (every frame with a `rank` column: the time-bearing ones of
    `TIME_COLUMNS` and the others, the critical path's rows and holders among them)."""
    frames = {name: getattr(summary, name) for name in summary.__dataclass_fields__}
    return [n for n, f in frames.items() if isinstance(f, pl.DataFrame) and "rank" in f.columns]


def renumbered(summary: RankSummary, rank: int, world: int, jitter_us: float) -> RankSummary:
    """`summary` as rank `rank` of a world of `world` ranks, its times moved by `jitter_us`."""
    ranks = "[" + ", ".join(str(r) for r in range(min(world, 30))) + (", ...]" if world > 30 else "]")
    moved = summary.shifted(jitter_us)
    frames = {
        name: getattr(moved, name).with_columns(pl.lit(rank, pl.Int64).alias("rank"))
        for name in _ranked(moved)
    }
    frames["kernels"] = frames["kernels"].with_columns(
        pl.lit(world, pl.Int64).alias("group_size"), pl.lit(ranks).alias("pg_ranks")
    )
    meta: TraceMeta = replace(moved.trace.meta, rank=rank, world_size=world, process_groups=())
    return replace(moved, trace=replace(moved.trace, meta=meta, path=f"rank-{rank}.json.gz"), **frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    args = parser.parse_args()
    base = [summarize(trace) for trace in load_run(SAMPLE)]
    draw = random.Random(7)
    first: tuple[float, float] | None = None
    for count in args.ranks:
        summaries = [renumbered(base[r % 8], r, count, draw.uniform(0, 500)) for r in range(count)]
        start = time.perf_counter()
        analysis = reduce_summaries(summaries)
        reduced = time.perf_counter()
        document = render_json(analysis)
        rendered_json = time.perf_counter()
        page = render_html(analysis)
        done = time.perf_counter()
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        total = done - start
        print(
            f"N={count:5d}: reduce {reduced - start:6.2f} s, JSON {rendered_json - reduced:5.2f} s "
            f"({len(document) / 1e6:.1f} MB), HTML {done - rendered_json:5.2f} s ({len(page) / 1e6:.1f} MB); "
            f"total {total:6.2f} s; peak RSS {peak_mib:7.1f} MiB",
            flush=True,
        )
        first = first or (total, peak_mib)
        print(f"         vs N={args.ranks[0]}: time x{total / first[0]:.2f}, peak x{peak_mib / first[1]:.2f}")


if __name__ == "__main__":
    main()
