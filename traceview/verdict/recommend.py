"""Recommendations: rules over measured facts, each sentence citing the numbers that fired it.

Facts are a flat mapping of named numbers taken from a `RunAnalysis` by the `FACT_SOURCES` table (one function
per analysis; a source whose analysis is absent gives no facts). `RULES` is a table: a rule names the facts it
needs, a condition, a sentence and a score (the share of the step at stake, used to rank). A rule whose facts
are missing does not fire, so rules for sections not yet computed stay silent. The first recommendation
(highest score) is the report's top recommendation; the facts also feed the report's verdict panel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from traceview.reduce.analysis import RunAnalysis

Facts = Mapping[str, float]

EXPOSED_SHARE_MIN = 0.10
"""Exposed communication above this share of the median step is worth acting on."""
IDLE_SHARE_MIN = 0.15
"""GPU idle above this share of the median step points at the host."""
OVERLAP_RATIO_MAX = 0.5
"""Below this overlap ratio, most communication runs with nothing to hide it."""
COMM_SHARE_MIN = 0.05
"""Communication below this share of the step is not worth overlapping better."""
SLOW_RANK_EXCESS_MIN = 0.10
"""A rank whose median compute exceeds the median rank's by this fraction is called slow."""


@dataclass(frozen=True)
class Recommendation:
    """One fired rule: its id, the section it belongs to, the sentence, the cited facts and its score."""

    rule: str
    section: str
    sentence: str
    facts: tuple[tuple[str, float], ...]
    score: float


@dataclass(frozen=True)
class Rule:
    """A recommendation rule over facts: fires when every fact in `needs` is known and `holds` is true."""

    id: str
    section: str
    needs: tuple[str, ...]
    holds: Callable[[Facts], bool]
    sentence: Callable[[Facts], str]
    score: Callable[[Facts], float]


def _finite(values: Mapping[str, float | int | None]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)}


def budget_facts(analysis: RunAnalysis) -> dict[str, float]:
    """Run medians of the time budget, shares of the median step, and the slowest rank's compute."""
    median = analysis.budget.run_median
    facts = _finite(median)
    step = facts.get("step_us", 0.0)
    if step > 0:
        for name in ("exposed_comm_us", "idle_us", "comm_us"):
            if name in facts:
                facts[name.replace("_us", "_share")] = facts[name] / step
    return facts | _slow_rank_facts(analysis.budget.per_rank)


def _slow_rank_facts(per_rank: pl.DataFrame) -> dict[str, float]:
    if per_rank.height < 2:
        return {}
    ranked = per_rank.drop_nulls("comp_us").sort(["comp_us", "rank"], descending=[True, False])
    if ranked.height < 2:
        return {}
    return _finite(
        {
            "slow_rank": ranked.item(0, "rank"),
            "slow_rank_comp_us": ranked.item(0, "comp_us"),
            "median_rank_comp_us": ranked.get_column("comp_us").median(),  # type: ignore[dict-item]
            "ranks": ranked.height,
        }
    )


def crossrank_facts(analysis: RunAnalysis) -> dict[str, float]:
    """The straggler most often last (`straggler_rank`, -1 when no rank is a straggler) and its figures."""
    cross = analysis.crossrank
    if cross is None or cross.per_rank.height == 0:
        return {}
    flagged = cross.per_rank.filter(pl.col("straggler").fill_null(False))
    if flagged.height == 0:
        return {"stragglers": 0.0, "straggler_rank": -1.0}
    top = flagged.sort(["last_share", "rank"], descending=[True, False], nulls_last=True).row(0, named=True)
    return {"stragglers": float(flagged.height)} | _finite(
        {
            "straggler_rank": top["rank"],
            "straggler_last_share": top["last_share"],
            "straggler_times_last": top["times_last"],
            "straggler_instances": top["instances"],
            "straggler_group_size": top["group_size"],
            "straggler_median_lateness_us": top["median_lateness_us"],
        }
    )


FACT_SOURCES: tuple[Callable[[RunAnalysis], dict[str, float]], ...] = (budget_facts, crossrank_facts)
"""One function per analysis; an analysis adds its own row (returning {} when its field is None)."""


def facts_of(analysis: RunAnalysis) -> dict[str, float]:
    """Every fact every source knows about the run."""
    facts: dict[str, float] = {}
    for source in FACT_SOURCES:
        facts |= source(analysis)
    return facts


def _ms(facts: Facts, name: str) -> str:
    return f"{facts[name] / 1000:.2f} ms"


def _exposed_sentence(f: Facts) -> str:
    return (
        f"{f['exposed_comm_share']:.0%} of the median step is exposed communication "
        f"({_ms(f, 'exposed_comm_us')} of {_ms(f, 'step_us')}; exposed gamma {f['exposed_gamma']:.2f}): "
        f"start collectives earlier under the backward pass (DDP bucket order, `bucket_cap_mb`) "
        f"or raise the local batch so compute covers them."
    )


def _overlap_sentence(f: Facts) -> str:
    return (
        f"Only {f['overlap_ratio']:.0%} of communication time runs under compute (overlap ratio "
        f"{f['overlap_ratio']:.2f}, {_ms(f, 'comm_us')} of communication per step): issue collectives "
        f"asynchronously while independent compute remains, instead of waiting on each."
    )


def _idle_sentence(f: Facts) -> str:
    return (
        f"The GPU is idle {f['idle_share']:.0%} of the median step "
        f"({_ms(f, 'idle_us')} of {_ms(f, 'step_us')}): the host does not keep it fed; look at the input "
        f"pipeline (DataLoader workers, pinned memory), kernel launch overhead (CUDA graphs) and "
        f"synchronisations."
    )


def _gamma_sentence(f: Facts) -> str:
    return (
        f"Measured gamma is {f['gamma']:.2f} (T_comm {_ms(f, 'comm_us')} against "
        f"T_comp {_ms(f, 'comp_us')} per median step): communication sets the pace even with perfect "
        f"overlap; move fewer bytes (bf16 gradients), raise the local batch, or use faster links."
    )


def _slow_rank_excess(f: Facts) -> float:
    return f["slow_rank_comp_us"] / f["median_rank_comp_us"] - 1.0


def _slow_rank_sentence(f: Facts) -> str:
    return (
        f"Rank {f['slow_rank']:.0f} computes {_ms(f, 'slow_rank_comp_us')} per median step, "
        f"{_slow_rank_excess(f):.0%} more than the median over ranks ({_ms(f, 'median_rank_comp_us')}); "
        f"every collective waits for it: check its GPU (clocks, thermals) and its share of the data."
    )


def _straggler_sentence(f: Facts) -> str:
    return (
        f"Rank {f['straggler_rank']:.0f} arrives last in {f['straggler_last_share']:.0%} of the "
        f"{f['straggler_instances']:.0f} collectives it joins (1 in {f['straggler_group_size']:.0f} would be "
        f"chance; median lateness {_ms(f, 'straggler_median_lateness_us')}): its peers wait for it; see the "
        f"cross-rank skew section for the likely cause."
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "exposed-communication",
        "time-budget",
        ("exposed_comm_share", "exposed_comm_us", "step_us", "exposed_gamma"),
        lambda f: f["exposed_comm_share"] >= EXPOSED_SHARE_MIN,
        _exposed_sentence,
        lambda f: f["exposed_comm_share"],
    ),
    Rule(
        "low-overlap",
        "time-budget",
        ("overlap_ratio", "comm_us", "comm_share"),
        lambda f: f["overlap_ratio"] < OVERLAP_RATIO_MAX and f["comm_share"] >= COMM_SHARE_MIN,
        _overlap_sentence,
        lambda f: f["comm_share"] * (1.0 - f["overlap_ratio"]) * 0.9,
    ),
    Rule(
        "idle-gpu",
        "time-budget",
        ("idle_share", "idle_us", "step_us"),
        lambda f: f["idle_share"] >= IDLE_SHARE_MIN,
        _idle_sentence,
        lambda f: f["idle_share"],
    ),
    Rule(
        "communication-bound",
        "time-budget",
        ("gamma", "comm_us", "comp_us", "comm_share"),
        lambda f: f["gamma"] > 1.0,
        _gamma_sentence,
        lambda f: f["comm_share"],
    ),
    Rule(
        "slow-rank-compute",
        "time-budget",
        ("slow_rank", "slow_rank_comp_us", "median_rank_comp_us"),
        lambda f: f["median_rank_comp_us"] > 0 and _slow_rank_excess(f) >= SLOW_RANK_EXCESS_MIN,
        _slow_rank_sentence,
        lambda f: _slow_rank_excess(f) * 0.5,
    ),
    Rule(
        "straggler",
        "cross-rank",
        (
            "straggler_rank",
            "straggler_last_share",
            "straggler_instances",
            "straggler_group_size",
            "straggler_median_lateness_us",
        ),
        lambda f: f["straggler_rank"] >= 0,
        _straggler_sentence,
        lambda f: f["straggler_last_share"] * 0.5,
    ),
)
"""The rules, each a row; an analysis adds rows for its own facts."""


def recommendations(facts: Facts, rules: tuple[Rule, ...] = RULES) -> tuple[Recommendation, ...]:
    """The rules that fire on `facts`, highest score first (ties by rule id)."""
    fired = [
        Recommendation(
            rule.id,
            rule.section,
            rule.sentence(facts),
            tuple((n, facts[n]) for n in rule.needs),
            rule.score(facts),
        )
        for rule in rules
        if all(name in facts for name in rule.needs) and rule.holds(facts)
    ]
    return tuple(sorted(fired, key=lambda r: (-r.score, r.rule)))


@dataclass(frozen=True)
class Recommendations:
    """The facts every source knew about the run and the rules they fired, highest score first."""

    facts: Mapping[str, float]
    items: tuple[Recommendation, ...]

    @property
    def top(self) -> Recommendation | None:
        """The recommendation with the most at stake, if any fired."""
        return self.items[0] if self.items else None


def recommend(analysis: RunAnalysis) -> Recommendations:
    """The facts of a run and the recommendations they fire."""
    facts = facts_of(analysis)
    return Recommendations(dict(sorted(facts.items())), recommendations(facts))
