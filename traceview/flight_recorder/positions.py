"""Where each rank stood in each process group when it was dumped (docs/metrics.md, "Hang forensics"): the
per-group table of each member's last enqueued, started and completed collective, the op of its last one and
how long it had waited in it.

A group's members are the ranks its config names (the list most dumps state, when they differ); a member
without a dump stays in the table, `has_dump` false. Sequence numbers are the group's collective numbers
(1-based); 0 is "none yet".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import polars as pl

from traceview.model.flight_recorder import ENTRY_SCHEMA, STATUS_SCHEMA, FlightRecorderDump

NS_PER_S = 1e9
POSITION_COLUMNS = (
    "group",
    "group_desc",
    "rank",
    "has_dump",
    "last_enqueued",
    "last_started",
    "last_completed",
    "op",
    "input_sizes",
    "input_dtypes",
    "state",
    "created_ns",
    "dumped_ns",
    "waited_s",
    "stack",
)
"""Columns of the positions table, in order."""


def all_entries(dumps: Sequence[FlightRecorderDump]) -> pl.DataFrame:
    """Every rank's kept entries, one frame."""
    frames = [dump.entries for dump in dumps]
    return pl.concat(frames) if frames else pl.DataFrame(schema=ENTRY_SCHEMA)


def dump_times(dumps: Sequence[FlightRecorderDump], entries: pl.DataFrame) -> pl.DataFrame:
    """rank -> when its dump was taken; a dump whose time is unknown takes the newest entry's creation (the
    dump came after it)."""
    newest = entries.select(pl.col("created_ns").max()).item() if entries.height else 0
    return pl.DataFrame(
        {
            "rank": [dump.rank for dump in dumps],
            "dumped_ns": [dump.dumped_ns or newest or 0 for dump in dumps],
        },
        schema={"rank": pl.Int64, "dumped_ns": pl.Int64},
    )


def group_members(dumps: Sequence[FlightRecorderDump]) -> dict[str, tuple[tuple[int, ...], dict[int, str]]]:
    """group -> (its members: the rank list most dumps state, each dump's own list as text per rank)."""
    stated: dict[str, dict[int, tuple[int, ...]]] = {}
    for dump in dumps:
        for group in dump.groups:
            stated.setdefault(group.name, {})[dump.rank] = group.ranks
    members = {}
    for name, by_rank in stated.items():
        counted = Counter(by_rank.values())
        texts = {ranks: str(list(ranks)) for ranks in counted}  # each distinct list written once
        stated_as = {rank: texts[ranks] for rank, ranks in by_rank.items()}
        members[name] = (counted.most_common(1)[0][0], stated_as)
    return members


def _member_frame(dumps: Sequence[FlightRecorderDump], entries: pl.DataFrame) -> pl.DataFrame:
    """(group, rank) of every member: the stated members, and the ranks seen in a group nobody configured."""
    members = group_members(dumps)
    rows = [(group, rank) for group, (ranks, _) in members.items() for rank in ranks]
    seen = entries.filter(~pl.col("group").is_in(list(members))).select("group", "rank").unique()
    stated = pl.DataFrame(rows, schema={"group": pl.String, "rank": pl.Int64}, orient="row")
    return pl.concat([stated, seen]).unique().sort("group", "rank")


def _status(dumps: Sequence[FlightRecorderDump]) -> pl.DataFrame:
    frames = [dump.status for dump in dumps]
    return pl.concat(frames) if frames else pl.DataFrame(schema=STATUS_SCHEMA)


def positions(dumps: Sequence[FlightRecorderDump], entries: pl.DataFrame) -> pl.DataFrame:
    """The positions table (`POSITION_COLUMNS`), one row per (group, member)."""
    collectives = entries.filter(pl.col("collective_seq").is_not_null())
    seen = collectives.group_by("group", "rank").agg(
        pl.col("collective_seq").max().alias("seen_enqueued"),
        pl.col("collective_seq").filter(pl.col("state") == "completed").max().alias("seen_completed"),
        pl.col("group_desc").first(),
    )
    dumped = dump_times(dumps, entries)
    table = (
        _member_frame(dumps, entries)
        .join(seen, on=["group", "rank"], how="left")
        .join(_status(dumps), on=["group", "rank"], how="left")
        .join(dumped.with_columns(has_dump=pl.lit(True)), on="rank", how="left")
        .with_columns(
            pl.col("has_dump").fill_null(False),
            last_enqueued=pl.max_horizontal("seen_enqueued", "last_enqueued", pl.lit(0)),
            last_completed=pl.max_horizontal("seen_completed", "last_completed", pl.lit(0)),
            last_started=pl.max_horizontal("last_started", pl.lit(0)),
        )
    )
    last = collectives.select(
        "group",
        "rank",
        pl.col("collective_seq").alias("last_enqueued"),
        "op",
        "input_sizes",
        "input_dtypes",
        "state",
        "created_ns",
        "stack",
        pl.col("group_desc").alias("entry_desc"),
    ).unique(subset=["group", "rank", "last_enqueued"], keep="last")
    return (
        table.join(last, on=["group", "rank", "last_enqueued"], how="left")
        .with_columns(
            pl.coalesce("group_desc", "entry_desc", pl.lit("")).alias("group_desc"),
            pl.when(pl.col("last_completed") < pl.col("last_enqueued"))  # a completed one waited for nobody
            .then((pl.col("dumped_ns") - pl.col("created_ns")) / NS_PER_S)
            .alias("waited_s"),
        )
        .select(POSITION_COLUMNS)
        .sort("group", "rank")
    )
