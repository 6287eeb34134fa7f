"""Kernels paired across two runs by their key (docs/metrics.md, "Compare and trend", family `kernel`).

Each summary lists every rank's heaviest kernels (`kernels.top_kernels`, issue 23) with the key that folds
what varies between runs of the same work (template arguments, generated suffixes, autotuning variants:
`traceview.events.kernel_keys`). Per (rank, key) both runs list, the mean duration of its kernels (total /
count) pairs up; per key, the log ratios of its ranks are tested by the Wilcoxon signed-rank test
(`traceview.compare.stats.signed_rank`), the figures being the mean durations summed over the paired ranks.
Compute kernels only: communication kernels have their own families (`collective`, `collective_calls`). A
change in a kernel's mean duration is the same work running slower; more kernels of a key is different work,
which the run-level figures and the class pairs (`traceview.compare.paired`, family `rank`) show.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from traceview.compare.findings import Finding
from traceview.compare.stats import TestResult, signed_rank
from traceview.events.kernel_classes import COMPUTE_CLASSES

KERNEL_KEYS = ["rank", "key"]
COMPARED_KEYS = 24
"""Keys tested: those of largest summed total time over both runs' paired ranks."""


MEANS_SCHEMA = {
    "rank": pl.Int64,
    "key": pl.Utf8,
    "kernel_class": pl.Utf8,
    "count": pl.Int64,
    "total_us": pl.Float64,
    "mean_us": pl.Float64,
}
"""The columns of `kernel_means`."""


def kernel_means(document: Mapping[str, Any]) -> pl.DataFrame:
    """Per (rank, key, kernel_class): kernels, total, and the mean duration (names of one key folded)."""
    rows = ((document.get("kernels") or {}).get("top_kernels")) or []
    if not rows:
        return pl.DataFrame(schema=MEANS_SCHEMA)
    frame = pl.DataFrame(rows, infer_schema_length=None).filter(
        pl.col("kernel_class").is_in(list(COMPUTE_CLASSES))
    )
    return (
        frame.group_by(*KERNEL_KEYS)
        .agg(pl.col("kernel_class").first(), pl.col("count").sum(), pl.col("total_us").sum())
        .with_columns((pl.col("total_us") / pl.col("count")).alias("mean_us"))
    )


def kernel_pairs(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> pl.DataFrame:
    """Per (rank, key) both runs list: the mean kernel durations paired, with `log_ratio` and the weight
    (both runs' total time) that ranks the keys."""
    base, cand = kernel_means(baseline), kernel_means(candidate)
    joined = base.join(cand.select(*KERNEL_KEYS, "mean_us", "total_us"), on=KERNEL_KEYS, suffix="_cand")
    return joined.filter((pl.col("mean_us") > 0) & (pl.col("mean_us_cand") > 0)).select(
        *KERNEL_KEYS,
        "kernel_class",
        pl.col("mean_us").alias("baseline"),
        pl.col("mean_us_cand").alias("candidate"),
        (pl.col("mean_us_cand") / pl.col("mean_us")).log().alias("log_ratio"),
        (pl.col("total_us") + pl.col("total_us_cand")).alias("weight"),
    )


def kernel_findings(pairs: pl.DataFrame, bound: int = COMPARED_KEYS) -> list[Finding]:
    """One `kernel` finding per key with paired ranks (the `bound` keys of most time)."""
    if pairs.height == 0:
        return []
    groups = (
        pairs.group_by("key")
        .agg(
            pl.col("kernel_class").first(),
            pl.col("baseline").sum(),
            pl.col("candidate").sum(),
            pl.col("log_ratio"),
            pl.col("weight").sum(),
        )
        .sort(["weight", "key"], descending=[True, False])
        .head(bound)
    )
    found = []
    for row in groups.iter_rows(named=True):
        n, w_plus, p_value = signed_rank(row["log_ratio"])
        base, cand = row["baseline"], row["candidate"]
        found.append(
            Finding(
                family="kernel",
                metric="kernel_us",
                subject=f"kernel {row['key']}",
                statistic="mean duration, paired by rank",
                worse="higher",
                baseline=base,
                candidate=cand,
                change_pct=math.expm1(math.log(cand / base)) * 100,
                test=TestResult(n, n, base, cand, w_plus, p_value, "wilcoxon-signed-rank"),
                fields=(("kernel_key", row["key"]), ("kernel_class", row["kernel_class"])),
            )
        )
    return found
