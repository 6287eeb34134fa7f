"""Where each recommendation's evidence is on the page: a table from rule to the figure that proves it, and,
for a rule that names a rank, the drill-down cell of that rank in the median step (its step beside the
median rank's). A figure the page does not draw falls back to the rule's section."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from traceview.reduce.analysis import RunAnalysis
from traceview.verdict.recommend import Recommendation

RULE_FIGURES: Mapping[str, tuple[str, ...]] = {
    "exposed-communication": ("fig-budget",),
    "low-overlap": ("fig-budget",),
    "idle-gpu": ("fig-idle-causes", "fig-budget"),
    "communication-bound": ("fig-gamma",),
    "slow-rank-compute": ("fig-budget",),
    "straggler": ("fig-lateness", "fig-wait"),
    "dimension-cost": ("fig-dimensions",),
    "dimension-volume": ("fig-dimensions",),
    "moe-imbalance": ("fig-moe-matrix",),
}
"""Per rule, the figures that show its cited facts, the first one drawn wins."""
RULE_RANK_FACTS: Mapping[str, str] = {"slow-rank-compute": "slow_rank", "straggler": "straggler_rank"}
"""Per rule that names a rank, the fact holding it."""
SECTION_OF_RULE_SECTION: Mapping[str, str] = {"cross-rank": "across-ranks", "time-budget": "time-budget"}


def evidence_links(
    item: Recommendation, analysis: RunAnalysis, drawn: Collection[str]
) -> list[tuple[str, str]]:
    """(href, link text) of `item`'s evidence: its figure (`drawn` holds the page's figure ids), then the
    drill-down cell of the rank it names."""
    figure = next((f for f in RULE_FIGURES.get(item.rule, ()) if f in drawn), None)
    target = figure or SECTION_OF_RULE_SECTION.get(item.section, item.section)
    links = [(f"#{target}", "see the figure" if figure else "see the section")]
    facts = dict(item.facts)
    rank_fact = RULE_RANK_FACTS.get(item.rule)
    step = median_step(analysis)
    if rank_fact in facts and step is not None and "fig-heatmap" in drawn:
        rank = int(facts[rank_fact])
        links.append((f"#cell={rank}-{step}", f"rank {rank} in step {step} beside the median rank"))
    return links


def median_step(analysis: RunAnalysis) -> int | None:
    """The step the page's timeline opens on (the median step), else the first step analysed."""
    if analysis.timeline is not None and analysis.timeline.median_step is not None:
        return int(analysis.timeline.median_step)
    steps = analysis.budget.per_step.get_column("step")
    return int(steps.min()) if steps.len() else None  # type: ignore[arg-type]


FACT_FIGURES: Mapping[str, str] = {
    "gamma": "fig-gamma",
    "gamma_pred": "fig-gamma-scaling",
    "exposed_comm_share": "fig-budget",
    "exposed_gamma": "fig-gamma",
    "idle_share": "fig-idle-causes",
    "straggler_rank": "fig-lateness",
}
"""Per figure of the verdict panel (a fact's name), the figure that shows it across ranks."""


def fact_figure(fact: str, drawn: Collection[str]) -> str | None:
    """`#fig-...` for the verdict panel's `fact` when the page draws that figure."""
    figure = FACT_FIGURES.get(fact)
    return f"#{figure}" if figure in drawn else None
