"""Text filters of the report's templates (formatting only)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from traceview.core.ranks import rank_ranges as core_rank_ranges

_RANK_LIST = re.compile(r"^\s*\[?\s*(-?\d+\s*(,\s*-?\d+\s*)*)?\]?\s*$")


def rank_ranges(ranks: str | Iterable[int] | None) -> str:
    """A list of ranks with its runs written as ranges: `[0, 1, 2, 3, 8]` -> `0-3, 8`; text that is not a
    plain list of integers is returned as it is."""
    if ranks is None:
        return "-"
    if isinstance(ranks, str):
        if not _RANK_LIST.match(ranks):
            return ranks
        ranks = [int(found) for found in re.findall(r"-?\d+", ranks)]
    return core_rank_ranges(ranks)
