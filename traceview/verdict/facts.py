"""The facts of a run: what every analysis measured, as the verdict and the advice read it (docs/metrics.md,
"Verdict").

Facts are named numbers (`Facts.numbers`) and named words (`Facts.words`: a straggler's cause, the factor that
dominates the prediction's gap, the input the prediction misses). `FACT_SOURCES` is a table, one function per
analysis; an analysis that did not run gives no facts, so a rule that needs them stays silent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.budget.time_budget import TimeBudget
from traceview.collectives.tables import CollectiveAnalysis
from traceview.dimensions.analysis import DIMENSION_ADVICE, DIMENSION_NAMES, Dimensions
from traceview.links_measured.analysis import MEASURED_NOTE, LinksMeasured
from traceview.moe.analysis import MoeBalance
from traceview.nccl.join import NcclJoin
from traceview.prediction.gamma import Prediction


@dataclass(frozen=True)
class Measured:
    """The results the facts are read from: the time budget, and each other analysis when it ran."""

    budget: TimeBudget
    crossrank: CrossRank | None = None
    collectives: CollectiveAnalysis | None = None
    prediction: Prediction | None = None
    nccl: NcclJoin | None = None
    timelines: tuple[str, ...] = ("device",)  # device | host: the timelines the budget was measured on
    dimensions: Dimensions | None = None
    moe: MoeBalance | None = None
    links: LinksMeasured | None = None


@dataclass(frozen=True)
class Facts:
    """Named numbers and named words about one run; `facts[name]` reads a number."""

    numbers: Mapping[str, float] = field(default_factory=dict)
    words: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.numbers[name]

    def __contains__(self, name: object) -> bool:
        return name in self.numbers or name in self.words

    def word(self, name: str) -> str:
        """The named word (KeyError when no analysis said it)."""
        return self.words[name]


Found = tuple[dict[str, float], dict[str, str]]


def duration_text(facts: Facts, name: str) -> str:
    """The named duration (us) for a sentence: milliseconds from 1 ms up, else microseconds."""
    value = facts[name]
    return f"{value / 1000:.2f} ms" if abs(value) >= 1000 or value == 0 else f"{value:.1f} us"


def finite(values: Mapping[str, object]) -> dict[str, float]:
    """The entries of `values` that are finite numbers, as floats (bools are not numbers here)."""
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def budget_facts(measured: Measured) -> Found:
    """Run medians of the time budget, shares of the median step, and the slowest rank's compute."""
    facts = finite(measured.budget.run_median)
    step = facts.get("step_us", 0.0)
    if step > 0:
        for name in ("exposed_comm_us", "idle_us", "comm_us", "comp_us"):
            if name in facts:
                facts[name.replace("_us", "_share")] = facts[name] / step
    worker = "GPU" if "device" in measured.timelines or not measured.timelines else "host"
    return facts | _slow_rank_facts(measured.budget.per_rank), {"worker": worker}


def _slow_rank_facts(per_rank: pl.DataFrame) -> dict[str, float]:
    ranked = per_rank.drop_nulls("comp_us").sort(["comp_us", "rank"], descending=[True, False])
    if ranked.height < 2:
        return {}
    return finite(
        {
            "slow_rank": ranked.item(0, "rank"),
            "slow_rank_comp_us": ranked.item(0, "comp_us"),
            "median_rank_comp_us": ranked.get_column("comp_us").median(),
            "ranks": ranked.height,
        }
    )


STRAGGLER_NUMBERS = {
    "straggler_rank": "rank",
    "straggler_last_share": "last_share",
    "straggler_times_last": "times_last",
    "straggler_instances": "instances",
    "straggler_group_size": "group_size",
    "straggler_median_lateness_us": "median_lateness_us",
    "straggler_cost_us": "lateness_cost_us",
    "straggler_cost_share": "lateness_cost_share",
    "straggler_comp_excess_us": "comp_excess_us",
}
"""Fact name -> `CrossRank.per_rank` column, for the straggler with the most at stake."""


def crossrank_facts(measured: Measured) -> Found:
    """Stragglers (the one with the most at stake first), unresolvable ranks, peers' waiting, mismatches."""
    cross = measured.crossrank
    if cross is None or cross.per_rank.height == 0:
        return {}, {}
    numbers, words = _straggler_facts(cross.per_rank)
    numbers |= finite({"median_wait_share": cross.per_rank.get_column("wait_share").median()})
    if "resolvable" in cross.per_rank.columns:
        unresolved = cross.per_rank.filter(~pl.col("resolvable").fill_null(True))
        numbers["unresolvable_ranks"] = float(unresolved.height)
    mismatch_numbers, mismatch_words = _mismatch_facts(cross.mismatches)
    return numbers | mismatch_numbers, words | mismatch_words


def _straggler_facts(per_rank: pl.DataFrame) -> Found:
    flagged = per_rank.filter(pl.col("straggler").fill_null(False))
    if flagged.height == 0:
        return {"stragglers": 0.0, "straggler_rank": -1.0}, {}
    order = [c for c in ("lateness_cost_us", "last_share") if c in flagged.columns]
    top = flagged.sort([*order, "rank"], descending=[*(True for _ in order), False], nulls_last=True).row(
        0, named=True
    )
    numbers = finite({fact: top.get(column) for fact, column in STRAGGLER_NUMBERS.items()})
    words = {"straggler_cause": str(top["cause"])} if top.get("cause") else {}
    return {"stragglers": float(flagged.height)} | numbers, words


def _mismatch_facts(mismatches: pl.DataFrame) -> Found:
    if mismatches.height == 0:
        return {"mismatches": 0.0}, {}
    first = mismatches.sort([c for c in ("step", "group", "rank") if c in mismatches.columns]).row(
        0, named=True
    )
    numbers = finite({"mismatches": mismatches.height, "mismatch_step": first.get("step")})
    numbers |= finite({"mismatch_rank": first.get("rank")})
    words = {
        k: str(first[c])
        for k, c in (("mismatch_group", "group"), ("mismatch_detail", "detail"))
        if first.get(c)
    }
    return numbers, words


def prediction_facts(measured: Measured) -> Found:
    """Predicted gamma, measured / predicted, the dominant factor; or the input the prediction misses."""
    prediction = measured.prediction
    if prediction is None:
        return {}, {}
    numbers = finite({name: prediction.run.get(name) for name in ("gamma_pred", "gamma_ratio")})
    names = {column: name for column, name, _, _ in prediction.factors}
    words = (
        {"dominant_factor": names.get(prediction.dominant, prediction.dominant)}
        if prediction.dominant
        else {}
    )
    missing = getattr(prediction, "missing_input", None)
    if missing:
        words["prediction_missing"] = str(missing)
    return numbers, words


def collectives_facts(measured: Measured) -> Found:
    """How many distinct kernel names count as communication only because they look like it."""
    collectives = measured.collectives
    if collectives is None:
        return {}, {}
    suspects = collectives.suspected_comm_kernels
    if suspects.height == 0:
        return {"suspected_kernels": 0.0}, {}
    return {"suspected_kernels": float(suspects.height)}, {"suspected_names": ", ".join(suspects["name"][:3])}


def nccl_facts(measured: Measured) -> Found:
    """What the NCCL logs flag for the verdict (degraded transports, link overrides), as one note."""
    nccl = measured.nccl
    if nccl is None or not nccl.verdict_flags:
        return {}, {}
    return {"nccl_flags": float(len(nccl.verdict_flags))}, {"nccl_note": " ".join(nccl.verdict_flags)}


def dimension_facts(measured: Measured) -> Found:
    """The named dimension that exposes the most per step: its exposed time, waiting, T_comm, busbw and
    confidence, how many dimensions are named; its name, link and advice; the first volume gap's cause."""
    found = measured.dimensions
    top = found.costliest if found is not None else None
    if found is None or top is None:
        return {}, {}
    numbers = finite(
        {
            "dimensions_named": found.named.height,
            "dimension_exposed_us": top["exposed_us"],
            "dimension_comm_us": top["comm_us"],
            "dimension_wait_us": top["wait_us"],
            "dimension_confidence": top["confidence"],
            "dimension_busbw_Bps": top["busbw_Bps"],
        }
    )
    step = measured.budget.run_median.get("step_us")
    if step:
        numbers["dimension_exposed_share"] = numbers["dimension_exposed_us"] / step
    dimension = str(top["dimension"])
    words = {
        "dimension": dimension,
        "dimension_name": DIMENSION_NAMES.get(dimension, dimension),
        "dimension_advice": DIMENSION_ADVICE.get(dimension, ""),
        "dimension_link": str(top.get("link") or "an unknown link"),
    }
    gaps = found.volumes.filter(
        ((found.volumes["ratio"] - 1).abs() > 0.1) | found.volumes["cause"].str.contains("latency-bound")
    )
    if gaps.height:
        numbers["volume_gaps"] = float(gaps.height)
        words["volume_cause"] = str(gaps.item(0, "cause"))
        words["volume_of"] = f"{gaps.item(0, 'dimension')} {gaps.item(0, 'collectives')}"
    return numbers, words


def moe_facts(measured: Measured) -> Found:
    """The most imbalanced expert-parallel group: its imbalance, hottest rank, the wait at its all-to-alls."""
    moe = measured.moe
    if moe is None or not moe.measurable:
        return {}, {}
    top = moe.per_group.row(0, named=True)
    numbers = finite({"moe_imbalance": top["imbalance"], "moe_wait_us": top.get("wait_us")})
    hottest = top.get("hottest_ranks") or []
    if hottest:
        numbers["moe_hottest_rank"] = float(hottest[0])
        numbers |= finite({"moe_hottest_share": (top.get("hottest_shares") or [None])[0]})
    return numbers, {"moe_sentence": moe.sentence}


def links_facts(measured: Measured) -> Found:
    """Whether the prediction uses the links measured in the run (a note beside the verdict)."""
    links = measured.links
    if links is None or not links.used:
        return {}, {}
    return {}, {"links_note": MEASURED_NOTE}


FACT_SOURCES: tuple[Callable[[Measured], Found], ...] = (
    budget_facts,
    crossrank_facts,
    prediction_facts,
    collectives_facts,
    nccl_facts,
    dimension_facts,
    moe_facts,
    links_facts,
)
"""One function per analysis; an analysis adds its own row (returning empty facts when it did not run)."""


def facts_of(measured: Measured) -> Facts:
    """Every fact every source knows about the run, names sorted."""
    numbers: dict[str, float] = {}
    words: dict[str, str] = {}
    for source in FACT_SOURCES:
        found_numbers, found_words = source(measured)
        numbers |= found_numbers
        words |= found_words
    return Facts(dict(sorted(numbers.items())), dict(sorted(words.items())))
