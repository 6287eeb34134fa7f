"""Recommendations: rules over the run's facts (`traceview.verdict.facts`), each sentence citing the numbers
that fired it and what fixing it would save.

`RULES` is a table: a rule names the facts it needs, a condition, a sentence and a score (the share of the
step at stake, used to rank). A rule whose facts are missing does not fire, so rules for analyses that did not
run stay silent. The first recommendation (highest score) is the report's top recommendation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from traceview.verdict.facts import Facts, duration_text
from traceview.verdict.kinds import KIND_ADVICE, idle_look_at, launch_advice_allowed, withheld
from traceview.verdict.path_advice import CITED_HOLDERS, CITED_SHARE, IDLE_CAUSES, REPLAYED_LAUNCH

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


HOST_EVIDENCE_SHARE = 0.05
"""A host phase taking this share of the median step is cited as evidence for an idle GPU."""
LAUNCH_BOUND_SHARE = 0.3
"""Kernels shorter than their own launch beyond this share of the step's kernels: launch-bound."""


def _launch_evidence(f: Facts) -> str | None:
    kernels, short = f.numbers.get("step_kernels", 0.0), f.numbers.get("step_short_kernels", 0.0)
    if kernels <= 0 or short / kernels < LAUNCH_BOUND_SHARE or not launch_advice_allowed(f):
        return None
    return (
        f"{short:.0f} of its {kernels:.0f} kernels per step run shorter than their launch (the host spends "
        f"{_ms(f, 'step_launch_us')} launching {_ms(f, 'step_device_us')} of GPU work): launch-bound; CUDA "
        f"graphs or fusion (torch.compile) would remove launches"
    )


IDLE_EVIDENCE: tuple[tuple[str, str, Callable[[Facts], str]], ...] = (
    (
        "host_data_loading_us",
        "host_data_loading_spans",
        lambda f: (
            f"the DataLoader takes {_ms(f, 'host_data_loading_us')} per step (more workers, pinned memory, "
            f"prefetching)"
        ),
    ),
    (
        "host_synchronize_us",
        "host_synchronize_spans",
        lambda f: (
            f"{f['host_synchronize_spans']:.0f} synchronisation(s) per step hold the host "
            f"{_ms(f, 'host_synchronize_us')} (device and stream synchronize calls)"
        ),
    ),
    (
        "host_to_host_us",
        "host_to_host_spans",
        lambda f: (
            f"{f['host_to_host_spans']:.0f} read(s) of device values per step (`.item()`, `nonzero`) "
            f"make the host wait for the GPU"
        ),
    ),
)
"""What the host side of the median step (`traceview.kernels.host`) shows: (time fact, count fact, phrase);
cited when the time is at least `HOST_EVIDENCE_SHARE` of the step (a read of device values: whenever one
occurs)."""


def _idle_evidence(f: Facts) -> list[str]:
    step = f.numbers.get("step_us", 0.0)
    found = [
        phrase(f)
        for time, count, phrase in IDLE_EVIDENCE
        if f.numbers.get(count, 0.0) > 0
        and (f.numbers.get(time, 0.0) >= HOST_EVIDENCE_SHARE * step or time == "host_to_host_us")
    ]
    launch = _launch_evidence(f)
    return [*found, launch] if launch else found


def _holder_subject(f: Facts, index: int) -> str:
    """Who holds the idle: `N name call(s)`, Python between operators, or nothing recorded."""
    category, name = f.word(f"path_idle_holder_{index}_category"), f.word(f"path_idle_holder_{index}_name")
    if category == "other":
        return "time in which the launching thread records no event"
    if category == "host_python":
        return f"the time between operators (in `{name}`)"
    calls = max(f[f"path_idle_holder_{index}_calls"], 1.0)
    return f"{calls:,.0f} `{name}` call(s)"


def _holder_clause(f: Facts, index: int) -> str:
    category = f.word(f"path_idle_holder_{index}_category")
    replayed = category == "launch" and f.numbers.get("path_graph_replay_us", 0.0) > 0
    meaning = REPLAYED_LAUNCH if replayed else IDLE_CAUSES[category]
    held = _ms(f, f"path_idle_holder_{index}_us")
    waits = _ms(f, "path_idle_us")
    return f"{_holder_subject(f, index)} hold {held} of the {waits} it waits per step: {meaning}"


def _path_evidence(f: Facts) -> list[str]:
    """The idle's holders on the critical path that hold at least `CITED_SHARE` of the step; one clause
    saying so when none does."""
    indices = [i for i in range(CITED_HOLDERS) if f"path_idle_holder_{i}_us" in f]
    cited = [i for i in indices if f[f"path_idle_holder_{i}_us"] >= CITED_SHARE * f["path_step_us"]]
    if not cited:
        return [f"no single host event holds {CITED_SHARE:.0%} of the step: the idle is spread over many"]
    return [_holder_clause(f, i) for i in cited]


def _idle_sentence(f: Facts) -> str:
    head = (
        f"The {f.word('worker') if 'worker' in f else 'GPU'} is idle {f['idle_share']:.0%} of the median "
        f"step "
        f"({_ms(f, 'idle_us')} of {_ms(f, 'step_us')}): the host does not keep it fed"
    )
    if f.numbers.get("path_idle_us", 0.0) > 0:
        return f"{head}; on the critical path, {'; '.join(_path_evidence(f))}."
    evidence = _idle_evidence(f)
    if evidence:
        return f"{head}; the trace shows: {'; '.join(evidence)}."
    look_at = idle_look_at(f)  # the run's kind says where to look (`traceview.verdict.kinds`)
    if look_at:
        return f"{head}; the trace records no data loading or synchronisation to blame: look at {look_at}."
    return (
        f"{head}; the trace records no data loading, synchronisation or launch-bound step to blame: look at "
        "the "
        f"input pipeline (DataLoader workers, pinned memory), kernel launch overhead (CUDA graphs) and "
        f"synchronisations."
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


def _slow_rank_excess(f: Facts) -> float:
    return f["slow_rank_comp_us"] / f["median_rank_comp_us"] - 1.0


def _worker(f: Facts) -> str:
    """What computes: the GPU, or on a host timeline the host."""
    return f.words.get("worker", "GPU")


def _peers_wait_for(f: Facts) -> str:
    """Whom the peers wait for: the straggler the evidence names, or nobody beyond chance."""
    if f.numbers.get("straggler_rank", -1.0) >= 0:
        return f"the peers wait for rank {f['straggler_rank']:.0f}"
    return "no rank is last beyond chance"


def _slow_rank_sentence(f: Facts) -> str:
    kernels = f" {f.word('slow_rank_kernels')}" if "slow_rank_kernels" in f else ""
    head = (
        f"Rank {f['slow_rank']:.0f} computes {_ms(f, 'slow_rank_comp_us')} per median step, "
        f"{_slow_rank_excess(f):.0%} more than the median over ranks ({_ms(f, 'median_rank_comp_us')})"
    )
    if "slow_rank_instances" not in f:
        return (
            f"{head}; no collective of it was matched across ranks, so whether its peers wait for it is not "
            f"known: check its {_worker(f)} (clocks, thermals) and its share of the data.{kernels}"
        )
    last = f"last in {f['slow_rank_times_last']:.0f} of its {f['slow_rank_instances']:.0f} collectives"
    chance = f"1 in {f['slow_rank_group_size']:.0f} would be chance"
    if f["slow_rank_times_last"] * f["slow_rank_group_size"] > f["slow_rank_instances"]:
        return (
            f"{head}, and it is {last} ({chance}): more often than chance, too few times to tell that its "
            f"peers "
            f"wait for it; {_peers_wait_for(f)}. Check its {_worker(f)} (clocks, thermals) and its share of "
            f"the "
            f"data; a longer recording tells whether it sets the pace.{kernels}"
        )
    return (
        f"{head}, but it is {last} ({chance}): its peers do not wait for it; {_peers_wait_for(f)}. Its extra "
        f"compute costs the run nothing now; check its {_worker(f)} (clocks, thermals) and its share of the "
        f"data before it does.{kernels}"
    )


def _straggler_sentence(f: Facts) -> str:
    cause = f.word("straggler_cause") if "straggler_cause" in f else "unexplained"
    because = f.word("straggler_cause_text") if "straggler_cause_text" in f else cause
    return (
        f"Rank {f['straggler_rank']:.0f}'s late arrival costs {_ms(f, 'straggler_cost_us')} per step "
        f"({f['straggler_cost_share']:.0%} of the step) that its peers spend waiting: it arrives last in "
        f"{f['straggler_times_last']:.0f} of the {f['straggler_instances']:.0f} collectives it joins (1 in "
        f"{f['straggler_group_size']:.0f} would be chance; median lateness "
        f"{_ms(f, 'straggler_median_lateness_us')}); likely cause: {because}. "
        f"{CAUSE_ADVICE.get(cause, CAUSE_ADVICE['unexplained'])}"
        + (f" {f.word('straggler_kernels')}" if "straggler_kernels" in f else "")
    )


CAUSE_ADVICE: Mapping[str, str] = {
    "late launch": (
        "Its host works (or sleeps) before launching the step's first device work: look at what its host "
        "does "
        "at the start of each step (data loading, synchronisations, logging, CPU contention)."
    ),
    "slow compute": "Check its GPU (clocks, thermals, ECC) and its share of the data.",
    "late host step entry": "Its host starts each step late: look at its input pipeline and CPU contention.",
    "late collective launch": (
        "Its host launches the collective late: look for synchronisations and CPU work before it."
    ),
    "network": "Its link is slower than its peers': check its NIC, cabling and switch port.",
    "unexplained": "Nothing on its own timeline explains it: compare its host and devices with its peers'.",
}
"""One line of advice per straggler cause (`traceview.across_ranks.stragglers`)."""


def _mismatch_sentence(f: Facts) -> str:
    where = f" in process group {f.word('mismatch_group')}" if "mismatch_group" in f else ""
    step = f" at step {f['mismatch_step']:.0f}" if "mismatch_step" in f else ""
    return (
        f"Make every rank call the same collectives in the same order: {f['mismatches']:.0f} call(s) differ"
        f"{where}{step}. A mismatch hangs the job at scale and pairs unrelated calls in every figure across "
        f"ranks."
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


def _dimension_wait_share(f: Facts) -> float:
    """The dimension's waiting for peers as a share of the step, at least the named straggler's cost (waiting
    its peers leave exposed): a straggler's stake, not the dimension's."""
    step = f.numbers.get("step_us", 0.0)
    straggler = f.numbers.get("straggler_cost_share", 0.0) if f.numbers.get("straggler_rank", -1) >= 0 else 0
    return max(f["dimension_wait_us"] / step if step > 0 else 0.0, straggler)


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
        f"Expert load is imbalanced: rank {f['moe_hottest_rank']:.0f} receives {f['moe_hottest_share']:.2f}x "
        f"the "
        f"mean of its group{wait}: strengthen the load-balancing loss, cap expert capacity, or re-place the "
        f"hot "
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
        lambda f: f.numbers.get("path_idle_us", f["idle_us"]),
    ),
    Rule(
        "communication-bound",
        "time-budget",
        ("gamma", "comm_us", "comp_us", "comm_share"),
        lambda f: f["gamma"] > 1.0 and _moving_share(f) >= COMM_SHARE_MIN,
        _gamma_sentence,
        _moving_share,
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
        lambda f: (
            _slow_rank_excess(f) * (0.5 if "slow_rank_instances" not in f else SLOW_RANK_UNWAITED_SCORE)
        ),
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
        _straggler_sentence,
        lambda f: f["straggler_cost_share"],
        lambda f: f["straggler_cost_us"],
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
        lambda f: max(0.0, f["dimension_exposed_share"] - _dimension_wait_share(f)) * 0.95,
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
    *(Rule(*row) for row in KIND_ADVICE),
)
"""The rules, each a row; an analysis adds rows for its own facts (the run kinds theirs, `KIND_ADVICE`)."""


def _saved_us(rule: Rule, facts: Facts) -> float | None:
    """What fixing the rule's cause would save per median step: the rule's own figure (the time its holder
    holds on the critical path), else its score times the median step."""
    if rule.saved is not None:
        return rule.saved(facts)
    step = facts.numbers.get("path_step_us", facts.numbers.get("step_us"))
    return None if step is None else rule.score(facts) * step


def recommendations(facts: Facts, rules: tuple[Rule, ...] = RULES) -> tuple[Recommendation, ...]:
    """The rules that fire on `facts`, highest score first (ties by rule id); the run's kinds withhold the
    advice that does not apply to them (`traceview.verdict.kinds`)."""
    held = withheld(facts)
    fired = [
        Recommendation(
            rule.id,
            rule.section,
            rule.sentence(facts),
            tuple((n, facts[n]) for n in rule.needs),
            rule.score(facts),
            _saved_us(rule, facts),
        )
        for rule in rules
        if all(name in facts for name in rule.needs) and rule.id not in held and rule.holds(facts)
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
