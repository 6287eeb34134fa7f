"""The communication rules' stakes and sentences (`traceview.verdict.recommend.RULES`): overlap advice bounded
by the compute it could hide under, bytes or calls from the alpha-beta model's terms, host collectives."""

from __future__ import annotations

from collections.abc import Callable

from traceview.verdict.facts import Facts, duration_text

_ms = duration_text


def hideable(f: Facts) -> float:
    """The `hideable_us` fact (`traceview.verdict.facts.budget_facts`): the most overlap can hide."""
    return f["hideable_us"]


def _hideable_share(f: Facts) -> float:
    """`hideable_us` as a share of the median step (0 without a step)."""
    step = f.numbers.get("step_us", 0.0)
    return f["hideable_us"] / step if step > 0 else 0.0


def hideable_or_unbounded(f: Facts) -> float:
    """`hideable_us` where the budget gave it, else no bound (a rule whose `needs` do not name it)."""
    return f.numbers.get("hideable_us", float("inf"))


OVERLAP_DIMENSIONS = frozenset({"dp", "fsdp", "ep", "cp"})
"""Dimensions whose advice (`DIMENSION_ADVICE`) is to run their calls under compute: bounded by
`hideable_us`; the others' (TP's, PP's) is not overlap advice."""


def dimension_bound(f: Facts) -> float:
    """What the costliest dimension's advice can save: `hideable_us` for overlap advice, else unbounded."""
    overlap = f.words.get("dimension") in OVERLAP_DIMENSIONS
    return hideable_or_unbounded(f) if overlap else float("inf")


def _waiting_share(f: Facts) -> float:
    """The share of the median step a median rank spends waiting at collectives (0 when not measured)."""
    return min(f.numbers.get("median_wait_share", 0.0), f["exposed_comm_share"])


def exposed_transfer_share(f: Facts) -> float:
    """Exposed communication that is not waiting for late peers: what overlap could still hide."""
    return f["exposed_comm_share"] - _waiting_share(f)


def exposed_sentence(f: Facts) -> str:
    waiting = _waiting_share(f)
    of_which = f", of which {waiting:.0%} of the step is waiting for late peers" if waiting >= 0.005 else ""
    return (
        f"{f['exposed_comm_share']:.0%} of the median step is exposed communication "
        f"({_ms(f, 'exposed_comm_us')} of {_ms(f, 'step_us')}; exposed gamma "
        f"{f['exposed_gamma']:.2f}{of_which}): "
        f"start collectives earlier under the backward pass (DDP bucket order, `bucket_cap_mb`) "
        f"or raise the local batch so compute covers them; overlap can hide it only under the compute not "
        f"already under communication ({_ms(f, 'hideable_us')} per step), so it would save up to "
        f"{min(exposed_transfer_share(f), _hideable_share(f)):.0%} of the step."
    )


def unhidden_transfer_share(f: Facts) -> float:
    """Communication outside compute, less the time spent waiting for late peers, as a share of the step."""
    return f["comm_share"] * (1.0 - f["overlap_ratio"]) - f.numbers.get("median_wait_share", 0.0)


def overlap_sentence(f: Facts) -> str:
    return (
        f"Only {f['overlap_ratio']:.0%} of communication time runs under compute (overlap ratio "
        f"{f['overlap_ratio']:.2f}, {_ms(f, 'comm_us')} of communication per step): issue collectives "
        f"asynchronously while independent compute remains, instead of waiting on each."
    )


def moving_share(f: Facts) -> float:
    """The share of the step that communication takes, less the median rank's waiting for late peers."""
    return max(0.0, f["comm_share"] - f.numbers.get("median_wait_share", 0.0))


BANDWIDTH_TERM_MIN = 0.5
"""The bandwidth term f S / B must hold at least this share of the calls' model time for advice to move
fewer bytes; under it the latency term k alpha dominates and fewer, larger calls help instead."""


def _kib(f: Facts) -> str:
    return f"{f['comm_call_bytes'] / 1024:,.1f} KiB"


GAMMA_ADVICE: tuple[tuple[Callable[[Facts], bool], Callable[[Facts], str]], ...] = (
    (
        lambda f: f.numbers.get("comm_bw_term_share", 0.0) >= BANDWIDTH_TERM_MIN,
        lambda f: (
            f"the bandwidth term holds {f['comm_bw_term_share']:.0%} of the calls' model time: move fewer "
            f"bytes (bf16 gradients), raise the local batch, or use faster links."
        ),
    ),
    (
        lambda f: "comm_bw_term_share" in f,
        lambda f: (
            f"the calls are latency-bound (median call {_kib(f)}; the latency term k alpha holds "
            f"{1 - f['comm_bw_term_share']:.0%} of their model time): make fewer, larger collectives "
            f"(DDP's `bucket_cap_mb`, fused small calls) or raise the local batch; fewer bytes would not "
            f"help."
        ),
    ),
    (
        lambda f: f.numbers.get("comm_bw_term_floor", 1.0) < BANDWIDTH_TERM_MIN,
        lambda f: (
            f"the calls are latency-bound (median call {_kib(f)}: even on the slowest link the tool knows, "
            f"the latency term k alpha holds {1 - f['comm_bw_term_floor']:.0%} of their model time): make "
            f"fewer, larger collectives (DDP's `bucket_cap_mb`, fused small calls) or raise the local batch; "
            f"fewer bytes would not help."
        ),
    ),
    (
        lambda f: True,
        lambda f: (
            "raise the local batch; whether the bytes or the number of calls cost the time needs the link's "
            "bandwidth (--bandwidth, --host-bandwidth)."
        ),
    ),
)
"""(condition, advice) of the communication-bound rule, first that holds: bytes only where the bandwidth term
of the alpha-beta model dominates (`traceview.verdict._comm_terms`)."""


def gamma_sentence(f: Facts) -> str:
    waiting = f.numbers.get("median_wait_share", 0.0)
    of_which = f", of which {waiting:.0%} of the step is waiting for late peers" if waiting >= 0.005 else ""
    advice = next(say(f) for holds, say in GAMMA_ADVICE if holds(f))
    return (
        f"Measured gamma is {f['gamma']:.2f} (T_comm {_ms(f, 'comm_us')} against "
        f"T_comp {_ms(f, 'comp_us')} per median step{of_which}): communication sets the pace even with "
        f"perfect overlap; {advice}"
    )


HOST_COMM_SHARE_MIN = 0.5
"""Communication of which at least this share runs on the host (gloo, MPI) is said to run there."""


def host_share(f: Facts) -> float:
    """The share of T_comm that runs on the host (median step)."""
    return f["comm_host_us"] / f["comm_us"] if f["comm_us"] > 0 else 0.0


def host_comm_sentence(f: Facts) -> str:
    return (
        f"{host_share(f):.0%} of the communication ({_ms(f, 'comm_host_us')} of {_ms(f, 'comm_us')} per "
        f"median "
        f"step) runs on the host (gloo or MPI), the data copied through host memory: a device backend (NCCL, "
        f"RCCL) moves it over the GPUs' own links; keep gloo for CPU tensors only."
    )
