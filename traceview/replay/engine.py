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
every variant's (every lever's) and every step's collective of that level and all its members.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TypeVar

import polars as pl

from traceview.core.records import record
from traceview.replay.skeleton import first_claims

VARIANT = "variant"
"""The column that tells the replayed variants of the same steps apart (one per lever)."""


@record
class Chain:
    """The steps to replay, every variant at once: per member row (variant, step, instance, rank) its
    segment, the instance's transfer and `late` (the rank's arrival moves to the latest of the other
    members': `no_straggler`), in each rank's order; per (variant, rank, step) its window start, tail and
    `overlap` (perfect overlap); `variant_columns` numbers one variant's frames."""

    body: pl.DataFrame  # variant, step, instance, rank, order, anchor, segment_us, transfer_us, late
    tails: pl.DataFrame  # variant, step, rank, start_us, tail_us, overlap (lead/trail_compute_us: optional)


Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def variant_columns(
    body: Frame, tails: Frame, late: frozenset[int], overlap: bool, variant: int
) -> tuple[Frame, Frame]:
    """`body` and `tails` of one variant: its number, its `late` ranks (their arrivals moved) on the body and
    its `overlap` mode on the tails."""
    numbered = pl.lit(variant, pl.Int64).alias(VARIANT)
    moved = pl.col("rank").is_in(sorted(late)) if late else pl.lit(False)
    return (
        body.with_columns(numbered, moved.alias("late")),
        tails.with_columns(numbered, pl.lit(overlap).alias("overlap")),
    )


def stacked(variants: list[tuple[pl.LazyFrame, pl.LazyFrame]]) -> Chain:
    """Several variants' (body, tails) as one chain, each keeping its own `variant` number."""
    body, tails = pl.collect_all(
        [pl.concat([body for body, _ in variants]), pl.concat([tails for _, tails in variants])]
    )
    return Chain(body, tails)


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

KEY = [VARIANT, "rank", "step", "instance"]
MARKS = {
    VARIANT: pl.Int64,
    "rank": pl.Int64,
    "step": pl.Int64,
    "instance": pl.Int64,
    "entry_us": pl.Float64,
    "done_us": pl.Float64,
}
_MEMBERS = (VARIANT, "step", "instance")


def _level(rows: pl.DataFrame, marks: list[pl.DataFrame]) -> pl.DataFrame:
    """The members of one level's instances (every variant and step at once): entry after the anchor's
    replayed mark (`marks`: the earlier levels'; its entry under `overlap`, else its exit), start at the last
    arrival (a late rank's moved to the latest of the others'), done after the transfer; one query."""
    earlier = pl.concat([found.lazy() for found in marks]) if marks else pl.LazyFrame(schema=MARKS)
    anchor = earlier.select(
        VARIANT,
        "rank",
        "step",
        pl.col("instance").alias("anchor"),
        pl.col("entry_us").alias("_anchor_entry"),
        pl.col("done_us").alias("_anchor_done"),
    )
    mark = pl.when(pl.col("_overlap")).then(pl.col("_anchor_entry")).otherwise(pl.col("_anchor_done"))
    anchored = (
        rows.lazy()
        .join(anchor, on=[VARIANT, "rank", "step", "anchor"], how="left")
        .with_columns(
            pl.max_horizontal(pl.coalesce(mark, "_window") + pl.col("segment_us"), "_floor").alias("entry_us")
        )
    )
    latest = pl.col("entry_us").filter(~pl.col("late")).max().over(_MEMBERS)
    start = pl.coalesce(latest, pl.col("entry_us").max().over(_MEMBERS))
    done = (start + pl.col("transfer_us")).alias("done_us")
    return anchored.select(*KEY, "entry_us", done).cast(MARKS).collect()  # type: ignore[arg-type]


def run(chain: Chain, order: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per (variant, rank, step): `end_us` (replayed end of the step) and `comm_chain_us` (time from entering
    to leaving its collectives: transfers and waits). The loop runs over the levels of `order` (`levels`, of
    the first variant: every variant keeps the recorded order), each one query over every variant's and
    step's collective of that level and all its members at once."""
    body = first_claims(chain.body, VARIANT, "step", "rank", "instance")  # one chain a (rank, step)
    order = order if order is not None else levels(body.filter(pl.col(VARIANT) == pl.col(VARIANT).min()))
    tails = first_claims(chain.tails, VARIANT, "step", "rank").with_columns(
        pl.lit(0.0).alias(column) for column in LANE if column not in chain.tails.columns
    )
    last = pl.col("order") == pl.col("order").max().over(VARIANT, "step", "rank")
    window = tails.lazy().select(
        VARIANT,
        "step",
        "rank",
        pl.col("start_us").alias("_window"),
        *LANE,
        pl.col("overlap").alias("_overlap"),
    )
    rows = (
        body.lazy()
        .join(order.lazy(), on=["step", "instance"])
        .join(window, on=[VARIANT, "step", "rank"])
        .with_columns(pl.when(last).then(pl.col("_window") + pl.col(LANE[0])).alias("_floor"))
        .collect()
    )
    by_level = rows.partition_by("level", as_dict=True)
    marks: list[pl.DataFrame] = []
    for level in range(order.height and int(order.get_column("level").max()) + 1):  # type: ignore[arg-type]
        marks.append(_level(by_level.get((level,), rows.clear()), marks))
    found = pl.concat(marks) if marks else pl.DataFrame(schema=MARKS)
    return _ends(tails, found.join(rows.select(*KEY, "order"), on=KEY))


def _ends(tails: pl.DataFrame, marks: pl.DataFrame) -> pl.DataFrame:
    """Per (variant, rank, step) from its replayed `marks` (with their `order`): the step's end (its tail
    after its latest exit and after its compute lane: the entry of its last collective in its order plus the
    compute after it; under `overlap`, after its latest entry) and its time inside collectives."""
    per_rank = marks.group_by(VARIANT, "rank", "step").agg(
        pl.col("done_us").max().alias("_exit"),
        pl.col("entry_us").max().alias("_entry"),
        pl.col("entry_us").sort_by("order").last().alias("_last_entry"),
        (pl.col("done_us") - pl.col("entry_us")).sum().alias("comm_chain_us"),
    )
    ended = tails.join(per_rank, on=[VARIANT, "rank", "step"], how="left").with_columns(
        pl.coalesce(column, "start_us").alias(column) for column in ("_exit", "_entry", "_last_entry")
    )
    computed = pl.col("_last_entry") + pl.col(LANE[1])  # the rank's compute done after its last entry
    overlapped = pl.max_horizontal("_exit", pl.max_horizontal("_entry", computed) + pl.col("tail_us"))
    chained = pl.max_horizontal("_exit", computed) + pl.col("tail_us")
    return ended.select(
        pl.col(VARIANT).cast(pl.Int64),
        pl.col("rank").cast(pl.Int64),
        pl.col("step").cast(pl.Int64),
        pl.when(pl.col("overlap")).then(overlapped).otherwise(chained).alias("end_us"),
        pl.col("comm_chain_us").fill_null(0.0),
    ).sort(VARIANT, "step", "rank")
