"""Recommendations: rules over the run's facts (`traceview.verdict.facts`), each sentence citing the numbers
that fired it and what fixing it would save.

`RULES` is a table: a rule names the facts it needs, a condition, a sentence and a score (the share of the
step at stake, used to rank). A rule whose facts are missing does not fire, so rules for analyses that did not
run stay silent. The first recommendation (highest score) is the report's top recommendation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from traceview.core.records import record
from traceview.critical_path.analysis import SMALL_SHARE
from traceview.critical_path.categories import COMM_TRANSFER
from traceview.verdict._comm_advice import (
    HOST_COMM_SHARE_MIN,
    dimension_bound,
    exposed_sentence,
    exposed_transfer_share,
    gamma_sentence,
    hideable,
    hideable_or_unbounded,
    host_comm_sentence,
    host_share,
    moving_share,
    overlap_sentence,
    unhidden_transfer_share,
)
from traceview.verdict._idle_advice import idle_sentence
from traceview.verdict._path_stake import stake
from traceview.verdict._rank_advice import (
    DIMENSION_SHARE_MIN,
    DIMENSION_WORDS,
    MOE_IMBALANCE_MIN,
    dimension_sentence,
    dimension_wait_share,
    has_words,
    mismatch_sentence,
    moe_sentence,
    slow_rank_excess,
    slow_rank_sentence,
    straggler_sentence,
    suspected_sentence,
    volume_sentence,
)
from traceview.verdict.facts import Facts, duration_text
from traceview.verdict.kinds import KIND_ADVICE, withheld

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
SLOW_RANK_UNWAITED_SCORE = 0.05
"""Weight of a slow rank's excess compute when its peers do not wait for it (it is no straggler): the step
does not pay for it now."""


@record
class Recommendation:
    """One fired rule: its id, the section it belongs to, the sentence, the cited facts and its score."""

    rule: str
    section: str
    sentence: str
    facts: tuple[tuple[str, float], ...]
    score: float
    saved_us: float | None = (
        None  # what fixing it would save per median step (the path's time, else score x step)
    )


@record
class Rule:
    """A recommendation rule over facts: fires when every fact in `needs` is known and `holds` is true."""

    id: str
    section: str
    needs: tuple[str, ...]
    holds: Callable[[Facts], bool]
    sentence: Callable[[Facts], str]
    score: Callable[[Facts], float]
    saved: Callable[[Facts], float | None] | None = None
    """What fixing the cause saves per median step (us), measured without the path's categories (a rank's
    stake from the replay or the peers' paths, a process group's time on the path: `_stake_facts`); None
    where it was not measured (the score times the step stands in)."""
    path: tuple[str, ...] = ()
    """The critical path's categories that hold this rule's cause (`idle`: the idle's, summed per (rank,
    step)): its score and saved_us when the path was computed (`traceview.verdict._path_stake`)."""
    bound: Callable[[Facts], float] | None = None
    """The most fixing the cause can save per median step (us), whatever the path holds: overlap hides
    communication only under compute that is not already under communication (`hideable_us`). A bounded
    rule whose stake falls under `SMALL_SHARE` of the step stays out."""
    keeps_small: bool = False
    """Kept under `SMALL_SHARE` of the step: its sentence says how little its peers wait for it."""


_ms = duration_text


TRANSFER = (COMM_TRANSFER,)
"""The path's category of communication nothing hides that is not waiting for a peer."""
KIND_ADVICE_PATHS = {"exposed-communication-inference": TRANSFER}
"""The path's categories of the run kinds' advice rows that have one."""


KIND_ADVICE_BOUNDS: dict[str, Callable[[Facts], float]] = {
    "exposed-communication-inference": hideable_or_unbounded
}
"""The bound of the run kinds' advice rows that advise overlap (`Rule.bound`)."""
RULES: tuple[Rule, ...] = (
    Rule(
        "exposed-communication",
        "time-budget",
        ("exposed_comm_share", "exposed_comm_us", "step_us", "exposed_gamma", "hideable_us"),
        lambda f: exposed_transfer_share(f) >= EXPOSED_SHARE_MIN,
        exposed_sentence,
        exposed_transfer_share,
        path=TRANSFER,
        bound=hideable,
    ),
    Rule(
        "low-overlap",
        "time-budget",
        ("overlap_ratio", "comm_us", "comm_share", "hideable_us"),
        lambda f: f["overlap_ratio"] < OVERLAP_RATIO_MAX and unhidden_transfer_share(f) >= COMM_SHARE_MIN,
        overlap_sentence,
        lambda f: unhidden_transfer_share(f) * 0.9,
        path=TRANSFER,
        bound=hideable,
    ),
    Rule(
        "idle-gpu",
        "time-budget",
        ("idle_share", "idle_us", "step_us"),
        lambda f: f["idle_share"] >= IDLE_SHARE_MIN,
        idle_sentence,
        lambda f: f["idle_share"],
        lambda f: f.numbers.get("path_idle_us", f["idle_us"]),
        path=("idle",),  # path_idle_us: the median of the idle's categories summed per (rank, step)
    ),
    Rule(
        "communication-bound",
        "time-budget",
        ("gamma", "comm_us", "comp_us", "comm_share"),
        lambda f: f["gamma"] > 1.0 and moving_share(f) >= COMM_SHARE_MIN,
        gamma_sentence,
        moving_share,
        path=TRANSFER,
    ),
    Rule(
        "host-communication",
        "time-budget",
        ("comm_host_us", "comm_us", "comm_share"),
        lambda f: (
            f.words.get("worker") == "GPU"  # on a host timeline (no device) there is no other place to run
            and host_share(f) >= HOST_COMM_SHARE_MIN
            and f["comm_share"] >= COMM_SHARE_MIN
        ),
        host_comm_sentence,
        lambda f: f["comm_share"] * host_share(f),
        path=TRANSFER,
    ),
    Rule(
        "slow-rank-compute",
        "time-budget",
        ("slow_rank", "slow_rank_comp_us", "median_rank_comp_us"),
        lambda f: (
            f["median_rank_comp_us"] > 0
            and slow_rank_excess(f) >= SLOW_RANK_EXCESS_MIN
            and f.numbers.get("straggler_rank") != f["slow_rank"]
        ),
        slow_rank_sentence,
        lambda f: slow_rank_excess(f) * (0.5 if "slow_rank_instances" not in f else SLOW_RANK_UNWAITED_SCORE),
        lambda f: f.numbers.get("slow_rank_saved_us"),
        keeps_small=True,  # its sentence says its peers' paths wait for it a sliver of the step
    ),
    Rule(
        "straggler",
        "cross-rank",
        (
            "straggler_rank",
            "straggler_cost_us",
            "straggler_cost_share",
            "straggler_times_last",
            "straggler_instances",
            "straggler_group_size",
            "straggler_median_lateness_us",
        ),
        lambda f: f["straggler_rank"] >= 0,
        straggler_sentence,
        lambda f: f["straggler_cost_share"],
        lambda f: f.numbers.get("straggler_saved_us"),
    ),
    Rule(
        "call-mismatch",
        "cross-rank",
        ("mismatches",),
        lambda f: f["mismatches"] > 0,
        mismatch_sentence,
        lambda f: 1.0,
        lambda f: f.numbers.get("path_step_us"),  # a job that mismatches hangs: the whole step at stake
    ),
    Rule(
        "dimension-cost",
        "dimensions",
        ("dimension_exposed_share", "dimension_exposed_us", "dimension_wait_us"),
        lambda f: f["dimension_exposed_share"] >= DIMENSION_SHARE_MIN and has_words(f, DIMENSION_WORDS),
        dimension_sentence,
        lambda f: max(0.0, f["dimension_exposed_share"] - dimension_wait_share(f)) * 0.95,
        lambda f: f.numbers.get("dimension_saved_us"),
        bound=dimension_bound,
    ),
    Rule(
        "dimension-volume",
        "dimensions",
        ("volume_gaps",),
        lambda f: f["volume_gaps"] > 0 and "volume_cause" in f,
        volume_sentence,
        lambda f: 0.02,
        lambda f: f.numbers.get("volume_saved_us"),
    ),
    Rule(
        "moe-imbalance",
        "moe",
        ("moe_imbalance", "moe_hottest_rank", "moe_hottest_share"),
        lambda f: f["moe_imbalance"] >= MOE_IMBALANCE_MIN,
        moe_sentence,
        lambda f: (
            f.numbers.get("moe_wait_us", 0.0) / f.numbers["step_us"] if f.numbers.get("step_us") else 0.05
        ),
        lambda f: f.numbers.get("moe_saved_us"),
    ),
    Rule(
        "suspected-communication",
        "collectives",
        ("suspected_kernels",),
        lambda f: f["suspected_kernels"] > 0 and "suspected_names" in f,
        suspected_sentence,
        lambda f: 0.01,
        lambda f: f.numbers.get("suspected_saved_us"),
    ),
    *(
        Rule(*row, path=KIND_ADVICE_PATHS.get(row[0], ()), bound=KIND_ADVICE_BOUNDS.get(row[0]))
        for row in KIND_ADVICE
    ),
)
"""The rules, each a row; an analysis adds rows for its own facts (the run kinds theirs, `KIND_ADVICE`)."""


def _step_us(facts: Facts) -> float | None:
    """The median step the stakes are shares of: the path's, else the budget's."""
    return facts.numbers.get("path_step_us", facts.numbers.get("step_us"))


def _stake(rule: Rule, facts: Facts) -> tuple[float, float | None, bool, str]:
    """(score, saved_us, measured, clause): from the path's categories where the rule names some (the
    clause cites their top holder), else from its measured saving (`Rule.saved`) over the step, else its
    own score (saved_us: the score times the step; not measured)."""
    at_stake = stake(rule.path, facts)
    if at_stake is not None:
        return at_stake.share, at_stake.held_us, True, at_stake.clause
    step = _step_us(facts)
    measured = rule.saved(facts) if rule.saved is not None else None
    if measured is not None and step:
        return measured / step, measured, True, ""
    score = rule.score(facts)
    return score, None if step is None else score * step, False, ""


def _bounded(rule: Rule, facts: Facts, score: float, saved: float | None) -> tuple[float, float | None]:
    """(score, saved_us) capped by the rule's `bound` (us per median step; its share of the step)."""
    step = _step_us(facts) or 0.0
    if rule.bound is None or step <= 0:
        return score, saved
    limit = rule.bound(facts)
    return min(score, limit / step), (None if saved is None else min(saved, limit))


def _fired(rule: Rule, facts: Facts) -> Recommendation | None:
    """The rule's recommendation, its score and saved_us measured (`_stake`), both capped by its `bound`; a
    measured or bounded stake under `SMALL_SHARE` of the step: none (unless the rule `keeps_small`)."""
    score, saved, measured, clause = _stake(rule, facts)
    score, saved = _bounded(rule, facts, score, saved)
    if (measured or rule.bound is not None) and score < SMALL_SHARE and not rule.keeps_small:
        return None
    sentence = rule.sentence(facts)
    cited = clause and "on the critical path" not in sentence.lower()
    return Recommendation(
        rule.id,
        rule.section,
        sentence + (clause if cited else ""),
        tuple((n, facts[n]) for n in (*rule.needs, *_cited(rule, facts))),
        score,
        saved,
    )


def _cited(rule: Rule, facts: Facts) -> tuple[str, ...]:
    """The measured stakes a rule cites beside its needs (`<rule>_saved_us` facts its sentence states)."""
    return tuple(n for n in CITED_STAKES.get(rule.id, ()) if n in facts.numbers and n not in rule.needs)


CITED_STAKES: Mapping[str, tuple[str, ...]] = {
    "straggler": ("straggler_saved_us",),
    "slow-rank-compute": ("slow_rank_saved_us",),
    "dimension-cost": ("dimension_saved_us",),
    "dimension-volume": ("volume_saved_us",),
    "moe-imbalance": ("moe_saved_us",),
    "suspected-communication": ("suspected_saved_us",),
}
"""The measured stake each rule cites in its facts (`Recommendation.facts`), where known."""


def _rank_key(item: Recommendation) -> tuple[float, float, str]:
    """Most saved first (a recommendation without a step, by score after them), then the score, then the
    rule id."""
    saved = item.saved_us if item.saved_us is not None else float("-inf")
    return (-saved, -item.score, item.rule)


def recommendations(facts: Facts, rules: tuple[Rule, ...] = RULES) -> tuple[Recommendation, ...]:
    """The rules that fire on `facts`, the most saved per median step first (ties by score, then rule id);
    the run's kinds withhold the advice that does not apply to them (`traceview.verdict.kinds`)."""
    held = withheld(facts)
    ready = (r for r in rules if all(n in facts for n in r.needs) and r.id not in held and r.holds(facts))
    fired = [found for found in (_fired(rule, facts) for rule in ready) if found is not None]
    return tuple(sorted(fired, key=_rank_key))


@record
class Recommendations:
    """The facts every source knew about the run and the rules they fired, highest score first."""

    facts: Mapping[str, float]
    items: tuple[Recommendation, ...]

    @property
    def top(self) -> Recommendation | None:
        """The recommendation with the most at stake, if any fired."""
        return self.items[0] if self.items else None


def recommend(facts: Facts) -> Recommendations:
    """The recommendations the run's facts fire, with the facts' numbers."""
    return Recommendations(facts.numbers, recommendations(facts))
