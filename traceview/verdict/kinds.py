"""Run kinds (docs/metrics.md, "Verdict", run kinds): what the run is, from the facts of
`traceview.verdict.kind_facts`, said beside the verdict, and which advice does not apply to it.

`KIND_RULES` is a table: a kind, the facts it needs, when it holds, its sentence, the advice rules it
withholds, what the idle advice should point at instead of the input pipeline and launches, and whether the
launch-bound evidence (CUDA graphs would remove launches) may be cited. `KIND_ADVICE` rows are advice of
their own (`traceview.verdict.recommend` builds its rules from them).
"""

from __future__ import annotations

from collections.abc import Callable

from traceview.core.records import record
from traceview.verdict.facts import Facts, duration_text

WARMUP_SHARE_MIN = 0.5
"""A window whose warm-up annotation covers at least this share is a benchmark harness's warm-up."""
GRAPH_REPLAY_SHARE_MIN = 0.5
"""Device work of which graph launches replay at least this share: the step replays graphs."""
LEADING_IDLE_SHARE_MIN = 0.5
"""One leading gap holding at least this share of its window's idle ..."""
LEADING_WINDOW_SHARE_MIN = 0.15
"""... and at least this share of the window is said apart from the step's idle."""
TIME_BUDGET_RULES = (
    "exposed-communication",
    "low-overlap",
    "idle-gpu",
    "communication-bound",
    "host-communication",
    "dimension-cost",
)
"""The advice that reads the budget of the recorded windows."""


@record
class KindRule:
    """A run kind: `kind` when every fact in `needs` is known and `holds` is true."""

    kind: str
    needs: tuple[str, ...]
    holds: Callable[[Facts], bool]
    sentence: Callable[[Facts], str]
    withholds: tuple[str, ...] = ()
    idle_look_at: str = ""
    launch_advice: bool = True


def _all_capture(f: Facts) -> bool:
    return f["capture_steps"] == f["windows"] > 0


INFERENCE_EVIDENCE: tuple[tuple[str, Callable[[Facts], bool], Callable[[Facts], str]], ...] = (
    (
        "grad_off_ranks",
        lambda f: f["grad_off_ranks"] > 0 and f.numbers.get("training_phases", 0.0) == 0,
        lambda f: (
            f"the trace's metadata says autograd was off (inference_mode) on {f['grad_off_ranks']:.0f} "
            "rank(s)"
        ),
    ),
    (
        "serving_steps",
        lambda f: f["serving_steps"] > 0,
        lambda f: f"serving-engine step annotations in {f['serving_steps']:.0f} window(s)",
    ),
    (
        "training_phases",
        lambda f: f.numbers.get("host_side_recorded", 0.0) > 0 and f["training_phases"] == 0,
        lambda f: "no backward pass and no optimizer step in any window",
    ),
)
"""What says a run is forward-only, first found first said: (fact, holds, clause) rows."""


def _inference_reasons(f: Facts) -> list[str]:
    return [clause(f) for fact, holds, clause in INFERENCE_EVIDENCE if fact in f and holds(f)]


def _inference(f: Facts) -> bool:
    return bool(_inference_reasons(f))


def _inference_sentence(f: Facts) -> str:
    why = "; ".join(_inference_reasons(f))
    return (
        f"A forward-only run: inference, serving or a benchmark ({why}): advice for training "
        f"(DataLoader workers, gradient buckets under the backward pass) does not apply."
    )


def _warmup_sentence(f: Facts) -> str:
    return (
        f"A benchmark harness: {f['warmup_share']:.0%} of the median window "
        f"({duration_text(f, 'warmup_us')}) is the harness's warm-up (a `warmup` annotation), so the figures "
        f"describe warm-up iterations, not a training step nor the timed ones."
    )


def _replay_sentence(f: Facts) -> str:
    return (
        f"Graph replay: {f['graph_replay_share']:.0%} of the device work launched in the median step is "
        f"replayed by {f['step_graph_launches']:.0f} graph launch(es) "
        f"({f['step_graph_kernels']:.0f} kernels): its kernels are not launched one by one, so launch "
        f"overhead is not what holds it."
    )


def _leading(f: Facts) -> bool:
    window = f["leading_idle_window_us"]
    straggler = f.numbers.get("straggler_rank", -1.0)
    return (
        f["leading_idle_rank"] != straggler  # a straggler's late start is its cause, said with it
        and f["leading_idle_share"] >= LEADING_IDLE_SHARE_MIN
        and f["leading_idle_us"] >= LEADING_WINDOW_SHARE_MIN * window
    )


def _leading_sentence(f: Facts) -> str:
    return (
        f"One gap at the start of rank {f['leading_idle_rank']:.0f}'s step {f['leading_idle_step']:.0f} "
        f"holds {f['leading_idle_share']:.0%} of that window's idle "
        f"({duration_text(f, 'leading_idle_us')} before its first device activity): the host was blocked "
        f"before its first launch (the profiler started "
        f"while it waited, or the step begins with host work), not idle spread over the step."
    )


CAPTURE_NEEDS = ("capture_steps", "windows", "capture_launches", "capture_launches_ran")
KIND_RULES: tuple[KindRule, ...] = (
    KindRule("graph-capture", CAPTURE_NEEDS, _all_capture, lambda f: "", TIME_BUDGET_RULES, "", False),
    KindRule(
        "warm-up",
        ("warmup_share", "warmup_us"),
        lambda f: f["warmup_share"] >= WARMUP_SHARE_MIN,
        _warmup_sentence,
        TIME_BUDGET_RULES,
    ),
    KindRule(
        "inference",
        (),
        _inference,
        _inference_sentence,
        ("exposed-communication",),
        "the host's work between forward passes (request scheduling and batching, tokenisation, sampling), "
        "blocking copies and synchronisations",
    ),
    KindRule(
        "graph-replay",
        ("graph_replay_share", "step_graph_launches", "step_graph_kernels"),
        lambda f: f["graph_replay_share"] >= GRAPH_REPLAY_SHARE_MIN,
        _replay_sentence,
        (),
        "what the host does between graph replays (blocking copies, synchronisations, allocator calls, "
        "Python work)",
        False,
    ),
    KindRule(
        "leading-gap",
        ("leading_idle_share", "leading_idle_us", "leading_idle_window_us", "leading_idle_rank"),
        _leading,
        _leading_sentence,
        (),
        "what the host does before the first launch of the step (the gap at its start holds most of the "
        "idle; a profiler started while the host was blocked records it too: profile later steps)",
    ),
)
"""The run kinds, in the order their sentences are said; the first one's idle advice wins."""


def kinds_of(f: Facts) -> tuple[KindRule, ...]:
    """The `KIND_RULES` rows that hold on `f`."""
    return tuple(rule for rule in KIND_RULES if all(n in f for n in rule.needs) and rule.holds(f))


def kind_shapes(f: Facts) -> tuple[str, ...]:
    """The sentence of every kind that holds (a capture's is said by the verdict and its shape)."""
    return tuple(sentence for sentence in (rule.sentence(f) for rule in kinds_of(f)) if sentence)


def withheld(f: Facts) -> frozenset[str]:
    """The advice rules the run's kinds withhold."""
    return frozenset(rule_id for rule in kinds_of(f) for rule_id in rule.withholds)


def idle_look_at(f: Facts) -> str | None:
    """What the idle advice should point at for the run's kind, if its kind says."""
    return next((rule.idle_look_at for rule in kinds_of(f) if rule.idle_look_at), None)


def launch_advice_allowed(f: Facts) -> bool:
    """Whether launch-bound advice (CUDA graphs, fusion) may be given to this run."""
    return all(rule.launch_advice for rule in kinds_of(f))


def _capture_advice(f: Facts) -> str:
    return (
        f"Profile the replay steps: every recorded window captures a CUDA/HIP graph "
        f"({f['capture_launches']:.0f} launches recorded, {f['capture_launches_ran']:.0f} ran), so its idle, "
        f"launches and budget describe the capture; record steps that replay the graph (cudaGraphLaunch)."
    )


def _warmup_advice(f: Facts) -> str:
    return (
        f"Profile the timed iterations: {f['warmup_share']:.0%} of the recorded window is warm-up; give the "
        f"profiler a schedule (wait and warmup steps) and call prof.step() once per timed iteration, so each "
        f"window is one iteration."
    )


def _exposed_inference_advice(f: Facts) -> str:
    return (
        f"{f['exposed_comm_share']:.0%} of the median step is exposed communication "
        f"({duration_text(f, 'exposed_comm_us')} of {duration_text(f, 'step_us')}): overlap it with "
        f"independent compute (tensor-parallel all-reduces fused into or overlapped with the next layer) or "
        f"raise the batch per step so compute covers it."
    )


KIND_ADVICE: tuple[
    tuple[
        str, str, tuple[str, ...], Callable[[Facts], bool], Callable[[Facts], str], Callable[[Facts], float]
    ],
    ...,
] = (
    ("graph-capture", "time-budget", CAPTURE_NEEDS, _all_capture, _capture_advice, lambda f: 1.0),
    (
        "warm-up-window",
        "time-budget",
        ("warmup_share", "warmup_us"),
        lambda f: f["warmup_share"] >= WARMUP_SHARE_MIN,
        _warmup_advice,
        lambda f: f["warmup_share"],
    ),
    (
        "exposed-communication-inference",
        "time-budget",
        ("exposed_comm_share", "exposed_comm_us", "step_us"),
        lambda f: _inference(f) and f["exposed_comm_share"] >= 0.10,
        _exposed_inference_advice,
        lambda f: f["exposed_comm_share"],
    ),
)
"""Advice rows of the kinds: (id, section, needs, holds, sentence, score), as `traceview.verdict.recommend`'s
`Rule`."""
