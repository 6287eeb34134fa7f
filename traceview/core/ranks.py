"""Ranks said compactly: `0-3, 8` for a list, and the ranks of a world a run lacks."""

from __future__ import annotations

from collections.abc import Iterable


def rank_ranges(ranks: Iterable[int]) -> str:
    """`ranks` with its runs written as ranges: `[0, 1, 2, 3, 8]` -> `0-3, 8`."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)


def absent_ranks(read: Iterable[int], world_size: int | None) -> list[int]:
    """The ranks of a world of `world_size` that `read` lacks (none when the world size is unknown)."""
    return sorted(set(range(world_size or 0)) - set(read))
