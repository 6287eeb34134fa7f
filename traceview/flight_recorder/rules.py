"""The divergence rules (docs/metrics.md, "Hang forensics"), as data: each kind of disagreement, its order
of precedence, and the sentence that names it. `findings.py` finds each kind; this table says what it is.

The in-flight rule: ranks one collective apart agree while the collective the ahead ranks wait in is young.
Its age is how long they had waited in it when the behind rank was dumped (that rank's dump time minus the
collective's earliest creation on the waiting ranks). Young is under `in_flight_limit_s` = the larger of
`IN_FLIGHT_FLOOR_S` and `IN_FLIGHT_DURATIONS` times the job's longest measured collective; a wait of
`DIVERGED_FACTOR` times that limit or more is a divergence; in between it is "unsure".
"""

from __future__ import annotations

from traceview.core.records import record

IN_FLIGHT_FLOOR_S = 1.0
"""A wait younger than this is in flight whatever the job's own durations."""
IN_FLIGHT_DURATIONS = 10.0
"""A wait younger than this many times the job's longest measured collective is in flight."""
DIVERGED_FACTOR = 3.0
"""A wait this many times the in-flight limit or older is a divergence; between the two, unsure."""


@record
class DivergenceRule:
    """One kind of disagreement: its name (the JSON `kind`), its precedence among findings of the same
    collective (lower first), whether the in-flight rule applies, and the sentence that names it
    (`str.format` fields: group, seq, apart, waiting, detail, waited)."""

    kind: str
    precedence: int
    aged: bool
    sentence: str


RULES: tuple[DivergenceRule, ...] = (
    DivergenceRule(
        "membership",
        0,
        False,
        "group {group}: its members disagree on its ranks ({detail})",
    ),
    DivergenceRule(
        "op_mismatch",
        1,
        False,
        "group {group} #{seq}: ranks entered different operations at the same sequence number ({detail})",
    ),
    DivergenceRule(
        "size_mismatch",
        2,
        False,
        "group {group} #{seq}: ranks entered {op} with different sizes or dtypes ({detail})",
    ),
    DivergenceRule(
        "before_first",
        3,
        True,
        "group {group} #{seq}: rank {apart} never entered its first collective while rank {waiting} waited "
        "{waited} in {detail}",
    ),
    DivergenceRule(
        "missing_rank",
        4,
        True,
        "group {group} #{seq}: rank {apart} never entered it while rank {waiting} waited {waited} in "
        "{detail}",
    ),
    DivergenceRule(
        "missing_dump",
        5,
        True,
        "group {group} #{seq}: rank {apart} left no dump while rank {waiting} waited {waited} in {detail} "
        "(the likeliest culprit)",
    ),
    DivergenceRule(
        "unmatched_p2p",
        6,
        True,
        "group {group} p2p #{seq}: rank {waiting} {detail} without its match on rank {apart} for {waited}",
    ),
)
"""Every kind, in order of precedence."""

RULE_BY_KIND = {rule.kind: rule for rule in RULES}

SIZE_FREE_OPS = frozenset({"gather", "scatter", "alltoall", "all_to_all", "alltoall_base", "all_to_allv"})
"""Ops whose ranks may pass different sizes (a root's list, split sizes): no size rule on them."""
SEND_OPS, RECV_OPS = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})
"""The point-to-point ops a send or a receive is written as."""


def in_flight_limit_s(longest_collective_s: float | None) -> float:
    """The age under which a wait is in flight (module docstring)."""
    return max(IN_FLIGHT_FLOOR_S, IN_FLIGHT_DURATIONS * (longest_collective_s or 0.0))


def certainty(waited_s: float | None, limit_s: float) -> str | None:
    """ "divergence", "unsure" or None (in flight) for a wait of `waited_s` against the in-flight limit;
    a wait of unknown age is unsure."""
    if waited_s is None:
        return "unsure"
    if waited_s < limit_s:
        return None
    return "divergence" if waited_s >= DIVERGED_FACTOR * limit_s else "unsure"
