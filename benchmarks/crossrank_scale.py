"""Scale check of the across-ranks analysis: 256 synthetic ranks x 2,000 collectives each.

Builds the inputs directly as frames in the `comm_kernels` contract (no trace files): one world group, 20
steps of 100 AllReduces, 8 ranks per host with a clock offset per host, rank 17 arriving 300 us late, one
compute kernel before each collective. Prints the wall time of `cross_rank` and the process's peak RSS
before and after it, and checks that the straggler and the offsets were recovered.

    python benchmarks/crossrank_scale.py [RANKS] [COLLECTIVES]
"""

from __future__ import annotations

import resource
import sys
import time

import polars as pl

from traceview.across_ranks.analysis import cross_rank
from traceview.across_ranks.clocks import rank_hosts
from traceview.across_ranks.matching import KERNEL_COLUMNS

RANKS_PER_HOST, STEPS, STRAGGLER, DELAY_US, PERIOD_US = 8, 20, 17, 300.0, 1000.0


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def inputs(
    ranks: int, collectives: int
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(kernels, events, windows, per_step, hosts) of the synthetic run."""
    per_step = collectives // STEPS
    grid = (
        pl.DataFrame({"rank": list(range(ranks))})
        .join(pl.DataFrame({"i": list(range(collectives))}), how="cross")
        .with_columns(pl.col("rank").cast(pl.Int64), pl.col("i").cast(pl.Int64))
    )
    offset = (pl.col("rank") // RANKS_PER_HOST).cast(pl.Float64) * 10_000.0
    jitter = ((pl.col("rank") * 7 + pl.col("i") * 13) % 11).cast(pl.Float64)  # 0..10 us, deterministic
    late = pl.when(pl.col("rank") == STRAGGLER).then(DELAY_US).otherwise(0.0)
    start = pl.col("i").cast(pl.Float64) * PERIOD_US + jitter + late + offset
    end = pl.col("i").cast(pl.Float64) * PERIOD_US + DELAY_US + 200.0 + offset
    base = grid.with_columns(start.alias("start_us"), end.alias("end_us"))
    kernels = base.select(
        pl.col("rank"),
        pl.lit("ncclDevKernel_AllReduce_Sum_bf16_RING_LL").alias("name"),
        "start_us",
        "end_us",
        (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
        pl.lit(20, pl.Int64).alias("stream"),
        pl.lit("AllReduce").alias("collective"),
        (pl.lit(1 << 20) + (pl.col("i") % 4) * 4096).cast(pl.Int64).alias("size_bytes"),
        pl.lit("0").alias("pg_key"),
        pl.lit("0").alias("pg_name"),
        pl.lit(f"[{', '.join(map(str, range(ranks)))}]").alias("pg_ranks"),
        (pl.col("start_us") - 20.0).alias("launch_us"),
    )
    missing = [c for c in KERNEL_COLUMNS if c not in kernels.columns]
    kernels = kernels.with_columns(pl.lit(None).alias(c) for c in missing).select(KERNEL_COLUMNS)
    events = base.select(
        "rank",
        (pl.col("start_us") - 400.0).alias("start_us"),
        (pl.col("start_us") - 5.0).alias("end_us"),
        pl.lit("compute").alias("event_class"),
    )
    step_of = pl.col("i") // per_step
    windows = grid.filter(pl.col("i") % per_step == 0).select(
        "rank",
        step_of.alias("step"),
        (pl.col("i").cast(pl.Float64) * PERIOD_US - 500.0 + offset).alias("window_start_us"),
        ((pl.col("i") + per_step).cast(pl.Float64) * PERIOD_US - 500.0 + offset).alias("window_end_us"),
    )
    steps = windows.select(
        "rank",
        "step",
        pl.lit(per_step * PERIOD_US).alias("step_us"),
        pl.lit(per_step * 400.0).alias("comp_us"),
    )
    hosts = rank_hosts(list(range(ranks)), {}, ranks_per_host=RANKS_PER_HOST)
    return kernels, events, windows, steps, hosts


def main() -> None:
    """Build, run, print time, memory and what was recovered."""
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    collectives = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    kernels, events, windows, per_step, hosts = inputs(ranks, collectives)
    before = _peak_mb()
    started = time.perf_counter()
    result = cross_rank(kernels, events, windows, per_step, hosts)
    seconds = time.perf_counter() - started
    offsets = result.clocks.offsets.get_column("offset_us").to_list()
    worst = max(abs(o - h * 10_000.0) for h, o in enumerate(offsets))
    print(f"ranks {ranks}, collectives per rank {collectives}, kernels {kernels.height:,}")
    print(f"cross_rank: {seconds:.2f} s ({kernels.height / seconds / 1e6:.2f} M kernels/s)")
    print(f"peak RSS: {before:.0f} MB after building inputs, {_peak_mb():.0f} MB after the analysis")
    print(
        f"instances {result.instances.height}, usable {result.usable_instances}, mismatches "
        f"{result.mismatches.height}"
    )
    print(
        f"stragglers {result.stragglers} (planted ({STRAGGLER},)); worst offset error {worst:.1f} us (jitter "
        f"<= 10 us)"
    )


if __name__ == "__main__":
    main()
