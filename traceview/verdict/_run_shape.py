"""The run's shape beside the verdict: what the run is (some ranks of a larger job, one rank, a graph capture,
no step annotations), said plainly by the rows of `SHAPE_RULES` (docs/metrics.md, "Verdict")."""

from __future__ import annotations

from collections.abc import Callable

from traceview.verdict.facts import Facts, duration_text
from traceview.verdict.kinds import kind_shapes

_ms = duration_text


def _world_one(f: Facts) -> str:
    if f["host_calls"] > 0:
        return (
            f"World size 1: its {f['host_calls']:.0f} collective call(s) ({f.word('host_call_names')}) move "
            "nothing: a single rank has no peer (NCCL runs no kernel for them)."
        )
    return "World size 1: no collective runs."


def _captures(f: Facts) -> str:
    held = (
        "every figure describes the capture"
        if f["capture_steps"] == f["windows"]
        else ("they are left out of every median")
    )
    return (
        f"{f['capture_steps']:.0f} of the {f['windows']:.0f} (rank, step) windows capture a CUDA/HIP graph "
        f"({f['capture_launches']:.0f} kernel launches recorded, {f['capture_launches_ran']:.0f} of them "
        f"ran): a "
        "captured graph runs when it is replayed (the replay's kernels count in the step that launches it), "
        f"so {held}."
    )


def _no_steps(f: Facts) -> str:
    return (
        f"No ProfilerStep annotations: each rank's trace is one window, from its first device activity to "
        f"its "
        f"last (median {_ms(f, 'window_us')} of the {_ms(f, 'trace_span_us')} the profiler recorded): its "
        f"idle "
        "holds whatever happened between iterations (data loading, the host's own work, the profiler's start "
        "and stop), which step windows would charge to their steps; call prof.step() once per iteration."
    )


def some_ranks(f: Facts) -> bool:
    """The run holds some ranks of a larger job (its traces say the world size)."""
    return "ranks_read" in f and "world_size" in f and f["ranks_read"] < f["world_size"]


def _peers_absent(f: Facts) -> str:
    return (
        f"This run holds {f['ranks_read']:.0f} of the job's {f['world_size']:.0f} ranks: waiting on the "
        f"{f['world_size'] - f['ranks_read']:.0f} absent peers and transfer cannot be told apart, so claims "
        "that need them (which factor the gap to the model is) are withheld."
    )


SHAPE_RULES: tuple[tuple[tuple[str, ...], Callable[[Facts], bool], Callable[[Facts], str]], ...] = (
    (("ranks_read", "world_size"), some_ranks, _peers_absent),
    (("world_size", "host_calls"), lambda f: f["world_size"] == 1, _world_one),
    (
        ("capture_steps", "windows", "capture_launches", "capture_launches_ran"),
        lambda f: f["capture_steps"] > 0,
        _captures,
    ),
    (("no_steps", "window_us", "trace_span_us"), lambda f: f["no_steps"] > 0, _no_steps),
)
"""(facts needed, holds, sentence): the run's shape, said plainly beside the verdict."""


def run_shape(f: Facts) -> tuple[str, ...]:
    """The sentences of every `SHAPE_RULES` row that holds, then those of the run's kinds
    (`traceview.verdict.kinds`)."""
    shapes = tuple(say(f) for needs, holds, say in SHAPE_RULES if all(n in f for n in needs) and holds(f))
    return shapes + kind_shapes(f)
