"""Recommendations: rules over the run's facts (`traceview.verdict.facts`), each sentence citing the numbers
that fired it and what fixing it would save.

`RULES` is a table: a rule names the facts it needs, a condition, a sentence and a score (the share of the step
at stake, used to rank). A rule whose facts are missing does not fire, so rules for analyses that did not run
stay silent. The first recommendation (highest score) is the report's top recommendation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from traceview.verdict.facts import Facts, duration_text

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
        f"({_ms(f, 'exposed_comm_us')} of {_ms(f, 'step_us')}; exposed gamma {f['exposed_gamma']:.2f}{of_which}): "
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


def _idle_sentence(f: Facts) -> str:
    return (
        f"The {f.word('worker') if 'worker' in f else 'GPU'} is idle {f['idle_share']:.0%} of the median step "
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
    cause = f.word("straggler_cause") if "straggler_cause" in f else "unexplained"
    return (
        f"Rank {f['straggler_rank']:.0f}'s late arrival costs {_ms(f, 'straggler_cost_us')} per step "
        f"({f['straggler_cost_share']:.0%} of the step): it arrives last at {f['straggler_last_share']:.0%} of the "
        f"{f['straggler_instances']:.0f} collectives it joins (1 in {f['straggler_group_size']:.0f} would be "
        f"chance; median lateness {_ms(f, 'straggler_median_lateness_us')}); likely cause: {cause}. "
        f"{CAUSE_ADVICE.get(cause, CAUSE_ADVICE['unexplained'])}"
    )


CAUSE_ADVICE: Mapping[str, str] = {
    "slow compute": "Check its GPU (clocks, thermals, ECC) and its share of the data.",
    "late host step entry": "Its host starts each step late: look at its input pipeline and CPU contention.",
    "late launch": "Its host launches the collective late: look for synchronisations and CPU work before it.",
    "network": "Its link is slower than its peers': check its NIC, cabling and switch port.",
    "unexplained": "Nothing on its own timeline explains it: compare its host and devices with its peers'.",
}
"""One line of advice per straggler cause (`traceview.across_ranks.stragglers`)."""


def _mismatch_sentence(f: Facts) -> str:
    where = f" in process group {f.word('mismatch_group')}" if "mismatch_group" in f else ""
    step = f" at step {f['mismatch_step']:.0f}" if "mismatch_step" in f else ""
    return (
        f"Make every rank call the same collectives in the same order: {f['mismatches']:.0f} call(s) differ"
        f"{where}{step}. A mismatch hangs the job at scale and pairs unrelated calls in every figure across ranks."
    )


def _suspected_sentence(f: Facts) -> str:
    return (
        f"{f['suspected_kernels']:.0f} kernel name(s) count as communication only because they look like it "
        f"({f.word('suspected_names')}): confirm them with --comm-pattern, or say they are compute with "
        f"--compute-pattern."
    )


DIMENSION_SHARE_MIN = 0.05
"""A dimension exposing this share of the median step or more is worth its own recommendation."""
MOE_IMBALANCE_MIN = 1.2
"""An expert-parallel group whose busiest rank receives this many times the mean is imbalanced."""


DIMENSION_WORDS = ("dimension_name", "dimension_advice", "dimension_link")


def _has(f: Facts, words: tuple[str, ...]) -> bool:
    return all(word in f for word in words)


def _dimension_sentence(f: Facts) -> str:
    name = f.word("dimension_name")
    busbw = f.numbers.get("dimension_busbw_Bps")
    achieved = f", achieved busbw {busbw / 1e9:.3g} GB/s" if busbw else ""
    return (
        f"{name[0].upper()}{name[1:]} exposes {_ms(f, 'dimension_exposed_us')} per step "
        f"({f['dimension_exposed_share']:.0%} of the step; {_ms(f, 'dimension_wait_us')} of its time waiting "
        f"for peers{achieved} on {f.word('dimension_link')}): {f.word('dimension_advice')}."
    )


def _volume_sentence(f: Facts) -> str:
    of = f" ({f.word('volume_of')})" if "volume_of" in f else ""
    return f"Expected against measured volume{of}: {f.word('volume_cause')}."


def _moe_sentence(f: Facts) -> str:
    wait = (
        f" and its peers wait {_ms(f, 'moe_wait_us')} per step at the all-to-alls"
        if "moe_wait_us" in f
        else ""
    )
    return (
        f"Expert load is imbalanced: rank {f['moe_hottest_rank']:.0f} receives {f['moe_hottest_share']:.2f}x the "
        f"mean of its group{wait}: strengthen the load-balancing loss, cap expert capacity, or re-place the hot "
        f"experts across ranks."
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "exposed-communication",
        "time-budget",
        ("exposed_comm_share", "exposed_comm_us", "step_us", "exposed_gamma"),
        lambda f: _exposed_transfer_share(f) >= EXPOSED_SHARE_MIN,
        _exposed_sentence,
        _exposed_transfer_share,
    ),
    Rule(
        "low-overlap",
        "time-budget",
        ("overlap_ratio", "comm_us", "comm_share"),
        lambda f: f["overlap_ratio"] < OVERLAP_RATIO_MAX and _unhidden_transfer_share(f) >= COMM_SHARE_MIN,
        _overlap_sentence,
        lambda f: _unhidden_transfer_share(f) * 0.9,
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
        lambda f: (
            f["median_rank_comp_us"] > 0
            and _slow_rank_excess(f) >= SLOW_RANK_EXCESS_MIN
            and f.numbers.get("straggler_rank") != f["slow_rank"]
        ),
        _slow_rank_sentence,
        lambda f: _slow_rank_excess(f) * 0.5,
    ),
    Rule(
        "straggler",
        "cross-rank",
        (
            "straggler_rank",
            "straggler_cost_us",
            "straggler_cost_share",
            "straggler_last_share",
            "straggler_instances",
            "straggler_group_size",
            "straggler_median_lateness_us",
        ),
        lambda f: f["straggler_rank"] >= 0,
        _straggler_sentence,
        lambda f: f["straggler_cost_share"],
    ),
    Rule(
        "call-mismatch",
        "cross-rank",
        ("mismatches",),
        lambda f: f["mismatches"] > 0,
        _mismatch_sentence,
        lambda f: 1.0,
    ),
    Rule(
        "dimension-cost",
        "dimensions",
        ("dimension_exposed_share", "dimension_exposed_us", "dimension_wait_us"),
        lambda f: f["dimension_exposed_share"] >= DIMENSION_SHARE_MIN and _has(f, DIMENSION_WORDS),
        _dimension_sentence,
        lambda f: f["dimension_exposed_share"] * 0.95,
    ),
    Rule(
        "dimension-volume",
        "dimensions",
        ("volume_gaps",),
        lambda f: f["volume_gaps"] > 0 and "volume_cause" in f,
        _volume_sentence,
        lambda f: 0.02,
    ),
    Rule(
        "moe-imbalance",
        "moe",
        ("moe_imbalance", "moe_hottest_rank", "moe_hottest_share"),
        lambda f: f["moe_imbalance"] >= MOE_IMBALANCE_MIN,
        _moe_sentence,
        lambda f: (
            f.numbers.get("moe_wait_us", 0.0) / f.numbers["step_us"] if f.numbers.get("step_us") else 0.05
        ),
    ),
    Rule(
        "suspected-communication",
        "collectives",
        ("suspected_kernels",),
        lambda f: f["suspected_kernels"] > 0 and "suspected_names" in f,
        _suspected_sentence,
        lambda f: 0.01,
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


def recommend(facts: Facts) -> Recommendations:
    """The recommendations the run's facts fire, with the facts' numbers."""
    return Recommendations(facts.numbers, recommendations(facts))
