"""The facts of a run: what every analysis measured, as the verdict and the advice read it (docs/metrics.md,
"Verdict").

Facts are named numbers (`Facts.numbers`) and named words (`Facts.words`: a straggler's cause, the factor that
dominates the prediction's gap, the input the prediction misses). `FACT_SOURCES` is a table, one function per
analysis; an analysis that did not run gives no facts, so a rule that needs them stays silent.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from traceview.across_ranks.analysis import ranked_stragglers
from traceview.across_ranks.sentences import cause_text
from traceview.dimensions.analysis import DIMENSION_ADVICE, DIMENSION_NAMES
from traceview.links_measured.analysis import MEASURED_NOTE
from traceview.replay.predicted import predicted_gamma
from traceview.verdict._comm_terms import comm_term_facts
from traceview.verdict._facts_base import Facts, Found, Measured, RunShape, duration_text, finite
from traceview.verdict._stake_facts import group_stake, names_stake, rank_stake
from traceview.verdict.kind_facts import kind_facts
from traceview.verdict.path_advice import path_facts

__all__ = [
    "FACT_SOURCES",
    "Facts",
    "Found",
    "Measured",
    "RunShape",
    "duration_text",
    "facts_of",
    "finite",
]


def budget_facts(measured: Measured) -> Found:
    """Run medians of the time budget, shares of the median step, the compute not already under
    communication (`hideable_us` = T_comp - overlap: the most overlapping communication could hide), and
    the slowest rank's compute."""
    facts = finite(measured.budget.run_median)
    step = facts.get("step_us", 0.0)
    if step > 0:
        for name in ("exposed_comm_us", "idle_us", "comm_us", "comp_us"):
            if name in facts:
                facts[name.replace("_us", "_share")] = facts[name] / step
    if "comp_us" in facts and "overlap_us" in facts:  # compute not already under communication
        facts["hideable_us"] = max(0.0, facts["comp_us"] - facts["overlap_us"])
    worker = "GPU" if "device" in measured.timelines or not measured.timelines else "host"
    return facts | _slow_rank_facts(measured.budget.per_rank), {"worker": worker}


def _slowest(per_rank: pl.DataFrame) -> pl.DataFrame:
    """The budget's ranks, the one with the most compute per median step first (ties: the lower rank)."""
    return per_rank.drop_nulls("comp_us").sort(["comp_us", "rank"], descending=[True, False])


def _slow_rank_facts(per_rank: pl.DataFrame) -> dict[str, float]:
    ranked = _slowest(per_rank)
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
    numbers |= _slow_rank_evidence(_slowest(measured.budget.per_rank), cross.per_rank)
    for prefix, rank in (("straggler", numbers.get("straggler_rank")), ("slow_rank", _slow_rank(measured))):
        if rank is not None and rank >= 0:
            stake = rank_stake(prefix, int(rank), measured.path, measured.replay, cross.stragglers)
            numbers, words = numbers | stake[0], words | stake[1]
    numbers |= finite({"median_wait_share": cross.per_rank.get_column("wait_share").median()})
    if "resolvable" in cross.per_rank.columns:
        unresolved = cross.per_rank.filter(~pl.col("resolvable").fill_null(True))
        numbers["unresolvable_ranks"] = float(unresolved.height)
    mismatch_numbers, mismatch_words = _mismatch_facts(cross.mismatches)
    return numbers | mismatch_numbers, words | mismatch_words


SLOW_RANK_EVIDENCE = {
    "slow_rank_times_last": "times_last",
    "slow_rank_instances": "instances",
    "slow_rank_group_size": "group_size",
}
"""Fact name -> `CrossRank.per_rank` column, for the rank with the most compute: whether its peers wait for
it."""


def _slow_rank(measured: Measured) -> float | None:
    """The rank with the most compute per median step (None with fewer than two ranks)."""
    return _slow_rank_facts(measured.budget.per_rank).get("slow_rank")


def _slow_rank_evidence(slowest: pl.DataFrame, per_rank: pl.DataFrame) -> dict[str, float]:
    """How often the rank with the most compute arrives last (its peers wait for it only then)."""
    if slowest.height < 2:
        return {}
    found = per_rank.filter(pl.col("rank") == slowest.item(0, "rank"))
    if found.height == 0 or not found.item(0, "instances"):
        return {}
    row = found.row(0, named=True)
    return finite({fact: row.get(column) for fact, column in SLOW_RANK_EVIDENCE.items()})


def _straggler_facts(per_rank: pl.DataFrame) -> Found:
    """The first of the stragglers across ranks names (`ranked_stragglers`: the most at stake first)."""
    ranked = ranked_stragglers(per_rank)
    if not ranked:
        return {"stragglers": 0.0, "straggler_rank": -1.0}, {}
    top = per_rank.filter(pl.col("rank") == ranked[0]).row(0, named=True)
    numbers = finite({fact: top.get(column) for fact, column in STRAGGLER_NUMBERS.items()})
    words = (
        {"straggler_cause": str(top["cause"]), "straggler_cause_text": cause_text(top)}
        if top.get("cause")
        else {}
    )
    return {"stragglers": float(len(ranked))} | numbers, words


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
    headline = measured.predicted or predicted_gamma(prediction, None)
    if headline is None:
        return {}, {}
    numbers = finite({"gamma_pred": headline.gamma_pred, "gamma_ratio": headline.gamma_ratio})
    names = {column: name for column, name, _, _ in prediction.factors}
    words = {"gamma_pred_source": headline.source} if "gamma_pred" in numbers else {}
    words |= {"dominant_factor": names.get(headline.dominant, headline.dominant)} if headline.dominant else {}
    missing = getattr(prediction, "missing_input", None)
    if missing:
        words["prediction_missing"] = str(missing)
    words |= {"prediction_doubt": headline.doubt} if headline.doubt else {}
    trust = prediction.trust
    if trust is not None:
        numbers |= finite({"achieved_over_peak": trust.achieved_over_peak})
        words |= {"links_measured": "yes"} if trust.links_measured else {}
    return numbers, words


def collectives_facts(measured: Measured) -> Found:
    """How many distinct kernel names count as communication only because they look like it."""
    collectives = measured.collectives
    if collectives is None:
        return {}, {}
    suspects = collectives.suspected_comm_kernels
    if suspects.height == 0:
        return {"suspected_kernels": 0.0}, {}
    names: list[str] = suspects.get_column("name").to_list()
    numbers = {"suspected_kernels": float(suspects.height)} | names_stake(
        "suspected_saved_us", measured.path, names
    )
    return numbers, {"suspected_names": ", ".join(names[:3])}


def nccl_facts(measured: Measured) -> Found:
    """What the NCCL logs flag for the verdict (degraded transports, link overrides), as one note."""
    nccl = measured.nccl
    if nccl is None or not nccl.verdict_flags:
        return {}, {}
    return {"nccl_flags": float(len(nccl.verdict_flags))}, {"nccl_note": " ".join(nccl.verdict_flags)}


def _call_facts(calls: pl.DataFrame | None) -> Found:
    """The collective calls of the run's first rank, the backend's own ops first (`nccl:all_reduce`)."""
    if calls is None or calls.height == 0:
        return {"host_calls": 0.0}, {}
    first = calls.filter(pl.col("rank") == calls.get_column("rank").min())
    backend = first.filter(pl.col("family") == "backend")
    named = backend if backend.height else first
    listed = ", ".join(f"{row['calls']} {row['name']}" for row in named.head(3).iter_rows(named=True))
    return {"host_calls": float(named.get_column("calls").sum())}, {"host_call_names": listed}


def _capture_facts(per_step: pl.DataFrame) -> dict[str, float]:
    """How many (rank, step) windows capture a CUDA/HIP graph, with their launches and the kernels
    that ran."""
    if "graph_capture" not in per_step.columns or per_step.height == 0:
        return {}
    captures = per_step.filter(pl.col("graph_capture"))
    return {
        "windows": float(per_step.height),
        "capture_steps": float(captures.height),
        "capture_launches": float(captures.get_column("launches").sum()),
        "capture_launches_ran": float(captures.get_column("launches_ran").sum()),
    }


def _extent_facts(shape: RunShape, per_step: pl.DataFrame) -> dict[str, float]:
    """Without step annotations: the median window and the median span of what the profiler recorded."""
    if shape.step_sources != ("none",) or shape.extent is None or per_step.height == 0:
        return {}
    spans = shape.extent.select((pl.col("trace_end_us") - pl.col("trace_start_us")).alias("span"))
    return finite(
        {
            "no_steps": 1.0,
            "trace_span_us": spans.get_column("span").median(),
            "window_us": per_step.get_column("step_us").median(),
        }
    )


def shape_facts(measured: Measured) -> Found:
    """The run's shape: world size, its collective calls, graph capture steps, missing step annotations."""
    shape = measured.shape
    numbers, words = _call_facts(shape.calls)
    numbers |= finite({"world_size": shape.world_size, "grad_off_ranks": shape.grad_off_ranks})
    per_rank = measured.budget.per_rank
    numbers |= {"ranks_read": float(per_rank.get_column("rank").n_unique())} if per_rank.height else {}
    numbers |= _capture_facts(measured.budget.per_step) | _extent_facts(shape, measured.budget.per_step)
    return numbers, words


def kernels_facts(measured: Measured) -> Found:
    """The host side and launches of the median step (`traceview.kernels`), and the kernel-by-kernel sentence
    of the straggler and of the slowest-compute rank when they were explained."""
    kernels = measured.kernels
    if kernels is None:
        return {}, {}
    words: dict[str, str] = {}
    straggler = crossrank_facts(measured)[0].get("straggler_rank", -1.0)
    slow = _slow_rank_facts(measured.budget.per_rank).get("slow_rank", -1.0)
    for found in (found for found in kernels.slow_ranks if found.excess_us > 0):  # its compute explains it
        if found.rank == straggler:
            words["straggler_kernels"] = found.sentence
        if found.rank == slow:
            words["slow_rank_kernels"] = found.sentence
    return kernels.facts(), words


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
    numbers |= group_stake("dimension_saved_us", measured.path, _groups(top.get("groups")), "transfer_us")
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
        of = found.named.filter(pl.col("dimension") == gaps.item(0, "dimension")).get_column("groups")
        groups: list[str] = of.explode().drop_nulls().cast(pl.Utf8).to_list() if of.len() else []
        numbers |= group_stake("volume_saved_us", measured.path, groups, "transfer_us")
    return numbers, words


def _groups(value: object) -> list[str]:
    """The process groups of a dimension row (`groups`: a list of keys; none when missing)."""
    return [str(group) for group in value] if isinstance(value, list) else []


def moe_facts(measured: Measured) -> Found:
    """The most imbalanced expert-parallel group: its imbalance, hottest rank, the wait at its all-to-alls."""
    moe = measured.moe
    if moe is None or not moe.measurable:
        return {}, {}
    top = moe.per_group.row(0, named=True)
    numbers = finite({"moe_imbalance": top["imbalance"], "moe_wait_us": top.get("wait_us")})
    numbers |= group_stake("moe_saved_us", measured.path, [str(top["group"])], "wait_us")
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
    path_facts,
    shape_facts,
    budget_facts,
    crossrank_facts,
    prediction_facts,
    comm_term_facts,
    collectives_facts,
    nccl_facts,
    kernels_facts,
    dimension_facts,
    moe_facts,
    links_facts,
    lambda m: kind_facts(m.budget, m.kernels, m.bubbles),
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
