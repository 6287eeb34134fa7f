"""The replay of every rank's step skeleton together (docs/metrics.md, "Replay", Engine).

A rank enters a collective `segment_us` after its anchor's replayed exit (the latest of its collectives to
end before it in the recording; the window start without one). A collective starts when its last member has
entered and completes `transfer_us` later; each member leaves it then, so its wait is the edge from the last
arrival, never a recorded gap. With `overlap` (perfect overlap) a rank enters a collective `segment_us` after
its anchor's replayed entry (it did not wait for the anchor's transfer); its step then ends when its last
segment and its last transfer are done. A rank's step ends its tail after its latest exit. Collectives run in
the order every member gives them (each rank's own order; an instance starts once it heads every member's
queue): the loop runs over the collectives of a step, each over its members.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Chain:
    """One step of the replay: per member row (step, instance, rank) its segment and the instance's
    transfer, in each rank's order; per rank its window start and tail; `late` ranks whose arrival moves to
    the latest of the other members' (`no_straggler`)."""

    body: pl.DataFrame  # step, instance, rank, order, segment_us, transfer_us
    tails: pl.DataFrame  # step, rank, start_us, tail_us
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


def _start(entries: dict[int, float], late: frozenset[int]) -> float:
    """When the last member has entered; a late rank's arrival moved to the latest of the others'."""
    others = [t for r, t in entries.items() if r not in late]
    if not others or len(others) == len(entries):
        return max(entries.values())
    bound = max(others)
    return max(bound, *(min(t, bound) for r, t in entries.items() if r in late))


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


def run(chain: Chain) -> pl.DataFrame:
    """Per (rank, step): `end_us` (replayed end of the step) and `comm_chain_us` (time from entering to
    leaving its collectives: transfers and waits)."""
    segment: dict[tuple[int, int, int], tuple[float, int | None]] = {}
    transfer: dict[tuple[int, int], float] = {}
    members: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for step, instance, rank, seg, anchor, tr in chain.body.select(
        "step", "instance", "rank", "segment_us", "anchor", "transfer_us"
    ).iter_rows():
        segment[(step, instance, rank)] = (seg, anchor)
        transfer[(step, instance)] = tr
        members[step][instance].append(rank)
    queues = _queues(chain.body)
    rows: list[tuple[int, int, float, float]] = []
    for step, start, tail in _tail_rows(chain.tails):
        exits: dict[tuple[int, int], float] = {}
        entered: dict[tuple[int, int], float] = {}
        comm = dict.fromkeys(start, 0.0)
        for instance in _order(queues.get(step, {}), members.get(step, {})):
            ranks = members[step][instance]
            marks = entered if chain.overlap else exits
            entries = {r: _entry(segment[(step, instance, r)], (r, marks), start[r]) for r in ranks}
            done = _start(entries, chain.late) + transfer[(step, instance)]
            for rank in ranks:
                comm[rank] += done - entries[rank]
                entered[(rank, instance)] = entries[rank]
                exits[(rank, instance)] = done
        ends = _ends(exits, entered, start, tail, chain.overlap)
        rows.extend((rank, step, ends[rank], comm[rank]) for rank in start)
    return pl.DataFrame(
        rows,
        schema={"rank": pl.Int64, "step": pl.Int64, "end_us": pl.Float64, "comm_chain_us": pl.Float64},
        orient="row",
    )


def _entry(
    found: tuple[float, int | None], marked: tuple[int, dict[tuple[int, int], float]], start: float
) -> float:
    """When a rank enters a collective: its segment after its anchor's replayed mark (the window start)."""
    seg, anchor = found
    rank, marks = marked
    return (start if anchor is None else marks.get((rank, anchor), start)) + seg


def _ends(
    exits: dict[tuple[int, int], float],
    entered: dict[tuple[int, int], float],
    start: dict[int, float],
    tail: dict[int, float],
    overlap: bool,
) -> dict[int, float]:
    """Each rank's end: its tail after its latest exit; with overlap its tail after its latest entry (it did
    not wait) and not before its last transfer is done."""
    last_exit, last_entry = dict(start), dict(start)
    for (rank, _), value in exits.items():
        last_exit[rank] = max(last_exit[rank], value)
    for (rank, _), value in entered.items():
        last_entry[rank] = max(last_entry[rank], value)
    if overlap:
        return {rank: max(last_exit[rank], last_entry[rank] + tail[rank]) for rank in start}
    return {rank: last_exit[rank] + tail[rank] for rank in start}


def _tail_rows(tails: pl.DataFrame) -> list[tuple[int, dict[int, float], dict[int, float]]]:
    """Per step: each rank's window start and tail."""
    found: dict[int, tuple[dict[int, float], dict[int, float]]] = defaultdict(lambda: ({}, {}))
    for step, rank, start, tail in tails.select("step", "rank", "start_us", "tail_us").iter_rows():
        found[step][0][rank] = start
        found[step][1][rank] = tail
    return [(step, start, tail) for step, (start, tail) in sorted(found.items())]
