"""The time budget on every real Kineto trace, against a second, plain-Python reading of the same JSON.

The second method uses only `json`/`gzip` and a sorted loop: it picks events by their `cat` as SPEC section
2 lists them, calls a kernel communication when its name starts with `nccl` or `rccl` (every real trace here
names them so), and merges intervals by sorting and sweeping. Step windows are rebuilt from the rule in
`traceview.steps.windows`' docstring (SPEC section 4). Each trace is parsed once per module by both methods.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.parsers import kineto

from tests.shared_data import requires_shared
from traceview.budget.time_budget import all_step_windows, classified_events, time_budget
from traceview.core.intervals import union_length
from traceview.load.one_job import make_run
from traceview.model.trace import RankTrace

pytestmark = requires_shared

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"
TRACES = sorted(p for p in REAL.glob("*/*") if p.name.endswith((".json", ".json.gz")))
CATEGORIES = {
    "kernel": ("kernel", "Kernel", "mtia_ccp_events"),  # MTIA's device kernels
    "memcpy": ("gpu_memcpy", "Memcpy"),
    "memset": ("gpu_memset", "Memset"),
    "op": ("cpu_op", "Operator", "operator"),
    "runtime": ("cuda_runtime", "Runtime", "cuda_driver", "mtia_runtime"),
}
STEP = re.compile(r"^ProfilerStep#(\d+)$")
CPU_STEP_CATEGORIES = ("user_annotation", *CATEGORIES["op"])  # PyTorch 1.8 wrote steps as `Operator`
Interval = tuple[float, float]


@dataclass
class PlainTrace:
    """What the plain pass keeps of one file."""

    counts: dict[str, int] = field(default_factory=dict)
    # start, end, event class, correlation
    device: list[tuple[float, float, str, int | None]] = field(default_factory=list)
    launches: dict[int, float] = field(default_factory=dict)  # correlation -> runtime call start
    cpu_steps: dict[int, Interval] = field(default_factory=dict)
    gpu_steps: dict[int, Interval] = field(default_factory=dict)


def _kind_of(category: object) -> str | None:
    return next((kind for kind, names in CATEGORIES.items() if category in names), None)


def _device_class(kind: str, name: str) -> str:
    if kind != "kernel":
        return "memory"
    return "comm" if name.lower().startswith(("nccl", "rccl")) else "compute"


def _note(plain: PlainTrace, event: dict[str, Any], kind: str) -> None:
    start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
    args = event.get("args") or {}
    correlation = args.get("correlation")
    if kind in ("kernel", "memcpy", "memset"):
        plain.device.append((start, end, _device_class(kind, event.get("name", "")), correlation))
    elif kind == "runtime" and isinstance(correlation, int):
        plain.launches.setdefault(correlation, start)


def _note_step(plain: PlainTrace, event: dict[str, Any]) -> None:
    found = STEP.match(str(event.get("name", "")))
    if found is None:
        return
    steps = plain.gpu_steps if event.get("cat") == "gpu_user_annotation" else plain.cpu_steps
    start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
    old = steps.get(int(found.group(1)), (start, end))
    steps[int(found.group(1))] = (min(old[0], start), max(old[1], end))


def plain_read(path: Path) -> PlainTrace:
    """The plain pass over one file."""
    raw = path.read_bytes()
    document = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    events = document.get("traceEvents", []) if isinstance(document, dict) else document
    plain = PlainTrace(counts=dict.fromkeys(CATEGORIES, 0))
    for event in events:
        if event.get("ph") != "X" or "ts" not in event or "dur" not in event:
            continue
        kind = _kind_of(event.get("cat"))
        if kind is not None:
            plain.counts[kind] += 1
            _note(plain, event, kind)
        if event.get("cat") in (*CPU_STEP_CATEGORIES, "gpu_user_annotation"):
            _note_step(plain, event)
    return plain


def merged_length(intervals: Iterable[Interval]) -> float:
    """Length of the union, by a sorted sweep."""
    total, current = 0.0, None
    for start, end in sorted(intervals):
        if current is not None and start <= current[1]:
            current = (current[0], max(current[1], end))
            continue
        if current is not None:
            total += current[1] - current[0]
        current = (start, end)
    return total + (current[1] - current[0] if current is not None else 0.0)


Loaded = tuple[Path, PlainTrace, RankTrace]


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def loaded(request: pytest.FixtureRequest) -> Loaded:
    path: Path = request.param
    return path, plain_read(path), kineto.parse(path)


def test_event_counts_match_the_plain_reading(loaded: Loaded) -> None:
    _, plain, trace = loaded
    gpu = dict(trace.gpu.group_by("kind").len().iter_rows())
    cpu = dict(trace.cpu.group_by("kind").len().iter_rows())
    ours = {
        "kernel": gpu.get("kernel", 0),
        "memcpy": gpu.get("memcpy", 0),
        "memset": gpu.get("memset", 0),
        "op": cpu.get("op", 0),
        "runtime": cpu.get("runtime", 0),
    }
    assert ours == plain.counts


def test_whole_trace_unions_match_a_sorted_sweep(loaded: Loaded) -> None:
    _, plain, trace = loaded
    if not plain.device:
        pytest.skip("no device activity")
    events = classified_events(make_run([trace]))
    for event_class in ("compute", "comm", "memory"):
        expected = merged_length((s, e) for s, e, c, _ in plain.device if c == event_class)
        chosen = events.filter(pl.col("event_class") == event_class)
        got = union_length(chosen, ["rank"]).get_column("length_us").sum() if chosen.height else 0.0
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-3), event_class
    everything = merged_length((s, e) for s, e, _, _ in plain.device)
    assert union_length(events, ["rank"]).item(0, "length_us") == pytest.approx(
        everything, rel=1e-9, abs=1e-3
    )


# ------------------------------------------------------------ per step, on traces with steps


def _launch_steps(plain: PlainTrace) -> dict[int, list[tuple[float, float, str]]]:
    """Device events by the CPU step holding their launch (their own start when no launch is known)."""
    by_step: dict[int, list[tuple[float, float, str]]] = {}
    for start, end, event_class, correlation in plain.device:
        at = plain.launches.get(correlation, start) if correlation is not None else start
        for step, (step_start, step_end) in plain.cpu_steps.items():
            if step_start <= at <= step_end:
                by_step.setdefault(step, []).append((start, end, event_class))
    return by_step


def plain_windows(plain: PlainTrace) -> dict[int, Interval]:
    """Step N: from the end of step N-1's last device work to the end of step N's (the first step: from its
    first device activity); GPU steps as written; no steps: one window (numbered -1) from the first device
    activity to the last."""
    if plain.gpu_steps and len(plain.gpu_steps) >= len(plain.cpu_steps):
        return dict(plain.gpu_steps)
    if not plain.cpu_steps:
        return {-1: (min(s for s, _, _, _ in plain.device), max(e for _, e, _, _ in plain.device))}
    by_step = _launch_steps(plain)
    steps = sorted(by_step)
    ends: list[float] = []
    for step in steps:  # a step ends when its last device work ends, never before the previous one
        ends.append(max([e for _, e, _ in by_step[step]] + ends[-1:]))
    starts = [min(s for s, _, _ in by_step[steps[0]]), *ends[:-1]]
    return {step: (starts[i], ends[i]) for i, step in enumerate(steps) if ends[i] > starts[i]}


def plain_budget(plain: PlainTrace, window: Interval) -> dict[str, float]:
    """comp, comm, overlap and idle inside one window, every interval clipped to it."""
    lo, hi = window
    clipped = [
        (max(s, lo), min(e, hi), c)
        for s, e, c in ((s, e, c) for s, e, c, _ in plain.device)
        if min(e, hi) > max(s, lo)
    ]
    comp = merged_length((s, e) for s, e, c in clipped if c == "compute")
    comm = merged_length((s, e) for s, e, c in clipped if c == "comm")
    kernels = merged_length((s, e) for s, e, c in clipped if c != "memory")
    busy = merged_length((s, e) for s, e, _ in clipped)
    return {
        "step_us": hi - lo,
        "comp_us": comp,
        "comm_us": comm,
        "overlap_us": comp + comm - kernels,
        "idle_us": hi - lo - busy,
    }


STEPPED = {
    "hta_df_index_resolver",  # five CPU steps, AllReduce kernels
    "hta_16rank_job_rank0",  # five CPU steps, SendRecv / all-to-all / all-gather kernels
    "kineto_pt18_resnet50",  # PyTorch 1.8 steps written as `Operator`
    "hta_gpu_user_annotation",  # no ProfilerStep at all: one whole-trace window
}


def test_per_step_budget_matches_the_plain_reading(loaded: Loaded) -> None:
    path, plain, trace = loaded
    if path.parent.name not in STEPPED:
        pytest.skip("per-step check runs on the traces named in STEPPED")
    run = make_run([trace])
    per_step = time_budget(classified_events(run), all_step_windows(run)).per_step
    windows = plain_windows(plain)
    assert sorted(per_step.get_column("step").to_list()) == sorted(windows)
    for row in per_step.iter_rows(named=True):
        expected = plain_budget(plain, windows[row["step"]])
        for column, value in expected.items():
            assert row[column] == pytest.approx(value, rel=1e-9, abs=1e-3), (row["step"], column)
