"""The replay of every rank's step skeleton together (docs/metrics.md, "Replay", Engine).

A rank enters a collective `segment_us` after its anchor's replayed exit (the latest of its collectives to
end before it in the recording; the window start without one). A collective starts when its last member has
entered and completes `transfer_us` later; each member leaves it then, so its wait is the edge from the last
arrival, never a recorded gap. With `overlap` (perfect overlap) a rank enters a collective `segment_us` after
its anchor's replayed entry (it did not wait for the anchor's transfer); its step then ends when its last
segment and its last transfer are done. A rank's step ends its tail after its latest exit. The rank's compute
lane bounds both: its last entry comes no earlier than its compute before it (`lead_compute_us`, the
compute that ran under its earlier collectives included) and its tail starts no earlier than its compute
after that entry (`trail_compute_us`), so no replay keeping the compute ends a step before the rank's
compute is done. Collectives run in an order every member agrees with (each rank's own order; an instance
comes once it heads every member's queue): the loop runs over those levels, each level one polars query over
every step's collective of that level and all its members.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import polars as pl

from traceview.replay.skeleton import first_claims


@dataclass(frozen=True)
class Chain:
    """One step of the replay: per member row (step, instance, rank) its segment and the instance's
    transfer, in each rank's order; per rank its window start and tail; `late` ranks whose arrival moves to
    the latest of the other members' (`no_straggler`)."""

    body: pl.DataFrame  # step, instance, rank, order, segment_us, transfer_us
    tails: pl.DataFrame  # step, rank, start_us, tail_us (lead_compute_us, trail_compute_us: optional)
    late: frozenset[int] = frozenset()
    overlap: bool = False


def _queues(body: pl.DataFrame) -> dict[int, dict[int, list[int]]]:
    """step -> rank -> its instances in order."""
    queues: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for step, rank, instance in (
        body.sort("step", "rank", "order").select("step", "rank", "instance").iter_rows()
    ):
        queues[step][rank].append(instance)
    return queues


def _order(queues: dict[int, list[int]], members: dict[int, list[int]]) -> list[int]:
    """The instances of one step in an order every member agrees with (Kahn's order over the ranks' queues;
    a cycle, which no recorded run has, is broken at the lowest instance)."""
    heads = dict.fromkeys(queues, 0)
    done: list[int] = []
    waiting = sorted(members)
    while waiting:
        ready = [
            i
            for i in waiting
            if all(queues[r][heads[r]] == i for r in members[i] if heads[r] < len(queues[r]))
        ]
        for instance in ready or waiting[:1]:
            done.append(instance)
            for rank in members[instance]:
                heads[rank] += 1
        chosen = set(ready or waiting[:1])
        waiting = [i for i in waiting if i not in chosen]
    return done


def levels(body: pl.DataFrame) -> pl.DataFrame:
    """(step, instance, level): each instance's place in an order every member agrees with, per step."""
    queues = _queues(body)
    members: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for step, instance, rank in body.select("step", "instance", "rank").iter_rows():
        members[step][instance].append(rank)
    rows = [
        (step, instance, level)
        for step, found in members.items()
        for level, instance in enumerate(_order(queues[step], found))
    ]
    schema = {"step": pl.Int64, "instance": pl.Int64, "level": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row")


LANE = ("lead_compute_us", "trail_compute_us")
"""The tails' compute lane (`traceview.replay.skeleton`): the compute before a rank's last entry, which
bounds that entry from below, and after it, which bounds the step's end (0 where a chain has no lane)."""

KEY = ["rank", "step", "instance"]
MARKS = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "instance": pl.Int64,
    "entry_us": pl.Float64,
    "done_us": pl.Float64,
}


def _level(rows: pl.DataFrame, marks: list[pl.DataFrame], chain: Chain) -> pl.DataFrame:
    """The members of one level's instances (every step at once): entry after the anchor's replayed mark
    (`marks`: the earlier levels'), start at the last arrival (a late rank's moved to the latest of the
    others'), done after the transfer; one query."""
    mark = "entry_us" if chain.overlap else "done_us"
    earlier = pl.concat([found.lazy() for found in marks]) if marks else pl.LazyFrame(schema=MARKS)
    anchored = (
        rows.lazy()
        .join(
            earlier.select("rank", "step", pl.col("instance").alias("anchor"), pl.col(mark).alias("_mark")),
            on=["rank", "step", "anchor"],
            how="left",
        )
        .with_columns(
            pl.max_horizontal(pl.coalesce("_mark", "_window") + pl.col("segment_us"), "_floor").alias(
                "entry_us"
            )
        )
    )
    on_time = ~pl.col("rank").is_in(list(chain.late)) if chain.late else pl.lit(True)
    latest = pl.col("entry_us").filter(on_time).max().over("step", "instance")
    start = pl.coalesce(latest, pl.col("entry_us").max().over("step", "instance"))
    return (
        anchored.select(
            "rank", "step", "instance", "entry_us", (start + pl.col("transfer_us")).alias("done_us")
        )
        .cast(MARKS)  # type: ignore[arg-type]
        .collect()
    )


def run(chain: Chain, order: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per (rank, step): `end_us` (replayed end of the step) and `comm_chain_us` (time from entering to
    leaving its collectives: transfers and waits). The loop runs over the levels of `order` (`levels`), each
    one query over every step's collective of that level and all its members at once."""
    body = first_claims(chain.body, "step", "rank", "instance")  # one chain a (rank, step): never multiplied
    order = order if order is not None else levels(body)
    tails = first_claims(chain.tails, "step", "rank").with_columns(
        pl.lit(0.0).alias(column) for column in LANE if column not in chain.tails.columns
    )
    last = pl.col("order") == pl.col("order").max().over("step", "rank")
    rows = (
        body.lazy()
        .join(order.lazy(), on=["step", "instance"])
        .join(
            tails.lazy().select("step", "rank", pl.col("start_us").alias("_window"), *LANE),
            on=["step", "rank"],
        )
        .with_columns(pl.when(last).then(pl.col("_window") + pl.col(LANE[0])).alias("_floor"))
        .collect()
    )
    by_level = rows.partition_by("level", as_dict=True)
    marks: list[pl.DataFrame] = []
    for level in range(order.height and int(order.get_column("level").max()) + 1):  # type: ignore[arg-type]
        marks.append(_level(by_level.get((level,), rows.clear()), marks, chain))
    found = pl.concat(marks) if marks else pl.DataFrame(schema=MARKS)
    return _ends(tails, found.join(rows.select("rank", "step", "instance", "order"), on=KEY), chain.overlap)


def _ends(tails: pl.DataFrame, marks: pl.DataFrame, overlap: bool) -> pl.DataFrame:
    """Per (rank, step) from its replayed `marks` (with their `order`): the step's end (its tail after its
    latest exit and after its compute lane: the entry of its last collective in its order plus the compute
    after it; with `overlap`, after its latest entry) and its time inside collectives."""
    per_rank = marks.group_by("rank", "step").agg(
        pl.col("done_us").max().alias("_exit"),
        pl.col("entry_us").max().alias("_entry"),
        pl.col("entry_us").sort_by("order").last().alias("_last_entry"),
        (pl.col("done_us") - pl.col("entry_us")).sum().alias("comm_chain_us"),
    )
    ended = tails.join(per_rank, on=["rank", "step"], how="left").with_columns(
        pl.coalesce(column, "start_us").alias(column) for column in ("_exit", "_entry", "_last_entry")
    )
    computed = pl.col("_last_entry") + pl.col(LANE[1])  # the rank's compute done after its last entry
    end = (
        pl.max_horizontal("_exit", pl.max_horizontal("_entry", computed) + pl.col("tail_us"))
        if overlap
        else pl.max_horizontal("_exit", computed) + pl.col("tail_us")
    )
    return ended.select(
        pl.col("rank").cast(pl.Int64),
        pl.col("step").cast(pl.Int64),
        end.alias("end_us"),
        pl.col("comm_chain_us").fill_null(0.0),
    ).sort("step", "rank")
