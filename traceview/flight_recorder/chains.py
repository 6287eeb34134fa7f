"""Waits that cross groups, as chains: "rank 3 waits in group 2 #57 for rank 5, which is in group 0 #12 for
rank 7, which left no dump". A chain starts at a finding where ranks wait for a rank that never entered the
collective; it follows that rank to its newest entry (any group) and, when it waits there too for another,
on, at most `MAX_LINKS` links and never twice through one rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.flight_recorder.findings import HangFinding

MAX_LINKS = 8
"""Most links of one chain."""
_WAITS = frozenset({"missing_rank", "before_first", "missing_dump", "unmatched_p2p"})


def _newest_entries(entries: pl.DataFrame) -> dict[int, tuple[str, int, str, bool]]:
    """rank -> (group, sequence number, op, is p2p) of its newest entry."""
    newest = entries.sort("created_ns", nulls_last=False).group_by("rank").last()
    return {
        row["rank"]: (
            row["group"],
            row["p2p_seq"] if row["is_p2p"] else row["collective_seq"],
            row["op"],
            row["is_p2p"],
        )
        for row in newest.iter_rows(named=True)
    }


def _waiting_in(findings: Sequence[HangFinding]) -> dict[tuple[int, str], HangFinding]:
    """(waiting rank, group) -> the wait finding it is on the waiting side of."""
    return {
        (rank, finding.group): finding
        for finding in findings
        if finding.kind in _WAITS
        for rank in finding.ranks_waiting
    }


def _link(
    rank: int, newest: dict[int, tuple[str, int, str, bool]], waits: dict[tuple[int, str], HangFinding]
) -> tuple[str, int | None]:
    """Where `rank` is, in words, and the rank it waits for there (None: the chain ends)."""
    where = newest.get(rank)
    if where is None:
        return f"rank {rank}, which has no entry in its dump" if (rank, "") not in waits else "", None
    group, seq, op, is_p2p = where
    finding = waits.get((rank, group))
    place = f"rank {rank}, which is in group {group} {'p2p ' if is_p2p else ''}#{seq} ({op})"
    if finding is None or not finding.ranks_apart:
        return place, None
    return f"{place} for", finding.ranks_apart[0]


def wait_chains(findings: Sequence[HangFinding], entries: pl.DataFrame) -> tuple[str, ...]:
    """The chains of waits that cross at least one group (module docstring)."""
    newest = _newest_entries(entries) if entries.height else {}
    waits = _waiting_in(findings)
    chains = []
    for start in findings:
        if start.kind not in _WAITS or not start.ranks_apart or not start.ranks_waiting:
            continue
        words = [f"rank {start.ranks_waiting[0]} waits in group {start.group} #{start.seq} for"]
        seen, groups, rank = {start.ranks_waiting[0]}, {start.group}, start.ranks_apart[0]
        for _ in range(MAX_LINKS):
            if rank in seen:
                break
            seen.add(rank)
            text, following = _link(rank, newest, waits)
            if start.kind == "missing_dump" and rank in start.ranks_apart:
                text = f"rank {rank}, which left no dump"
                following = None
            words.append(text)
            groups.add(newest.get(rank, ("",))[0])
            if following is None:
                break
            rank = following
        if len(groups - {""}) > 1:
            chains.append(" ".join(words))
    return tuple(dict.fromkeys(chains))
