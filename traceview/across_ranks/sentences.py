"""The across-ranks sentence and warnings, from the per-rank table (`traceview.across_ranks.stragglers`): one
sentence per cause rule (`CAUSES`, `FALLBACK_SENTENCES`), the rank's figures filled in."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from traceview.across_ranks.clocks import ClockOffsets
from traceview.across_ranks.matching import Matching
from traceview.across_ranks.stragglers import CAUSES, FALLBACK_SENTENCES, NOT_RESOLVABLE
from traceview.core.durations import duration_text

RULE_SENTENCES = {rule.cause: (rule.sentence, rule.figure) for rule in CAUSES}


def _ms(value: object) -> str:
    return "?" if not isinstance(value, int | float) else duration_text(value, decimals=3)


def cause_text(row: Mapping[str, object]) -> str:
    """The sentence of the rank's cause, its figure filled in."""
    cause = str(row["cause"])
    if cause in RULE_SENTENCES:
        sentence, figure = RULE_SENTENCES[cause]
        return sentence.format(value=_ms(row[figure]))
    return FALLBACK_SENTENCES.get(cause, cause)


def _straggler_text(row: Mapping[str, object]) -> str:
    cost = row["lateness_cost_share"]
    share = f", {cost:.0%} of the median step" if isinstance(cost, float) else ""
    by_size = (
        f" (its peers wait a median {_ms(row['median_lead_us'])} for it, beyond its jitter of "
        f"{_ms(row['lead_jitter_us'])} and the clock)"
        if row.get("late_by_size")
        else ""
    )
    return (
        f"rank {row['rank']} is a straggler: last in {row['times_last']} of its {row['instances']} "
        f"collectives{by_size}, "
        f"median {_ms(row['median_lateness_us'])} late, costing {_ms(row['lateness_cost_us'])} per "
        f"step{share}; "
        f"likely cause: {cause_text(row)}"
    )


def _unresolvable_text(row: Mapping[str, object]) -> str:
    return (
        f"rank {row['rank']} arrives late (median {_ms(row['median_lateness_us'])}) but the clock alignment "
        f"is "
        f"uncertain by {_ms(row['clock_uncertainty_us'])}: not resolvable"
    )


SENTENCE_STRAGGLERS = 3
"""Stragglers (and ranks not resolvable) the sentence describes one by one; the others are listed by rank."""


def _more(kind: str, ranks: list[int]) -> list[str]:
    """One clause listing the ranks past `SENTENCE_STRAGGLERS` (none when there are none)."""
    if not ranks:
        return []
    listed = ", ".join(str(r) for r in ranks[:10]) + (", ..." if len(ranks) > 10 else "")
    return [f"and {len(ranks)} more {kind} (ranks {listed}; the per-rank table has them all)"]


def straggler_sentence(per_rank: pl.DataFrame, instances: pl.DataFrame) -> str:
    """One plain sentence: the straggler(s) with cost and likely cause, the ranks not resolvable, or why there
    is no straggler."""
    usable = instances.filter(pl.col("skew_us").is_not_null())
    if usable.height == 0:
        return "No collective was matched on two or more ranks, so there are no straggler figures."
    flagged = per_rank.filter(pl.col("straggler"))
    parts = [_straggler_text(row) for row in flagged.head(SENTENCE_STRAGGLERS).iter_rows(named=True)]
    parts += _more("stragglers", flagged.get_column("rank").slice(SENTENCE_STRAGGLERS).to_list())
    unsure = per_rank.filter(pl.col("cause") == NOT_RESOLVABLE)
    parts += [_unresolvable_text(row) for row in unsure.head(SENTENCE_STRAGGLERS).iter_rows(named=True)]
    parts += _more("ranks not resolvable", unsure.get_column("rank").slice(SENTENCE_STRAGGLERS).to_list())
    if parts:
        text = "; ".join(parts) + "."
        return text[0].upper() + text[1:]
    skew = usable.get_column("skew_us").median()
    return f"No straggler: the median arrival skew is {_ms(skew)} over {usable.height} matched collectives."


def warnings(matching: Matching, clocks: ClockOffsets) -> tuple[str, ...]:
    """Absent members, calls outside every step window, mismatches, and the clock alignment's warnings."""
    absent = matching.groups.filter(pl.col("absent").list.len() > 0)
    notes = [
        f"group {row['group']}: {len(row['absent'])} of {row['members']} members have no trace in the run; "
        f"figures use the {row['present']} present"
        for row in absent.iter_rows(named=True)
    ]
    outside = matching.outside.group_by("rank").agg(pl.col("calls").sum()).sort("rank")
    notes += [
        f"rank {row['rank']}: {row['calls']} collective calls outside every step window are not matched"
        for row in outside.iter_rows(named=True)
    ]
    cut = matching.cut.group_by("rank").agg(pl.len().alias("calls"), pl.col("step").first()).sort("rank")
    notes += [
        f"rank {row['rank']}: {row['calls']} call(s) its peers made at the end of step {row['step']}, its "
        "last recorded step, are not in its trace: its recording stopped before they were written (left out "
        "of the matching, not counted as mismatches)"
        for row in cut.iter_rows(named=True)
    ]
    if matching.mismatches.height:
        first = matching.mismatches.row(0, named=True)
        notes.append(
            f"{matching.mismatches.height} mismatched calls, first: rank {first['rank']} group "
            f"{first['group']} "
            f"seq {first['seq']}: {first['kind']} ({first['detail']})"
        )
    return (*notes, *clocks.warnings)
