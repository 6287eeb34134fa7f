"""What one polars query costs on a small frame, run alone, gathered with its siblings, or keyed by rank over
many ranks stacked: the figures behind the map's fixed cost per rank (docs/scaling.md, "Where a rank's fixed
cost goes").

    python benchmarks/query_overhead.py [--rows 100] [--queries 1000] [--repeat 3]

One query is what the map runs many times per rank: a filter, a group-by with a sum, a sort, on a frame of
`--rows` rows (a small rank's events). It is run `--queries` times, each with its own threshold, three ways,
on polars' in-memory engine (as the map runs):

- alone: one `collect()` per query (what a rank pays per query today);
- gathered: the same plans, 10 at a time, in one `pl.collect_all` (sibling queries of one rank, or the same
  query of 10 ranks);
- keyed: the `--queries` frames stacked with a `rank` column and the query run once, grouped by rank (a batch
  of ranks summarised together).

Printed: microseconds of wall and of CPU per query for each way, the CPU ratios against "alone", and the
polars thread count. The three results are checked equal before anything is printed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import polars as pl

GATHERED = 10


def _frame(rows: int) -> pl.DataFrame:
    return pl.DataFrame(
        {"a": list(range(rows)), "b": [float(i) for i in range(rows)], "g": [i % 5 for i in range(rows)]}
    )


def _query(frame: pl.LazyFrame, threshold: pl.Expr | int) -> pl.LazyFrame:
    return frame.filter(pl.col("a") > threshold).group_by("g").agg(pl.col("b").sum())


def _alone(frame: pl.DataFrame, queries: int) -> list[pl.DataFrame]:
    return [_query(frame.lazy(), i % 50).sort("g").collect() for i in range(queries)]


def _gathered(frame: pl.DataFrame, queries: int) -> list[pl.DataFrame]:
    done: list[pl.DataFrame] = []
    for first in range(0, queries, GATHERED):
        plans = [_query(frame.lazy(), i % 50).sort("g") for i in range(first, min(first + GATHERED, queries))]
        done += pl.collect_all(plans)
    return done


def _keyed(frame: pl.DataFrame, queries: int) -> list[pl.DataFrame]:
    ranks = pl.int_range(queries, dtype=pl.Int64).alias("rank")
    stacked = pl.select(ranks).join(frame, how="cross").lazy()
    result = (
        stacked.filter(pl.col("a") > pl.col("rank") % 50)
        .group_by("rank", "g")
        .agg(pl.col("b").sum())
        .sort("rank", "g")
        .collect()
    )
    by_rank = result.partition_by("rank", include_key=False, as_dict=True, maintain_order=True)
    empty = pl.DataFrame(schema={"g": pl.Int64, "b": pl.Float64})
    return [by_rank.get((rank,), empty) for rank in range(queries)]


def _timed(
    way: Callable[[pl.DataFrame, int], list[pl.DataFrame]], frame: pl.DataFrame, queries: int
) -> tuple[float, float, list[pl.DataFrame]]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = way(frame, queries)
    return (time.perf_counter() - wall) / queries * 1e6, (time.process_time() - cpu) / queries * 1e6, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each way, alternating; median kept")
    args = parser.parse_args()
    pl.Config.set_engine_affinity("in-memory")
    frame = _frame(args.rows)
    ways = {"alone": _alone, "gathered": _gathered, "keyed": _keyed}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(args.repeat):
        results = {}
        for name, way in ways.items():
            wall, cpu, results[name] = _timed(way, frame, args.queries)
            figures[name].append((wall, cpu))
        for name in ("gathered", "keyed"):
            if not all(a.equals(b) for a, b in zip(results["alone"], results[name], strict=True)):
                raise SystemExit(f"{name}: results differ from alone")
    threads = pl.thread_pool_size()
    print(f"{args.queries} queries on {args.rows} rows; polars {pl.__version__}, {threads} threads")
    alone_cpu = statistics.median(cpu for _, cpu in figures["alone"])
    for name in ways:
        wall = statistics.median(w for w, _ in figures[name])
        cpu = statistics.median(c for _, c in figures[name])
        ratio = alone_cpu / cpu
        print(
            f"  {name:9s} {wall:7.1f} us wall {cpu:7.1f} us CPU per query  {ratio:5.1f}x less CPU than alone"
        )


if __name__ == "__main__":
    main()
