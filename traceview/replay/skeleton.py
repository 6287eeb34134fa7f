"""The replayable skeleton of every (rank, step) (docs/metrics.md, "Replay", Skeleton): the one definition.

A step of a rank is a chain bounded by its matched collectives: segment 0, collective 0, segment 1, ..., the
last collective, the tail. Everything comes from figures the map and the reduce already have:

- the collectives: `across_ranks`' matched members (`CrossRank.calls`: aligned entry and exit on the run's
  clock, the instance's transfer time: its shortest member's duration, the recorded wait);
- the step window: the time budget's `per_step` (window start and end on the rank's clock, moved onto the
  aligned clock by the rank's offset; `step_us`, `comp_us`, `overlap_us`, `comm_us`).

A collective's anchor is the latest collective of the rank's step to end before it was entered (`anchor`,
null: the window start): what it waited for, whether it ran on the same lane (a stream, a worker thread) or
the rank issued it after a blocking one. `segment_us` is its launch offset, its entry less its anchor's exit
(less the window start); collectives entered while others ran keep the anchor that ended before them, so
concurrent collectives stay concurrent. `lane` (the host thread of a host collective, else its stream) is
kept for the reader. The tail runs from the rank's latest exit to the window's end (negative where a
collective ends past the window).

A segment (and a positive tail) is split into `compute_us` and `host_us` by the rank's own critical path: the
map's open nodes (`traceview.critical_path.nodes`) give the path's compute and host time from the window start
to each collective's entry and exit, so the segment's are those at its entry less those at its anchor's exit
(the window start without one), and the tail's the step's totals (the critical path's `per_step`) less those
at the latest exit; each clipped to the segment, compute first. The rest of a segment (communication on the
path of collectives outside the skeleton) stays as it is under every lever. Only where the map recorded no
node for a call does the step's share of compute in the time outside communication,
c = clip((comp_us - overlap_us) / (step_us - comm_us), 0, 1), split it.

The compute lane keeps the rank's whole compute (`comp_us`) in its step: the compute off the chain (`comp_us`
less the path's compute: what ran under its collectives, on the path as communication) goes before the last
entry as far as the recording leaves room there, the rest after it (`lead_compute_us`, `trail_compute_us`
on the tails; the engine bounds the last entry and the tail's start by them), so a lever that removes waiting
cannot remove the compute that the waiting hid.
"""

from __future__ import annotations

import polars as pl

from traceview.critical_path.nodes import at_calls, empty_nodes, kind_totals
from traceview.critical_path.sweep import PER_STEP_SCHEMA

SKELETON_COLUMNS = (
    "rank",
    "step",
    "order",
    "instance",
    "group",
    "collective",
    "size_bytes",
    "start_us",
    "entry_us",
    "exit_us",
    "lane",
    "anchor",
    "segment_us",
    "compute_us",
    "host_us",
    "transfer_us",
    "wait_us",
    "dur_us",
)
"""One row per (rank, step, collective), in the rank's order; `start_us` is the call's start on its rank's
clock (the key of the prediction's priced calls), `entry_us` and `exit_us` on the aligned clock."""
TAIL_COLUMNS = (
    "rank",
    "step",
    "start_us",
    "tail_us",
    "tail_compute_us",
    "tail_host_us",
    "lead_compute_us",
    "trail_compute_us",
    "step_us",
)
"""One row per (rank, step) with collectives: the tail after the last one (signed: negative where the last
collective ends past the window; its positive part split like a segment's), the compute that must precede the
rank's last entry (`lead_compute_us`) and follow it (`trail_compute_us`), and the recorded step."""


def first_claims(frame: pl.DataFrame, *key: str) -> pl.DataFrame:
    """`frame` with one row per `key`, the first: a rank the input names twice (two summaries of one rank)
    keeps its first rows, as the loader keeps a rank's first file (`traceview.load.one_job.make_run`), so
    the skeleton's joins on (rank, step) never multiply rows."""
    return frame.unique(list(key), keep="first", maintain_order=True)


def repeated_ranks(per_step: pl.DataFrame) -> list[int]:
    """The ranks with a (rank, step) named more than once in the time budget's `per_step`."""
    repeated = per_step.filter(pl.struct("rank", "step").is_duplicated())
    return sorted(repeated.get_column("rank").unique().to_list())


def compute_share(per_step: pl.DataFrame) -> pl.DataFrame:
    """(rank, step, share): the share of compute in the time the step spends outside communication."""
    outside = pl.col("step_us") - pl.col("comm_us")
    share = pl.when(outside > 0).then((pl.col("comp_us") - pl.col("overlap_us")) / outside).otherwise(0.0)
    return per_step.select("rank", "step", share.clip(0.0, 1.0).alias("share"))


def _windows(per_step: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Each (rank, step)'s window on the aligned clock (the rank's offset read off its calls)."""
    offsets = calls.group_by("rank").agg(
        (pl.col("aligned_start_us") - pl.col("start_us")).median().alias("_off")
    )
    return (
        per_step.join(offsets, on="rank", how="inner")
        .join(compute_share(per_step), on=["rank", "step"])
        .select(
            "rank",
            "step",
            (pl.col("window_start_us") + pl.col("_off")).alias("window_us"),
            (pl.col("window_end_us") + pl.col("_off")).alias("end_us"),
            "step_us",
            "comp_us",
            "share",
        )
    )


def lanes(calls: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """`calls` with the `lane` of each (its first row's host thread, else its stream, else `rank`)."""
    first = kernels.filter(pl.col("first_in_call")).select(
        "rank",
        "start_us",
        pl.coalesce(
            pl.format("thread {}", pl.col("host_tid")),
            pl.format("stream {}", pl.col("stream")),
            pl.lit("rank"),
        ).alias("lane"),
    )
    found = calls.join(first.unique(["rank", "start_us"]), on=["rank", "start_us"], how="left")
    return found.with_columns(pl.col("lane").fill_null("rank"))


def skeleton(
    calls: pl.DataFrame,
    per_step: pl.DataFrame,
    kernels: pl.DataFrame,
    nodes: pl.DataFrame | None = None,
    path_steps: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(collectives, tails) of every (rank, step) with a matched collective (`calls`: `CrossRank.calls`;
    `per_step`: the time budget's; `kernels`: the communication rows, for the lanes; `nodes`: the map's open
    nodes and `path_steps` the critical path's `per_step`, for the split: the share c without them)."""
    usable = lanes(first_claims(calls, "rank", "instance"), kernels).filter(
        pl.col("transfer_us").is_not_null() & pl.col("step").is_not_null()
    )
    windows = _windows(first_claims(per_step, "rank", "step"), usable)
    body = _split(_anchored(usable, windows), nodes if nodes is not None else empty_nodes())
    steps = path_steps if path_steps is not None else pl.DataFrame(schema=PER_STEP_SCHEMA)
    totals = first_claims(kind_totals(steps), "rank", "step")
    tails = _tails(body, windows, totals)
    return body.select(SKELETON_COLUMNS).sort("step", "rank", "order"), tails.sort("step", "rank")


def _anchored(usable: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The calls in each rank's order with their anchor (the latest of the step's calls to end before their
    entry) and segment (their entry less the anchor's exit, or the window start)."""
    ordered = (
        usable.join(windows, on=["rank", "step"], how="inner")
        .sort("rank", "step", "aligned_start_us", "instance")
        .with_columns(pl.int_range(pl.len()).over("rank", "step").alias("order"))
    )
    exits = ordered.select(
        "rank", "step", pl.col("aligned_end_us").alias("_anchor_exit"), pl.col("instance").alias("anchor")
    ).sort("_anchor_exit")
    return (
        ordered.sort("aligned_start_us")
        .join_asof(
            exits,
            left_on="aligned_start_us",
            right_on="_anchor_exit",
            by=["rank", "step"],
            strategy="backward",
            check_sortedness=False,  # both sides sorted on their keys above
        )
        .with_columns(
            (pl.col("aligned_start_us") - pl.coalesce("_anchor_exit", "window_us")).alias("segment_us"),
            pl.col("aligned_start_us").alias("entry_us"),
            pl.col("aligned_end_us").alias("exit_us"),
        )
    )


def _parts(length: pl.Expr, compute: pl.Expr, host: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """The compute and host parts of a positive `length` from the path's `compute` and `host` time in it
    (each clipped to what is left, compute first); the share c's where the path's are null."""
    known = compute.is_not_null() & host.is_not_null()  # (min_horizontal passes over a null)
    found = pl.min_horizontal(compute.clip(lower_bound=0.0), length)
    held = pl.min_horizontal(host.clip(lower_bound=0.0), length - found)
    compute_us = pl.when(known).then(found).otherwise(length * pl.col("share"))
    return compute_us, pl.when(known).then(held).otherwise(length * (1 - pl.col("share")))


def _split(anchored: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """`anchored` with `compute_us` and `host_us`: the path's between its anchor's exit and its entry."""
    found = at_calls(anchored, nodes)
    anchor_exit = found.select(
        "rank",
        "step",
        pl.col("instance").alias("anchor"),
        pl.col("exit_compute_us").alias("_anchor_compute"),
        pl.col("exit_host_us").alias("_anchor_host"),
    )
    since = {  # the path's time of a kind at the entry less at the anchor's exit (0 at the window start)
        kind: pl.col(f"entry_{kind}_us")
        - pl.when(pl.col("anchor").is_null()).then(0.0).otherwise(pl.col(f"_anchor_{kind}"))
        for kind in ("compute", "host")
    }
    compute_us, host_us = _parts(pl.col("segment_us").clip(lower_bound=0.0), since["compute"], since["host"])
    return found.join(anchor_exit, on=["rank", "step", "anchor"], how="left").with_columns(
        compute_us.alias("compute_us"), host_us.alias("host_us")
    )


def _tails(body: pl.DataFrame, windows: pl.DataFrame, totals: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): the tail from the latest exit to the window's end, split by the path's time after
    that exit (the step's totals less those at the exit)."""
    last = body.group_by("rank", "step").agg(
        pl.col("exit_us").max().alias("_last"),
        pl.col("exit_compute_us").sort_by("exit_us").last().alias("_last_compute"),
        pl.col("exit_host_us").sort_by("exit_us").last().alias("_last_host"),
        pl.col("entry_us").max().alias("_last_entry"),
        pl.col("entry_compute_us").sort_by("entry_us").last().alias("_entry_compute"),
        pl.col("compute_us").sum().alias("_segments_compute"),
    )
    tail = pl.col("end_us") - pl.col("_last")
    compute_us, host_us = _parts(
        tail.clip(lower_bound=0.0),
        pl.col("path_compute_us") - pl.col("_last_compute"),
        pl.col("path_host_us") - pl.col("_last_host"),
    )
    split = (
        windows.join(last, on=["rank", "step"], how="inner")
        .join(totals, on=["rank", "step"], how="left")
        .with_columns(
            pl.col("window_us").alias("start_us"),
            tail.alias("tail_us"),
            compute_us.alias("tail_compute_us"),
            host_us.alias("tail_host_us"),
        )
    )
    return split.with_columns(*_compute_lane()).select(TAIL_COLUMNS)


def _compute_lane() -> tuple[pl.Expr, pl.Expr]:
    """(lead_compute_us, trail_compute_us): the rank's compute of the step (the budget's T_comp) around its
    last entry. The compute off the skeleton's chain (`hidden`: T_comp less the path's compute; the compute
    that ran under its collectives) is put before the last entry as far as the recording leaves room for it
    there (after the path's compute before that entry), the rest after it with the path's compute between
    the last entry and the latest exit; the segments' and the tail's sums stand in where the map recorded no
    node."""
    on_path = pl.coalesce("path_compute_us", pl.col("_segments_compute") + pl.col("tail_compute_us"))
    hidden = (pl.col("comp_us") - on_path).clip(lower_bound=0.0)
    before = pl.coalesce("_entry_compute", "_segments_compute").clip(lower_bound=0.0)
    inside = (pl.col("_last_compute") - pl.col("_entry_compute")).fill_null(0.0).clip(lower_bound=0.0)
    room = (pl.col("_last_entry") - pl.col("window_us") - before).clip(lower_bound=0.0)
    placed = pl.min_horizontal(hidden, room)
    return (before + placed).alias("lead_compute_us"), (hidden - placed + inside).alias("trail_compute_us")
