"""Recommendations: rules over the run's facts (`traceview.verdict.facts`), each sentence citing the numbers
that fired it and what fixing it would save.

`RULES` is a table: a rule names the facts it needs, a condition, a sentence and a score (the share of the
step at stake, used to rank). A rule whose facts are missing does not fire, so rules for analyses that did not
run stay silent. The first recommendation (highest score) is the report's top recommendation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from traceview.critical_path.categories import COMM_TRANSFER
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Rule:
    """A recommendation rule over facts: fires when every fact in `needs` is known and `holds` is true."""

    id: str
    section: str
    needs: tuple[str, ...]
    holds: Callable[[Facts], bool]
    sentence: Callable[[Facts], str]
    score: Callable[[Facts], float]
    saved: Callable[[Facts], float] | None = None
    path: tuple[str, ...] = ()
    """The critical path's categories that hold this rule's cause (`idle`: the idle's, summed per (rank,
    step)): its score and saved_us when the path was computed (`traceview.verdict._path_stake`)."""


_ms = duration_text


def _waiting_share(f: Facts) -> float:
    """The share of the median step a median rank spends waiting at collectives (0 when not measured)."""
    return min(f.numbers.get("median_wait_share", 0.0), f["exposed_comm_share"])


def _exposed_transfer_share(f: Facts) -> float:
    """Exposed communication that is not waiting for late peers: what overlap could still hide."""
    return f["exposed_comm_share"] - _waiting_share(f)


def _exposed_sentence(f: Facts) -> str:
    waiting = _waiting_share(f)
    of_which = f", of which {waiting:.0%} of the step is waiting for late peers" if waiting >= 0.005 else ""
    return (
        f"{f['exposed_comm_share']:.0%} of the median step is exposed communication "
        f"({_ms(f, 'exposed_comm_us')} of {_ms(f, 'step_us')}; exposed gamma "
        f"{f['exposed_gamma']:.2f}{of_which}): "
        f"start collectives earlier under the backward pass (DDP bucket order, `bucket_cap_mb`) "
        f"or raise the local batch so compute covers them; hiding it all would save up to "
        f"{_exposed_transfer_share(f):.0%} of the step."
    )


def _unhidden_transfer_share(f: Facts) -> float:
    """Communication outside compute, less the time spent waiting for late peers, as a share of the step."""
    return f["comm_share"] * (1.0 - f["overlap_ratio"]) - f.numbers.get("median_wait_share", 0.0)


def _overlap_sentence(f: Facts) -> str:
    return (
        f"Only {f['overlap_ratio']:.0%} of communication time runs under compute (overlap ratio "
        f"{f['overlap_ratio']:.2f}, {_ms(f, 'comm_us')} of communication per step): issue collectives "
        f"asynchronously while independent compute remains, instead of waiting on each."
    )


def _moving_share(f: Facts) -> float:
    """The share of the step that communication takes, less the median rank's waiting for late peers."""
    return max(0.0, f["comm_share"] - f.numbers.get("median_wait_share", 0.0))


def _gamma_sentence(f: Facts) -> str:
    waiting = f.numbers.get("median_wait_share", 0.0)
    of_which = f", of which {waiting:.0%} of the step is waiting for late peers" if waiting >= 0.005 else ""
    return (
        f"Measured gamma is {f['gamma']:.2f} (T_comm {_ms(f, 'comm_us')} against "
        f"T_comp {_ms(f, 'comp_us')} per median step{of_which}): communication sets the pace even with "
        f"perfect "
        f"overlap; move fewer bytes (bf16 gradients), raise the local batch, or use faster links."
    )


HOST_COMM_SHARE_MIN = 0.5
"""Communication of which at least this share runs on the host (gloo, MPI) is said to run there."""


def _host_share(f: Facts) -> float:
    """The share of T_comm that runs on the host (median step)."""
    return f["comm_host_us"] / f["comm_us"] if f["comm_us"] > 0 else 0.0


def _host_comm_sentence(f: Facts) -> str:
    return (
        f"{_host_share(f):.0%} of the communication ({_ms(f, 'comm_host_us')} of {_ms(f, 'comm_us')} per "
        f"median "
        f"step) runs on the host (gloo or MPI), the data copied through host memory: a device backend (NCCL, "
        f"RCCL) moves it over the GPUs' own links; keep gloo for CPU tensors only."
    )


TRANSFER = (COMM_TRANSFER,)
"""The path's category of communication nothing hides that is not waiting for a peer."""
KIND_ADVICE_PATHS = {"exposed-communication-inference": TRANSFER}
"""The path's categories of the run kinds' advice rows that have one."""
RULES: tuple[Rule, ...] = (
    Rule(
        "exposed-communication",
        "time-budget",
        ("exposed_comm_share", "exposed_comm_us", "step_us", "exposed_gamma"),
        lambda f: _exposed_transfer_share(f) >= EXPOSED_SHARE_MIN,
        _exposed_sentence,
        _exposed_transfer_share,
        path=TRANSFER,
    ),
    Rule(
        "low-overlap",
        "time-budget",
        ("overlap_ratio", "comm_us", "comm_share"),
        lambda f: f["overlap_ratio"] < OVERLAP_RATIO_MAX and _unhidden_transfer_share(f) >= COMM_SHARE_MIN,
        _overlap_sentence,
        lambda f: _unhidden_transfer_share(f) * 0.9,
        path=TRANSFER,
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
        lambda f: f["gamma"] > 1.0 and _moving_share(f) >= COMM_SHARE_MIN,
        _gamma_sentence,
        _moving_share,
        path=TRANSFER,
    ),
    Rule(
        "host-communication",
        "time-budget",
        ("comm_host_us", "comm_us", "comm_share"),
        lambda f: (
            f.words.get("worker") == "GPU"  # on a host timeline (no device) there is no other place to run
            and _host_share(f) >= HOST_COMM_SHARE_MIN
            and f["comm_share"] >= COMM_SHARE_MIN
        ),
        _host_comm_sentence,
        lambda f: f["comm_share"] * _host_share(f),
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
        lambda f: f["straggler_cost_us"],
    ),
    Rule(
        "call-mismatch",
        "cross-rank",
        ("mismatches",),
        lambda f: f["mismatches"] > 0,
        mismatch_sentence,
        lambda f: 1.0,
    ),
    Rule(
        "dimension-cost",
        "dimensions",
        ("dimension_exposed_share", "dimension_exposed_us", "dimension_wait_us"),
        lambda f: f["dimension_exposed_share"] >= DIMENSION_SHARE_MIN and has_words(f, DIMENSION_WORDS),
        dimension_sentence,
        lambda f: max(0.0, f["dimension_exposed_share"] - dimension_wait_share(f)) * 0.95,
    ),
    Rule(
        "dimension-volume",
        "dimensions",
        ("volume_gaps",),
        lambda f: f["volume_gaps"] > 0 and "volume_cause" in f,
        volume_sentence,
        lambda f: 0.02,
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
    ),
    Rule(
        "suspected-communication",
        "collectives",
        ("suspected_kernels",),
        lambda f: f["suspected_kernels"] > 0 and "suspected_names" in f,
        suspected_sentence,
        lambda f: 0.01,
    ),
    *(Rule(*row, path=KIND_ADVICE_PATHS.get(row[0], ())) for row in KIND_ADVICE),
)
"""The rules, each a row; an analysis adds rows for its own facts (the run kinds theirs, `KIND_ADVICE`)."""


def _saved_us(rule: Rule, facts: Facts) -> float | None:
    """What fixing the rule's cause would save per median step without the path: the rule's own figure,
    else its score times the median step."""
    if rule.saved is not None:
        return rule.saved(facts)
    step = facts.numbers.get("path_step_us", facts.numbers.get("step_us"))
    return None if step is None else rule.score(facts) * step


def _fired(rule: Rule, facts: Facts) -> Recommendation | None:
    """The rule's recommendation, its score and saved_us from the path where its categories are known (a
    stake under 3% of the step: none), else from its own figures."""
    at_stake = stake(rule.path, facts)
    if at_stake is not None and at_stake.small:
        return None
    sentence = rule.sentence(facts)
    cited = at_stake is not None and "on the critical path" not in sentence.lower()
    return Recommendation(
        rule.id,
        rule.section,
        sentence + (at_stake.clause if cited and at_stake is not None else ""),
        tuple((n, facts[n]) for n in rule.needs),
        rule.score(facts) if at_stake is None else at_stake.share,
        _saved_us(rule, facts) if at_stake is None else at_stake.held_us,
    )


def recommendations(facts: Facts, rules: tuple[Rule, ...] = RULES) -> tuple[Recommendation, ...]:
    """The rules that fire on `facts`, highest score first (ties by rule id); the run's kinds withhold the
    advice that does not apply to them (`traceview.verdict.kinds`)."""
    held = withheld(facts)
    ready = (r for r in rules if all(n in facts for n in r.needs) and r.id not in held and r.holds(facts))
    fired = [found for found in (_fired(rule, facts) for rule in ready) if found is not None]
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


def recommend(facts: Facts) -> Recommendations:
    """The recommendations the run's facts fire, with the facts' numbers."""
    return Recommendations(facts.numbers, recommendations(facts))
