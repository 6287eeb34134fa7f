"""Lines and groups: each (group, kind) line classified on its own, each group named by its dominant line
(docs/metrics.md, "Parallelism dimensions", lines).

A line is a group's calls of one kind (`traceview.dimensions.features.LINE_KEY`): a TorchRec stream carrying
the DDP gradient all-reduce and the sparse all-to-alls is two lines, DP and EP. A line of kind `other`
(broadcasts, barriers: no rule reads them) that its own evidence leaves unknown takes the dimension of its
group's dominant line (DDP broadcasts its buffers on the DP group), saying so. A group's row is its dominant
dimension: the dimension whose lines took the most of the group's call time (`call_us`; ties: the most
calls), with that line's confidence and evidence.
"""

from __future__ import annotations

import polars as pl

from traceview.dimensions.classify import UNKNOWN, decide
from traceview.dimensions.features import LINE_KEY, OTHER_KIND, communicated, group_calls, kind_expr

INHERITED = "a broadcast or barrier of a group whose other calls are {}: it rides with them"
"""What an `other` line that takes its group's dimension says."""


def with_libraries(calls: pl.DataFrame, libraries: pl.DataFrame) -> pl.DataFrame:
    """`calls` with `comm_library` joined on by kernel name (`libraries`: name, comm_library)."""
    if "comm_library" in calls.columns:
        return calls
    return calls.join(libraries.select("name", "comm_library"), on="name", how="left")


def line_features(calls: pl.DataFrame, phases: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """Per line: its own calls' features (`features.group_calls` on `LINE_KEY`) with its group's structure
    (description, ranks, size and how they lie: `groups`, from `features.with_structure`)."""
    own = group_calls(calls, phases.with_columns(kind_expr()), LINE_KEY)
    shared = groups.select(
        "group", "desc", "pg_name", "ranks_text", "ranks", "listed", "stride", "contiguous", "nodes", "world"
    )
    return (
        own.drop("desc", "pg_name", "ranks_text")
        .join(shared, on="group", how="left")
        .with_columns((pl.col("calls") / pl.col("rank_steps")).alias("calls_per_step"))
    )


def _dominant(lines: pl.DataFrame) -> pl.DataFrame:
    """Per group: the dimension of the most call time (ties: most calls, then name) and its best line."""
    per_dimension = lines.group_by("group", "dimension").agg(
        pl.col("call_us").sum().alias("_us"), pl.col("calls").sum().alias("_calls")
    )
    chosen = per_dimension.sort(
        ["group", "_us", "_calls", "dimension"], descending=[False, True, True, False]
    ).unique("group", keep="first")
    best_line = lines.sort(["group", "call_us"], descending=[False, True]).join(
        chosen.select("group", "dimension"), on=["group", "dimension"], how="semi"
    )
    return best_line.unique("group", keep="first").select(
        "group", "dimension", "confidence", "best", "runner_up", "evidence", pl.col("kind").alias("line")
    )


def _inherit(lines: pl.DataFrame, dominant: pl.DataFrame) -> pl.DataFrame:
    """`lines` with each unknown `other` line given its group's dominant dimension (`INHERITED`)."""
    joined = lines.join(
        dominant.select(
            "group", pl.col("dimension").alias("_group_dim"), pl.col("confidence").alias("_conf")
        ),
        on="group",
        how="left",
    )
    inherits = (
        (pl.col("kind") == OTHER_KIND)
        & (pl.col("dimension") == UNKNOWN)
        & pl.col("_group_dim").is_not_null()
        & (pl.col("_group_dim") != UNKNOWN)
    )
    said = (
        pl.col("evidence")
        .fill_null([])
        .list.concat(pl.concat_list(pl.format(INHERITED, pl.col("_group_dim"))))
    )
    return joined.with_columns(
        pl.when(inherits).then(pl.col("_group_dim")).otherwise(pl.col("dimension")).alias("dimension"),
        pl.when(inherits).then(pl.col("_conf")).otherwise(pl.col("confidence")).alias("confidence"),
        pl.when(inherits).then(said).otherwise(pl.col("evidence")).alias("evidence"),
    ).drop("_group_dim", "_conf")


def decided_lines(features: pl.DataFrame, evidence: pl.DataFrame) -> pl.DataFrame:
    """Per line: its features with the decided dimension (`classify.decide`), `other` lines inheriting."""
    decided = decide(evidence).rename({"line_kind": "kind"})
    lines = features.join(decided, on=LINE_KEY, how="left").with_columns(
        pl.col("dimension").fill_null(UNKNOWN), pl.col("confidence").fill_null(0.0)
    )
    return _inherit(lines, _dominant(lines.filter(pl.col("kind") != OTHER_KIND))).sort(LINE_KEY)


def dominant_groups(groups: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """`groups` (one row per group, its features over every call) with its dominant line's dimension,
    confidence, best guess, runner-up, evidence and `line` (that line's kind)."""
    return (
        groups.join(_dominant(lines), on="group", how="left")
        .with_columns(pl.col("dimension").fill_null(UNKNOWN), pl.col("confidence").fill_null(0.0))
        .sort("group")
    )


def communicated_names(kernels: pl.DataFrame) -> pl.Series:
    """The distinct names of the communication rows of `kernels` (what the library table decodes)."""
    return kernels.filter(communicated()).get_column("name").unique()
