"""The facts that tell a run's kind (docs/metrics.md, "Verdict", run kinds): training, inference or serving,
a benchmark harness's warm-up, graph replay, and one leading gap that holds most of the idle. Read from the
analyses that measured them (the kernels' host side and launches, the bubbles' gaps, the budget); nothing
is recomputed from events.

- `training_phases`: (rank, step) windows with a backward pass or an optimizer step on the host
  (`traceview.kernels.host`, phases `backward`, `optimizer`), plus the operators of the run that only training
  runs (`BACKWARD_OPERATORS`); `host_side_recorded`: 1 when at least `MIN_ATEN_OPERATORS` distinct `aten::`
  operators launch the run's work (the trace records its operators).
- `serving_steps`: windows holding a serving engine's step annotation (`step[DECODE bs=32]`, phase
  `serving_step`).
- `warmup_us`, `warmup_share`: the median window's warm-up (phase `warmup`, a harness's annotation) and its
  share of the window.
- `graph_replay_share`: of the device work launched in the median window, the share replayed by graph
  launches (`graph_kernels` over `graph_kernels + kernels` of `traceview.kernels.launches`).
- `leading_idle_us`, `leading_idle_share`: the longest leading gap of any window (idle from the window's
  start to its first device activity) and its share of that window's idle; `leading_idle_rank`,
  `leading_idle_step`: where.
"""

from __future__ import annotations

import polars as pl

from traceview.bubbles.gaps import BubbleAnalysis
from traceview.budget.time_budget import TimeBudget
from traceview.kernels.analysis import KernelAnalysis

MIN_ATEN_OPERATORS = 3
"""Distinct `aten::` operators launching the run's work from which the trace is said to record its operators
(a forward pass has many; a trace that records none, or a synthetic one, is no evidence of a missing
backward)."""
BACKWARD_OPERATORS = r"(?i)backward|^autograd::engine|^Optimizer\.|^aten::_fused_adam|^aten::_foreach_add"
"""Operators that only a training step runs: backward kernels, the autograd engine, optimizer updates."""


def _phase_windows(host: pl.DataFrame, phases: tuple[str, ...]) -> float:
    return float(host.filter(pl.col("phase").is_in(list(phases))).select("rank", "step").unique().height)


def _host_facts(kernels: KernelAnalysis) -> dict[str, float]:
    host, operators = kernels.parts.host, kernels.parts.operators.get_column("operator")
    aten = operators.filter(operators.str.starts_with("aten::")).n_unique()
    trained = int(operators.str.contains(BACKWARD_OPERATORS).sum())
    return {
        "training_phases": _phase_windows(host, ("backward", "optimizer")) + trained,
        "serving_steps": _phase_windows(host, ("serving_step",)),
        "host_side_recorded": 1.0 if aten >= MIN_ATEN_OPERATORS else 0.0,
    }


def _warmup_facts(kernels: KernelAnalysis, budget: TimeBudget) -> dict[str, float]:
    host = kernels.parts.host.filter(pl.col("phase") == "warmup")
    steps = budget.per_step.select("rank", "step", "step_us")
    if host.height == 0 or steps.height == 0:
        return {}
    joined = steps.join(host.select("rank", "step", "time_us"), on=["rank", "step"], how="left")
    medians = joined.select(pl.col("time_us").fill_null(0.0).median(), pl.col("step_us").median()).row(0)
    if not medians[1]:
        return {}
    return {"warmup_us": float(medians[0]), "warmup_share": float(medians[0]) / float(medians[1])}


def _replay_facts(kernels: KernelAnalysis) -> dict[str, float]:
    launches = kernels.parts.launches
    if launches.height == 0 or "graph_kernels" not in launches.columns:
        return {}
    work = pl.col("graph_kernels").fill_null(0) + pl.col("kernels").fill_null(0)
    share = launches.select(
        pl.when(work > 0).then(pl.col("graph_kernels").fill_null(0) / work).median().alias("share"),
        pl.col("graph_kernels").fill_null(0).median().alias("graph"),
        pl.col("graph_launches").fill_null(0).median().alias("replays"),
    ).row(0)
    if share[0] is None:
        return {}
    return {
        "graph_replay_share": float(share[0]),
        "step_graph_kernels": float(share[1]),
        "step_graph_launches": float(share[2]),
    }


def _leading_facts(bubbles: BubbleAnalysis) -> dict[str, float]:
    leading = bubbles.gaps.filter(pl.col("position") == "leading")
    if leading.height == 0:
        return {}
    top = leading.sort(["dur_us", "rank", "step"], descending=[True, False, False]).row(0, named=True)
    window = bubbles.per_step.filter((pl.col("rank") == top["rank"]) & (pl.col("step") == top["step"]))
    if window.height == 0 or not window.item(0, "idle_us"):
        return {}
    return {
        "leading_idle_us": float(top["dur_us"]),
        "leading_idle_share": float(top["dur_us"]) / float(window.item(0, "idle_us")),
        "leading_idle_window_us": float(window.item(0, "step_us")),
        "leading_idle_rank": float(top["rank"]),
        "leading_idle_step": float(top["step"]),
    }


def kind_facts(
    budget: TimeBudget,
    kernels: KernelAnalysis | None,
    bubbles: BubbleAnalysis | None,
) -> tuple[dict[str, float], dict[str, str]]:
    """The kind facts (module docstring) the analyses that ran can give."""
    numbers: dict[str, float] = {}
    if kernels is not None:
        numbers |= _host_facts(kernels) | _warmup_facts(kernels, budget)
        numbers |= _replay_facts(kernels)
    if bubbles is not None:
        numbers |= _leading_facts(bubbles)
    return numbers, {}
