"""Matching collective instances across the members of each process group (docs/metrics.md, "Across ranks").

Input: the communication kernels of every rank (`traceview.collectives.kernels.comm_kernels`, columns
`KERNEL_COLUMNS`) and the step windows. A rank's *calls* are its kernels collapsed by trace `seq` (one call
may launch several kernels); a call without `seq` is one kernel. The group is `pg_key`; a kernel without a
known process group falls back to its CUDA stream (`stream N`: each NCCL communicator runs on a stream of its
own, numbered in creation order, so SPMD ranks agree).

1. Each call gets its step: the rank's step window that contains its start (a window ends where it ends); a
   call outside every window of its rank belongs to no step and is not matched (`outside`, counted per rank
   and group). Inside its (group, step) *cell* each call gets its ordinal `fwd` in issue order (trace `seq`,
   then start time).
2. The cell's reference count c* is the commonest call count among the ranks that have calls there (ties: the
   smaller); the reference signature of position p is the commonest among the ranks with c* calls (ties: the
   lowest rank's). Signatures and their alignment: `traceview.across_ranks.alignment`.
3. Mismatches: `extra`/`unmatched` (an unplaced call on a rank with more / not more calls than c*; its
   location is the position of the next placed call), `different` (a placed call whose signature differs from
   the reference) and `missing` (a member whose trace covers the step has no call at a position). A missing
   call at the end of a rank's last recorded step, after its last placed call there, is a recording *cut*
   (the profiler stopped while the call ran or before its record closed), reported apart, not a mismatch.
4. The key reported is (group, seq): `seq` is the trace's own sequence number where the trace records one
   (the commonest among the members at that key), else the group's ordinal (0-based, counted over steps in
   order). An instance is `consistent` when every expected member is placed, none differs and its key is not
   ambiguous; only consistent instances with two or more members enter skew and clock figures.

Members absent from the run (a 128-rank job with 2 traces) are listed per group and never counted missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.across_ranks._mismatches import KEY_KINDS, mismatches_of, recording_cuts
from traceview.across_ranks.alignment import (
    CELL,
    CELL_RANK,
    KEY,
    REFERENCE,
    SIGNATURE,
    agrees,
    aligned_positions,
    signature_columns,
)
from traceview.core.records import record
from traceview.steps.windows import WHOLE_TRACE

KERNEL_COLUMNS: tuple[str, ...] = (
    "rank",
    "name",
    "start_us",
    "end_us",
    "dur_us",
    "stream",
    "correlation",
    "on_device",
    "collective",
    "algorithm",
    "protocol",
    "reduce_op",
    "dtype",
    "elem_size",
    "in_bytes",
    "out_bytes",
    "size_bytes",
    "group_size",
    "pg_key",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "seq",
    "call_name",
    "call_start_us",
    "call_end_us",
    "launch_us",
    "linked_by",
    "algbw_Bps",
    "busbw_Bps",
)
"""The input contract: `traceview.collectives.kernels.comm_kernels(run, events)` columns."""

UNKNOWN_GROUP = "unknown"
"""The `pg_key` that `comm_kernels` writes when a kernel's process group is not known."""


@record
class Matching:
    """Instances matched across ranks.

    `calls`: one row per placed call (instance, group, step, position, seq, rank, collective, size_bytes,
    start_us, end_us, dur_us, launch_us, call_start_us, kernels). `instances`: one row per key (instance,
    group, pg_name, step, position, seq, collective, size_bytes, dtype, expected, matched, consistent).
    `mismatches`: MISMATCH_SCHEMA rows. `groups`: group, pg_name, pg_desc, members, present, absent (list),
    instances. `outside`: per (rank, group) the calls outside every step window of the rank (not matched).
    `cut`: the `missing` calls that the end of a rank's recording explains (MISMATCH_SCHEMA rows, left out of
    `mismatches`; their instances stay incomplete).
    """

    calls: pl.DataFrame
    instances: pl.DataFrame
    mismatches: pl.DataFrame
    groups: pl.DataFrame
    outside: pl.DataFrame
    cut: pl.DataFrame


def group_expr() -> pl.Expr:
    """The group of a kernel: its process group (`pg_key`) where known, else its stream (`stream N`), else
    `unknown`."""
    known = pl.when(pl.col("pg_key") != UNKNOWN_GROUP).then(pl.col("pg_key"))
    return pl.coalesce(known, pl.lit("stream ") + pl.col("stream").cast(pl.Utf8), pl.lit(UNKNOWN_GROUP))


def match_instances(kernels: pl.DataFrame, windows: pl.DataFrame, ranks_present: Sequence[int]) -> Matching:
    """Match the collective calls of every rank into instances (module docstring for the method)."""
    stepped = _ordered_calls(kernels, windows)
    calls = stepped.filter(pl.col("step").is_not_null())
    reference = _reference_count(calls)
    signatures = _reference_signatures(calls, reference)
    placed_all, ambiguous = _place(calls, reference, signatures)
    placed = placed_all.filter(pl.col("placed"))
    members = _members(kernels, ranks_present)
    expected = _expected(members, calls, windows, reference)
    seqs = _key_seqs(reference, placed)
    found = mismatches_of(placed_all, expected, placed, seqs, ambiguous)
    mismatches, cut = recording_cuts(found, placed, windows)
    at_key = found.filter(pl.col("kind").is_in(list(KEY_KINDS))).select(KEY)
    instances = _instances(expected, signatures, placed, pl.concat([at_key, ambiguous.select(KEY)]), seqs)
    ids = instances.select(*KEY, "instance", "seq")
    out_calls = (
        placed.drop("seq")
        .join(ids, on=KEY)
        .select(
            "instance",
            *KEY,
            "seq",
            "rank",
            "collective",
            "size_bytes",
            "start_us",
            "end_us",
            "dur_us",
            "launch_us",
            "call_start_us",
            "kernels",
        )
    )
    outside = (
        stepped.filter(pl.col("step").is_null())
        .group_by("rank", "group")
        .agg(pl.len().cast(pl.Int64).alias("calls"))
        .sort("rank", "group")
    )
    return Matching(
        out_calls.sort("instance", "rank"),
        instances,
        mismatches,
        _groups(kernels, members, instances),
        outside,
        cut,
    )


def _ordered_calls(kernels: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Calls (kernels collapsed by seq) with their step (null: outside every window), signature, `fwd` ordinal
    and per-cell `count`."""
    frame = (
        _call_rows(kernels)
        .with_row_index("row")
        .with_columns(
            group_expr().alias("group"),
            pl.col("collective").fill_null("unknown"),
            pl.coalesce(
                pl.format("s{}", pl.col("seq")),
                pl.when(pl.col("call_start_us").is_not_null()).then(
                    pl.format("c{}@{}", pl.col("call_name"), pl.col("call_start_us"))
                ),
                pl.format("k{}", pl.col("row")),
            ).alias("call_key"),
        )
    )
    calls = frame.group_by("rank", "group", "call_key").agg(
        pl.col("start_us").min(),
        pl.col("end_us").max(),
        pl.col("seq").first(),
        pl.col("collective").first(),
        pl.col("size_bytes").first(),
        pl.col("in_bytes").first(),
        pl.col("out_bytes").first(),
        pl.col("dtype").first(),
        pl.col("launch_us").min(),
        pl.col("call_start_us").min(),
        pl.len().alias("kernels"),
    )
    calls = _with_steps(calls, windows).with_columns(
        (pl.col("end_us") - pl.col("start_us")).alias("dur_us"), *signature_columns()
    )
    return calls.sort(*CELL_RANK, "seq", "start_us", "end_us", "call_key", nulls_last=True).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(CELL_RANK).alias("fwd"),
        pl.len().cast(pl.Int64).over(CELL_RANK).alias("count"),
    )


def _call_rows(kernels: pl.DataFrame) -> pl.DataFrame:
    """The rows that make calls: every row but the staging copies of a host collective (gloo with device
    tensors copies its data to the host and back: part of its communication time, not a call of its own)."""
    if "staging_copy" not in kernels.columns:
        return kernels
    return kernels.filter(~pl.col("staging_copy").fill_null(False))


def _with_steps(calls: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The step of each call: the rank's window that contains its start; null outside every window of a rank
    that has windows; `WHOLE_TRACE` for a rank without any."""
    if windows.height == 0:
        return calls.with_columns(pl.lit(WHOLE_TRACE, dtype=pl.Int64).alias("step"))
    starts = windows.select(
        pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64), "window_start_us", "window_end_us"
    ).sort("window_start_us")
    with_windows = starts.select("rank").unique()
    inside = pl.col("start_us") <= pl.col("window_end_us")
    return (
        calls.sort("start_us")
        .join_asof(starts, left_on="start_us", right_on="window_start_us", by="rank", check_sortedness=False)
        .with_columns(
            pl.when(pl.col("rank").is_in(with_windows.get_column("rank").implode()))
            .then(pl.when(inside).then(pl.col("step")))
            .otherwise(pl.lit(WHOLE_TRACE, dtype=pl.Int64))
            .alias("step")
        )
        .drop("window_start_us", "window_end_us")
    )


def _reference_count(calls: pl.DataFrame) -> pl.DataFrame:
    """Per cell, c* = the commonest call count among its ranks (ties: the smaller); columns group, step,
    ref_count."""
    counts = calls.group_by(*CELL_RANK).agg(pl.len().cast(pl.Int64).alias("count"))
    votes = counts.group_by(*CELL, "count").agg(pl.len().alias("votes"))
    best = (
        votes.sort(["votes", "count"], descending=[True, False]).group_by(CELL, maintain_order=True).first()
    )
    return best.select(*CELL, pl.col("count").alias("ref_count"))


def _reference_signatures(calls: pl.DataFrame, reference: pl.DataFrame) -> pl.DataFrame:
    """Per key, the commonest signature among ranks with c* calls (ties: the lowest rank's); columns group,
    step, position, ref_collective, ref_size_bytes, ref_dtype."""
    agreeing = calls.join(reference, on=CELL).filter(pl.col("count") == pl.col("ref_count"))
    votes = agreeing.group_by(*CELL, "fwd", *SIGNATURE).agg(pl.len().alias("votes"), pl.col("rank").min())
    ordered = votes.sort(["votes", "rank"], descending=[True, False])
    best = ordered.group_by(*CELL, "fwd", maintain_order=True).first()
    return best.select(
        *CELL,
        pl.col("fwd").alias("position"),
        *[pl.col(s).alias(r) for s, r in zip(SIGNATURE, REFERENCE, strict=True)],
    )


def _place(
    calls: pl.DataFrame, reference: pl.DataFrame, signatures: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(every call with its `position` (null: unplaced), `placed`, `next_position` and the reference signature
    at its position; the ambiguous keys with their rank). Ranks agreeing with the reference everywhere keep
    their ordinals; the others are aligned (`traceview.across_ranks.alignment`)."""
    at_fwd = signatures.rename({"position": "fwd"})
    checked = calls.join(reference, on=CELL, how="left").join(at_fwd, on=[*CELL, "fwd"], how="left")
    checked = checked.with_columns(
        ((pl.col("count") == pl.col("ref_count")) & agrees(SIGNATURE, REFERENCE).all().over(CELL_RANK)).alias(
            "_agrees"
        )
    ).drop(REFERENCE)
    easy = checked.filter(pl.col("_agrees")).select(*CELL_RANK, "fwd", pl.col("fwd").alias("position"))
    placements, ambiguous = aligned_positions(checked.filter(~pl.col("_agrees")), signatures)
    placed = checked.drop("_agrees").join(pl.concat([easy, placements]), on=[*CELL_RANK, "fwd"], how="left")
    placed = placed.sort(*CELL_RANK, "fwd").with_columns(
        pl.col("position").is_not_null().alias("placed"),
        pl.col("position")
        .backward_fill()
        .over(CELL_RANK)
        .fill_null(pl.col("ref_count"))
        .alias("next_position"),
    )
    return placed.join(signatures, on=KEY, how="left"), ambiguous


def _members(kernels: pl.DataFrame, ranks_present: Sequence[int]) -> pl.DataFrame:
    """Members of each group (from `pg_ranks`, else the ranks seen in it), with `present` in the run."""
    group = group_expr()
    per_rank = kernels.group_by("pg_key", "stream", "rank").agg(pl.col("pg_ranks").drop_nulls().first())
    per_rank = per_rank.select(group.alias("group"), "rank", "pg_ranks")
    listed = (
        per_rank.select("group", "pg_ranks")
        .unique()
        .select("group", pl.col("pg_ranks").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64)).alias("member"))
        .explode("member")
        .drop_nulls()
    )
    seen = per_rank.select("group", pl.col("rank").alias("member"))
    members = pl.concat([listed, seen]).unique().sort("group", "member")
    present = pl.Series(list(ranks_present), dtype=pl.Int64)
    return members.with_columns(pl.col("member").is_in(present.implode()).alias("present"))


def _expected(
    members: pl.DataFrame, calls: pl.DataFrame, windows: pl.DataFrame, reference: pl.DataFrame
) -> pl.DataFrame:
    """Every (key, rank) that should hold a call: members present whose trace covers the step."""
    covered = pl.concat(
        [
            calls.select("rank", "step"),
            windows.select("rank", "step").cast({"rank": pl.Int64, "step": pl.Int64}),
        ]
    ).unique()
    positions = reference.with_columns(pl.int_ranges(0, pl.col("ref_count")).alias("position")).explode(
        "position"
    )
    present = members.filter(pl.col("present")).select("group", pl.col("member").alias("rank"))
    return (
        positions.join(present, on="group")
        .join(covered, on=["rank", "step"], how="semi")
        .select(*KEY, "rank", "ref_count")
        .with_columns(pl.col("position").cast(pl.Int64))
    )


def _key_seqs(reference: pl.DataFrame, placed: pl.DataFrame) -> pl.DataFrame:
    """Per key (positions 0..c*, c* being the next step's first): `ordinal` in the group and `seq`."""
    starts = reference.sort(CELL).with_columns(
        (pl.col("ref_count").cum_sum().over("group") - pl.col("ref_count")).alias("first_ordinal")
    )
    keys = starts.with_columns(pl.int_ranges(0, pl.col("ref_count") + 1).alias("position")).explode(
        "position"
    )
    keys = keys.with_columns(
        pl.col("position").cast(pl.Int64), (pl.col("first_ordinal") + pl.col("position")).alias("ordinal")
    )
    trace_seq = placed.filter(pl.col("seq").is_not_null()).group_by(KEY).agg(pl.col("seq").mode().min())
    return keys.join(trace_seq, on=KEY, how="left").select(
        *KEY, "ordinal", pl.coalesce("seq", "ordinal").alias("seq")
    )


def _instances(
    expected: pl.DataFrame,
    signatures: pl.DataFrame,
    placed: pl.DataFrame,
    flagged_keys: pl.DataFrame,
    seqs: pl.DataFrame,
) -> pl.DataFrame:
    """One row per key with its counts and `consistent` flag; `instance` numbers keys in (group, step,
    position)."""
    want = expected.group_by(KEY).agg(pl.len().cast(pl.Int64).alias("expected"))
    got = placed.group_by(KEY).agg(pl.len().cast(pl.Int64).alias("matched"))
    flagged = flagged_keys.unique().with_columns(pl.lit(True).alias("flagged"))
    table = (
        want.join(got, on=KEY, how="left")
        .join(flagged, on=KEY, how="left")
        .join(signatures, on=KEY, how="left")
        .join(seqs, on=KEY, how="left")
        .with_columns(pl.col("matched").fill_null(0), pl.col("flagged").fill_null(False))
        .sort(KEY)
    )
    return table.with_row_index("instance").select(
        pl.col("instance").cast(pl.Int64),
        *KEY,
        "seq",
        "ordinal",
        pl.col("ref_collective").alias("collective"),
        pl.col("ref_size_bytes").alias("size_bytes"),
        pl.col("ref_dtype").alias("dtype"),
        "expected",
        "matched",
        ((pl.col("matched") == pl.col("expected")) & ~pl.col("flagged")).alias("consistent"),
    )


def _groups(kernels: pl.DataFrame, members: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """Per group: its names, member count, members present, the absent members, and its instance count."""
    group = group_expr()
    names = (
        kernels.select(group.alias("group"), "pg_name", "pg_desc")
        .group_by("group")
        .agg(pl.col("pg_name").drop_nulls().first(), pl.col("pg_desc").drop_nulls().first())
    )
    counts = members.group_by("group").agg(
        pl.len().cast(pl.Int64).alias("members"),
        pl.col("present").sum().cast(pl.Int64).alias("present"),
        pl.col("member").filter(~pl.col("present")).alias("absent"),
    )
    per_group = instances.group_by("group").agg(pl.len().cast(pl.Int64).alias("instances"))
    return names.join(counts, on="group", how="left").join(per_group, on="group", how="left").sort("group")
