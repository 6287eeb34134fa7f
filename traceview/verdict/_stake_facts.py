"""What the rank, dimension, MoE and classification advice has at stake, measured on the one account of
causes (docs/metrics.md section 5, "One measure: the stake on the path"): the replay's `no_straggler` lever
where it replayed the rank alone, else the time the peers' critical paths wait for the rank; the path's time
held by a process group's collectives; the path's time held by kernels by name.

Each figure is microseconds per median step (`<rule>_saved_us`), with the word `<rule>_saved_by` (`replay` or
`critical path`) where two sources could give it.
"""

from __future__ import annotations

import polars as pl

from traceview.critical_path.analysis import CriticalPath
from traceview.critical_path.holders import MAX_NAME_CHARS
from traceview.replay.analysis import Replay

REPLAY, PATH = "replay", "critical path"
"""The sources of a rank's stake (`<rule>_saved_by`)."""


def _lever_saved(replay: Replay | None, rank: int, named: tuple[int, ...]) -> float | None:
    """The replay's saving from removing `rank`'s lateness alone: its `no_straggler:R` lever, or the default
    `no_straggler` where `rank` is the only straggler named; None where neither was replayed."""
    if replay is None:
        return None
    rows = [replay.lever(f"no_straggler:{rank}")]
    rows += [replay.lever("no_straggler")] if named == (rank,) else []
    found = next((row for row in rows if row is not None and row.get("saved_us") is not None), None)
    return None if found is None else float(found["saved_us"])  # type: ignore[arg-type]


def rank_stake(
    prefix: str, rank: int, path: CriticalPath | None, replay: Replay | None, named: tuple[int, ...]
) -> tuple[dict[str, float], dict[str, str]]:
    """`<prefix>_saved_us` and `<prefix>_saved_by` of `rank` (module docstring); none without either
    source (none of the rank's collectives matched across ranks). `named`: the stragglers across ranks
    names."""
    replayed = _lever_saved(replay, rank, named)
    if replayed is not None:
        return {f"{prefix}_saved_us": max(0.0, replayed)}, {f"{prefix}_saved_by": REPLAY}
    if path is None or path.calls.filter(pl.col("rank") == rank).height == 0:
        return {}, {}  # none of its collectives matched across ranks: not measured
    return {f"{prefix}_saved_us": path.waits_for(rank)}, {f"{prefix}_saved_by": PATH}


def group_stake(name: str, path: CriticalPath | None, groups: list[str], column: str) -> dict[str, float]:
    """`<name>`: the path's time per step in the calls of `groups` (`column`: `transfer_us` or `wait_us`);
    none without the path or where no call of `groups` was matched across ranks (not measured)."""
    if path is None or path.calls.filter(pl.col("group").is_in(groups)).height == 0:
        return {}
    return {name: path.held_by_groups(groups, column)}


def names_stake(name: str, path: CriticalPath | None, kernels: list[str]) -> dict[str, float]:
    """`<name>`: the path's time per step held by events named `kernels` (mean over ranks of the holders'
    time; a kernel outside a rank's listed holders counts 0 there); none without the path."""
    if path is None or path.per_step.height == 0:
        return {}
    cut = [kernel[:MAX_NAME_CHARS] for kernel in kernels]
    held = path.holders.filter(pl.col("name").is_in(cut)).get_column("us_per_step").sum()
    return {name: float(held) / max(path.per_rank.height, 1)}
