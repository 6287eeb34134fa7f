"""The idle GPU's advice (docs/metrics.md section 5): the critical path's holders of the idle, cited with
their time, else what the host side of the median step shows (data loading, synchronisations, reads of device
values, launch-bound kernels), else where the run's kind says to look."""

from __future__ import annotations

from collections.abc import Callable

from traceview.verdict.facts import Facts, duration_text
from traceview.verdict.kinds import idle_look_at, launch_advice_allowed
from traceview.verdict.path_advice import CITED_HOLDERS, CITED_SHARE, IDLE_CAUSES, REPLAYED_LAUNCH

_ms = duration_text

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


def idle_sentence(f: Facts) -> str:
    """The idle GPU's sentence: the path's holders, else the host side's evidence, else where to look."""
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
