"""Waits one side has no partner for: a group's ranks at its newest collective while other members never
entered it (behind, stuck before their first, or without a dump), and point-to-point ops without their
match. Each is weighed by the in-flight rule (`rules.certainty`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl

from traceview.flight_recorder.findings import HangFinding, Side, finding
from traceview.flight_recorder.positions import NS_PER_S
from traceview.flight_recorder.rules import RECV_OPS, SEND_OPS, certainty

_BEHIND_KINDS = (
    ("before_first", pl.col("last_enqueued") == 0),
    ("missing_rank", pl.col("last_enqueued") > 0),
)


def _top_frame(table: pl.DataFrame) -> pl.DataFrame:
    """Each group's newest collective among its dumped members, and who waits in it (those whose entry is not
    completed: a backend that marks completion, as NCCL does, has every member's part in a completed one)."""
    dumped = table.filter(pl.col("has_dump"))
    top = dumped.group_by("group").agg(pl.col("last_enqueued").max().alias("top"))
    return (
        dumped.join(top, on="group")
        .filter((pl.col("last_enqueued") == pl.col("top")) & (pl.col("top") > 0))
        .filter(pl.col("state").fill_null("") != "completed")  # a completed collective waits for nobody
        .group_by("group")
        .agg(
            pl.col("top").first(),
            pl.col("rank").sort().alias("waiting"),
            pl.col("created_ns").min().alias("created_ns"),
            pl.col("dumped_ns").max().alias("waiting_dumped_ns"),
            pl.col("op", "input_sizes", "input_dtypes", "stack", "group_desc").drop_nulls().first(),
        )
    )


def _apart(table: pl.DataFrame, waiting: pl.DataFrame, kind: str, chosen: pl.Expr) -> pl.DataFrame:
    """The ranks of `kind` per group, and when the first of them was seen not in the collective."""
    behind = table.join(waiting.select("group", "top"), on="group").filter(
        pl.col("has_dump") & (pl.col("last_enqueued") < pl.col("top")) & chosen
        if kind != "missing_dump"
        else ~pl.col("has_dump")
    )
    return behind.group_by("group").agg(
        pl.col("rank").sort().alias("apart"), pl.col("dumped_ns").min().alias("apart_dumped_ns")
    )


def _waited_s(row: dict[str, Any]) -> float | None:
    """How long the waiting ranks had waited when the others were seen not in the collective."""
    if row["created_ns"] is None:
        return None
    seen = row["apart_dumped_ns"] or row["waiting_dumped_ns"]
    if seen is None:
        return None
    return float(min(seen, row["waiting_dumped_ns"] or seen) - row["created_ns"]) / NS_PER_S


def wait_findings(table: pl.DataFrame, limit_s: float) -> Iterator[HangFinding]:
    """Ranks behind the group's newest collective (or without a dump) while others wait in it."""
    waiting = _top_frame(table)
    kinds = (*_BEHIND_KINDS, ("missing_dump", pl.lit(True)))
    for kind, chosen in kinds:
        found = waiting.join(_apart(table, waiting, kind, chosen), on="group")
        for row in found.sort("group").to_dicts():
            waited = _waited_s(row)
            status = certainty(waited, limit_s)
            if status is None:
                continue
            side = Side(
                tuple(row["waiting"]), row["op"] or "", row["input_sizes"] or "", row["input_dtypes"] or ""
            )
            where = {"group": row["group"], "seq": row["top"], "group_desc": row["group_desc"]}
            yield finding(
                kind,
                status,
                where,
                (side,),
                detail=f"{side.op} {side.input_sizes} {side.input_dtypes}".rstrip(),
                ranks_waiting=side.ranks,
                ranks_apart=tuple(row["apart"]),
                waited_s=waited,
                created_ns=row["created_ns"],
                stack=row["stack"],
            )


def _p2p_counts(entries: pl.DataFrame) -> pl.DataFrame:
    """(group, sender, receiver) -> sends counted on the sender and receives counted on the receiver."""
    p2p = entries.filter(pl.col("is_p2p") & pl.col("peer").is_not_null())
    sends = (
        p2p.filter(pl.col("op").is_in(list(SEND_OPS)))
        .group_by("group", "rank", "peer")
        .agg(
            sends=pl.len(),
            send_created_ns=pl.col("created_ns").max(),
            send_seq=pl.col("p2p_seq").max(),
            send_stack=pl.col("stack").drop_nulls().last(),
        )
    )
    recvs = (
        p2p.filter(pl.col("op").is_in(list(RECV_OPS)))
        .group_by("group", "rank", "peer")
        .agg(
            recvs=pl.len(),
            recv_created_ns=pl.col("created_ns").max(),
            recv_seq=pl.col("p2p_seq").max(),
            recv_stack=pl.col("stack").drop_nulls().last(),
        )
    )
    sends = sends.rename({"rank": "sender", "peer": "receiver"})
    recvs = recvs.rename({"rank": "receiver", "peer": "sender"})
    return sends.join(recvs, on=["group", "sender", "receiver"], how="full", coalesce=True).with_columns(
        pl.col("sends", "recvs").fill_null(0)
    )


def p2p_findings(entries: pl.DataFrame, dumped: pl.DataFrame, limit_s: float) -> Iterator[HangFinding]:
    """Sends without their receives and receives without their sends (peers named by the ops' names)."""
    counts = _p2p_counts(entries).filter(pl.col("sends") != pl.col("recvs"))
    times = dict(zip(dumped["rank"].to_list(), dumped["dumped_ns"].to_list(), strict=True))
    for row in counts.sort("group", "sender", "receiver").to_dicts():
        surplus_send = row["sends"] > row["recvs"]
        waiting, apart = (
            (row["sender"], row["receiver"]) if surplus_send else (row["receiver"], row["sender"])
        )
        created = row["send_created_ns"] if surplus_send else row["recv_created_ns"]
        seen = times.get(apart, times.get(waiting))
        waited = None if created is None or seen is None else (seen - created) / NS_PER_S
        status = certainty(waited, limit_s)
        if status is None:
            continue
        verb = f"sent to rank {apart}" if surplus_send else f"waits to receive from rank {apart}"
        count = abs(row["sends"] - row["recvs"])
        detail = f"{verb} ({count} op{'s' if count > 1 else ''} unmatched)"
        seq = (row["send_seq"] if surplus_send else row["recv_seq"]) or 0
        op = "send" if surplus_send else "recv"
        yield finding(
            "unmatched_p2p",
            status,
            {"group": row["group"], "seq": seq},
            (Side((waiting,), op, "", ""),),
            detail=detail,
            ranks_waiting=(waiting,),
            ranks_apart=(apart,),
            waited_s=waited,
            created_ns=created,
            stack=row["send_stack"] if surplus_send else row["recv_stack"],
        )
