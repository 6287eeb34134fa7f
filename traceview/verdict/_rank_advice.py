"""The advice about ranks and their calls (docs/metrics.md section 5): a slow rank's compute, a straggler and
its cause, mismatched calls, suspected communication kernels, the costliest dimension, volume gaps and an
imbalanced expert-parallel group."""

from __future__ import annotations

from collections.abc import Mapping

from traceview.verdict.facts import Facts, duration_text

_ms = duration_text


def slow_rank_excess(f: Facts) -> float:
    """The slowest rank's compute over the median rank's, less one."""
    return f["slow_rank_comp_us"] / f["median_rank_comp_us"] - 1.0


def _worker(f: Facts) -> str:
    """What computes: the GPU, or on a host timeline the host."""
    return f.words.get("worker", "GPU")


def _peers_wait_for(f: Facts) -> str:
    """Whom the peers wait for: the straggler the evidence names, or nobody beyond chance."""
    if f.numbers.get("straggler_rank", -1.0) >= 0:
        return f"the peers wait for rank {f['straggler_rank']:.0f}"
    return "no rank is last beyond chance"


STAKE_SOURCES: Mapping[str, str] = {
    "replay": " Removing its lateness saves {saved} per median step (the replay's no_straggler lever).",
    "critical path": " Its peers' critical paths wait for it {saved} per step (mean over their steps).",
}
"""How a rank's measured stake is said, by its source (`<prefix>_saved_by`: `_stake_facts`)."""


def stake_clause(f: Facts, prefix: str) -> str:
    """The sentence stating a rank's measured stake and where it was measured, or "" without one."""
    source = f.words.get(f"{prefix}_saved_by", "")
    if f"{prefix}_saved_us" not in f or source not in STAKE_SOURCES:
        return ""
    return STAKE_SOURCES[source].format(saved=_ms(f, f"{prefix}_saved_us"))


def straggler_stake_share(f: Facts) -> float:
    """The straggler's stake as a share of the median step: its measured saving (`straggler_saved_us`) over
    the path's step where measured, else its lateness cost share; 0 without a straggler."""
    if f.numbers.get("straggler_rank", -1.0) < 0:
        return 0.0
    step = f.numbers.get("path_step_us", f.numbers.get("step_us", 0.0))
    if "straggler_saved_us" in f and step > 0:
        return f["straggler_saved_us"] / step
    return f.numbers.get("straggler_cost_share", 0.0)


def slow_rank_sentence(f: Facts) -> str:
    """A slow rank's compute, whether its peers wait for it, and how much its peers' paths wait for it."""
    return _slow_rank_said(f) + stake_clause(f, "slow_rank")


def _slow_rank_said(f: Facts) -> str:
    """A slow rank's compute, and whether its peers wait for it."""
    kernels = f" {f.word('slow_rank_kernels')}" if "slow_rank_kernels" in f else ""
    head = (
        f"Rank {f['slow_rank']:.0f} computes {_ms(f, 'slow_rank_comp_us')} per median step, "
        f"{slow_rank_excess(f):.0%} more than the median over ranks ({_ms(f, 'median_rank_comp_us')})"
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


def straggler_sentence(f: Facts) -> str:
    """The straggler, what its lateness costs its peers, its likely cause and what to do."""
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
        + stake_clause(f, "straggler")
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


def mismatch_sentence(f: Facts) -> str:
    """Ranks that call different collectives."""
    where = f" in process group {f.word('mismatch_group')}" if "mismatch_group" in f else ""
    step = f" at step {f['mismatch_step']:.0f}" if "mismatch_step" in f else ""
    return (
        f"Make every rank call the same collectives in the same order: {f['mismatches']:.0f} call(s) differ"
        f"{where}{step}. A mismatch hangs the job at scale and pairs unrelated calls in every figure across "
        f"ranks."
    )


def suspected_sentence(f: Facts) -> str:
    """Kernels counted as communication by their look alone."""
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


def has_words(f: Facts, words: tuple[str, ...]) -> bool:
    """Whether every one of `words` is a known fact."""
    return all(word in f for word in words)


def dimension_wait_share(f: Facts) -> float:
    """The dimension's waiting for peers as a share of the step, at least the named straggler's cost (waiting
    its peers leave exposed): a straggler's stake, not the dimension's."""
    step = f.numbers.get("step_us", 0.0)
    straggler = f.numbers.get("straggler_cost_share", 0.0) if f.numbers.get("straggler_rank", -1) >= 0 else 0
    return max(f["dimension_wait_us"] / step if step > 0 else 0.0, straggler)


def dimension_sentence(f: Facts) -> str:
    """The costliest named dimension, and its advice."""
    name = f.word("dimension_name")
    busbw = f.numbers.get("dimension_busbw_Bps")
    achieved = f", achieved busbw {busbw / 1e9:.3g} GB/s" if busbw else ""
    return (
        f"{name[0].upper()}{name[1:]} exposes {_ms(f, 'dimension_exposed_us')} per step "
        f"({f['dimension_exposed_share']:.0%} of the step; {_ms(f, 'dimension_wait_us')} of its time waiting "
        f"for peers{achieved} on {f.word('dimension_link')}): {f.word('dimension_advice')}."
    )


def volume_sentence(f: Facts) -> str:
    """An expected against measured volume gap and its cause."""
    of = f" ({f.word('volume_of')})" if "volume_of" in f else ""
    return f"Expected against measured volume{of}: {f.word('volume_cause')}."


def moe_sentence(f: Facts) -> str:
    """An imbalanced expert-parallel group."""
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
