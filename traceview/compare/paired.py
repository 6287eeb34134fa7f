"""Paired comparisons: the same work of the same rank in both runs (docs/metrics.md, "Compare and trend").

Two runs of one job repeat the same calls: rank r's AllReduce of S bytes in process group g, rank r's compute
of kernel class c in its i-th profiled step. Paired with its counterpart, each gives one log ratio
log(candidate / baseline); the spread between ranks and between calls cancels, and a change is tested against
the spread of the ratios (the Wilcoxon signed-rank test, `traceview.compare.stats.signed_rank`).

- `collective_calls` (per process group and collective, all sizes): the pairs are the (rank, message size)
  signatures of `distributions.collective_calls`, each its median kernel duration; the figures are the sums
  of those medians (`call_us`) and the change their ratio - 1.
- `rank` (per rank): the pairs are its (profiled step, kernel class) compute times of
  `distributions.kernel_classes`, steps paired by their order within the rank; the figures are its compute
  time per paired step. A rank stands out only when it changed beyond its peers too: `beyond_peers_pct` =
  exp(median over its pairs of (log ratio - the median log ratio over ranks of the same step and class)) - 1,
  tested by a second signed-rank test; the finding's p is the larger of the two (both must hold).

A kernel-class change beyond the threshold (significant or not) is `explained` by the ranks that stand out
when, over the other ranks' pairs of that class, the change stays within the threshold: those ranks changed,
not the class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from traceview.compare.findings import CompareSettings, Finding
from traceview.compare.kernel_pairs import kernel_findings, kernel_pairs
from traceview.compare.stats import TestResult, signed_rank

CALL_KEYS = ["rank", "pg_key", "collective", "size_bytes"]
CLASS_KEYS = ["rank", "ordinal", "kernel_class"]
JUDGED = ("regression", "improvement")
CHANGED = (*JUDGED, "not significant")


def _table(document: Mapping[str, Any], name: str) -> pl.DataFrame:
    rows = (document.get("distributions") or {}).get(name) or []
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def _joined(base: pl.DataFrame, cand: pl.DataFrame, keys: list[str], value: str) -> pl.DataFrame:
    """The rows both runs have, with `baseline`, `candidate` (both > 0) and `log_ratio`."""
    if base.height == 0 or cand.height == 0 or not all(c in f.columns for f in (base, cand) for c in keys):
        return pl.DataFrame(schema={**dict.fromkeys(keys, pl.Utf8), "baseline": pl.Float64})
    return (
        base.select(*keys, pl.col(value).cast(pl.Float64).alias("baseline"))
        .join(cand.select(*keys, pl.col(value).cast(pl.Float64).alias("candidate")), on=keys)
        .filter((pl.col("baseline") > 0) & (pl.col("candidate") > 0))
        .with_columns((pl.col("candidate") / pl.col("baseline")).log().alias("log_ratio"))
    )


def call_pairs(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> pl.DataFrame:
    """Per (rank, pg_key, collective, size_bytes) both runs made: the median kernel durations paired."""
    base, cand = _table(baseline, "collective_calls"), _table(candidate, "collective_calls")
    cast = [pl.col("pg_key").cast(pl.Utf8), pl.col("size_bytes").cast(pl.Int64)]
    if base.height and cand.height:
        base, cand = base.with_columns(cast), cand.with_columns(cast)
    return _joined(base, cand, CALL_KEYS, "median_us")


def _with_ordinal(frame: pl.DataFrame) -> pl.DataFrame:
    if frame.height == 0:
        return frame
    ordinal = pl.col("step").rank("dense").over("rank").cast(pl.Int64) - 1
    return frame.with_columns(ordinal.alias("ordinal"))


def class_pairs(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> pl.DataFrame:
    """Per (rank, step ordinal, kernel class) both runs have: the compute times paired, with `beyond_peers`
    = the log ratio less the median log ratio over ranks of the same (ordinal, class)."""
    base = _with_ordinal(_table(baseline, "kernel_classes"))
    cand = _with_ordinal(_table(candidate, "kernel_classes"))
    pairs = _joined(base, cand, CLASS_KEYS, "time_us")
    if "log_ratio" not in pairs.columns:
        return pairs
    drift = pl.col("log_ratio").median().over("ordinal", "kernel_class")
    return pairs.with_columns((pl.col("log_ratio") - drift).alias("beyond_peers"))


def _test(pairs: int, w_plus: float | None, p_value: float | None, base: float, cand: float) -> TestResult:
    return TestResult(pairs, pairs, base, cand, w_plus, p_value, "wilcoxon-signed-rank")


def collective_call_findings(pairs: pl.DataFrame) -> list[Finding]:
    """One `collective_calls` finding per (pg_key, collective) with paired calls."""
    if "log_ratio" not in pairs.columns:
        return []
    groups = pairs.group_by("pg_key", "collective").agg(
        pl.col("baseline").sum(), pl.col("candidate").sum(), pl.col("log_ratio")
    )
    found = []
    for row in groups.sort("pg_key", "collective").iter_rows(named=True):
        n, w_plus, p_value = signed_rank(row["log_ratio"])
        base, cand = row["baseline"], row["candidate"]
        found.append(
            Finding(
                family="collective_calls",
                metric="call_us",
                subject=f"{row['collective']} pg={row['pg_key']} all sizes",
                statistic="sum of medians",
                worse="higher",
                baseline=base,
                candidate=cand,
                change_pct=(cand / base - 1) * 100,
                test=_test(n, w_plus, p_value, base, cand),
                fields=(
                    ("collective", row["collective"]),
                    ("pg_key", row["pg_key"]),
                    ("size_bucket", "all sizes"),
                ),
            )
        )
    return found


def _larger(first: float | None, second: float | None) -> float | None:
    return None if first is None or second is None else max(first, second)


def rank_findings(pairs: pl.DataFrame) -> list[Finding]:
    """One `rank` finding per rank with paired compute: its own change, and beyond its peers'."""
    if "beyond_peers" not in pairs.columns:
        return []
    groups = pairs.group_by("rank").agg(
        pl.col("baseline").sum(),
        pl.col("candidate").sum(),
        pl.col("ordinal").n_unique().alias("steps"),
        pl.col("log_ratio"),
        pl.col("beyond_peers"),
        pl.col("beyond_peers").median().alias("median_beyond"),
    )
    found = []
    for row in groups.sort("rank").iter_rows(named=True):
        n, w_plus, p_own = signed_rank(row["log_ratio"])
        _, _, p_beyond = signed_rank(row["beyond_peers"])
        base, cand = row["baseline"] / row["steps"], row["candidate"] / row["steps"]
        found.append(
            Finding(
                family="rank",
                metric="compute_us",
                subject=f"rank {row['rank']}",
                statistic="per step",
                worse="higher",
                baseline=base,
                candidate=cand,
                change_pct=(cand / base - 1) * 100,
                test=_test(n, w_plus, _larger(p_own, p_beyond), base, cand),
                fields=(("rank", row["rank"]),),
                beyond_peers_pct=math.expm1(row["median_beyond"]) * 100,
            )
        )
    return found


def paired_findings(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[Finding]:
    """Every paired finding of two summary documents (module docstring; kernels by key:
    `traceview.compare.kernel_pairs`)."""
    return (
        collective_call_findings(call_pairs(baseline, candidate))
        + rank_findings(class_pairs(baseline, candidate))
        + kernel_findings(kernel_pairs(baseline, candidate))
    )


def _class_change_without(pairs: pl.DataFrame, kernel_class: str, ranks: Sequence[int]) -> float | None:
    kept = pairs.filter((pl.col("kernel_class") == kernel_class) & ~pl.col("rank").is_in(list(ranks)))
    base = float(kept.get_column("baseline").sum()) if kept.height else 0.0
    return None if base == 0 else float(kept.get_column("candidate").sum()) / base - 1


def explained_by_ranks(
    findings: list[Finding],
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    settings: CompareSettings,
) -> list[Finding]:
    """Kernel-class changes that the ranks standing out explain become `explained` (module docstring)."""
    standing_out = [dict(f.fields)["rank"] for f in findings if f.family == "rank" and f.outcome in JUDGED]
    if not standing_out:
        return findings
    pairs = class_pairs(baseline, candidate)
    named = ", ".join(f"rank {rank}" for rank in standing_out)
    result = []
    for finding in findings:
        explained = False
        if finding.family == "kernel_class" and finding.outcome in CHANGED and "log_ratio" in pairs.columns:
            kernel_class = str(dict(finding.fields).get("kernel_class"))
            rest = _class_change_without(pairs, kernel_class, standing_out)
            explained = rest is not None and abs(rest) * 100 <= settings.threshold_for(finding.metric)
        result.append(replace(finding, outcome="explained", explained_by=named) if explained else finding)
    return result
