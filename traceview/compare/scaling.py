"""Scale-up post-mortem: two runs of different world sizes (docs/metrics.md, "Compare and trend").

At the same local batch, throughput per GPU is inversely proportional to the step time, so the measured
scaling efficiency is E = step_base / step_cand (with local batches b known on both sides,
E = (b_cand / step_cand) / (b_base / step_base)). The alpha-beta model's expectation keeps the baseline's
exposed communication calibrated and scales it by the model's own ratio of predicted communication time per
step (`prediction.run.median_t_pred_us` of each summary): step_pred = step_base + exposed_base x
(t_pred_cand / t_pred_base - 1), E_pred = step_base / step_pred.

The loss is split by factor, each in us per median step and in efficiency points (us / step_cand), summing
to 1 - E: compute change, exposed transfer change (bandwidth: exposed x transfer / comm), exposed waiting
change (the rest of exposed communication), idle change, and the residual. Beside them: the stragglers new in
the candidate and the median bus bandwidth per (collective, process group) in both runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from traceview.core.records import record


@record
class Scaling:
    """The scaling analysis of a comparison whose world sizes differ."""

    baseline_world_size: int
    candidate_world_size: int
    measured_efficiency: float | None
    predicted_efficiency: float | None
    factors: pl.DataFrame  # factor, delta_us, efficiency_points
    new_stragglers: list[int]
    busbw: pl.DataFrame  # collective, pg_key, baseline_busbw_Bps, candidate_busbw_Bps, ratio
    notes: list[str]
    sentence: str


def _median(document: Mapping[str, Any], figure: str) -> float | None:
    value = ((document.get("time_budget") or {}).get("run_median") or {}).get(figure)
    return None if value is None else float(value)


def _local_batch(document: Mapping[str, Any]) -> float | None:
    for assumption in (document.get("prediction") or {}).get("assumptions") or ():
        if assumption.get("name") == "b (local batch)" and isinstance(assumption.get("value"), int | float):
            return float(assumption["value"])
    return None


def _t_pred(document: Mapping[str, Any]) -> float | None:
    value = ((document.get("prediction") or {}).get("run") or {}).get("median_t_pred_us")
    return None if value is None else float(value)


def _exposed_parts(document: Mapping[str, Any]) -> tuple[float, float]:
    """(exposed transfer, exposed waiting) of the median step, us."""
    exposed = _median(document, "exposed_comm_us") or 0.0
    comm, transfer = _median(document, "comm_us"), _median(document, "transfer_us")
    share = min(1.0, transfer / comm) if comm and transfer is not None else 1.0
    return exposed * share, exposed * (1 - share)


def _factors(baseline: Mapping[str, Any], candidate: Mapping[str, Any], step_cand: float) -> pl.DataFrame:
    base_transfer, base_wait = _exposed_parts(baseline)
    cand_transfer, cand_wait = _exposed_parts(candidate)
    deltas = {
        "compute change": (_median(candidate, "comp_us") or 0.0) - (_median(baseline, "comp_us") or 0.0),
        "exposed transfer (bandwidth)": cand_transfer - base_transfer,
        "exposed waiting (stragglers, skew)": cand_wait - base_wait,
        "idle change": (_median(candidate, "idle_us") or 0.0) - (_median(baseline, "idle_us") or 0.0),
    }
    step_delta = step_cand - (_median(baseline, "step_us") or 0.0)
    deltas["residual (overlap, memory)"] = step_delta - sum(deltas.values())
    return pl.DataFrame(
        {"factor": list(deltas), "delta_us": list(deltas.values())},
        schema={"factor": pl.Utf8, "delta_us": pl.Float64},
    ).with_columns((pl.col("delta_us") / step_cand).alias("efficiency_points"))


def _busbw(document: Mapping[str, Any], name: str) -> pl.DataFrame:
    rows = [
        {"collective": r["collective"], "pg_key": r["pg_key"], "value": v}
        for r in (document.get("distributions") or {}).get("collective_kernels") or ()
        for v in r["busbw_Bps"]
        if v is not None
    ]
    schema = {"collective": pl.Utf8, "pg_key": pl.Utf8, "value": pl.Float64}
    frame = pl.DataFrame(rows, schema=schema)
    return frame.group_by("collective", "pg_key").agg(pl.col("value").median().alias(name))


def busbw_table(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> pl.DataFrame:
    """Median bus bandwidth per (collective, process group) in both runs and candidate / baseline."""
    return (
        _busbw(baseline, "baseline_busbw_Bps")
        .join(
            _busbw(candidate, "candidate_busbw_Bps"), on=["collective", "pg_key"], how="full", coalesce=True
        )
        .with_columns((pl.col("candidate_busbw_Bps") / pl.col("baseline_busbw_Bps")).alias("ratio"))
        .sort("collective", "pg_key")
    )


def _stragglers(document: Mapping[str, Any]) -> set[int]:
    return {int(r) for r in (document.get("across_ranks") or {}).get("stragglers") or ()}


def _efficiencies(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], notes: list[str]
) -> tuple[float | None, float | None]:
    step_base, step_cand = _median(baseline, "step_us"), _median(candidate, "step_us")
    if not step_base or not step_cand:
        notes.append("a run has no step time: no efficiency")
        return None, None
    batches = (_local_batch(baseline), _local_batch(candidate))
    batch_ratio = batches[1] / batches[0] if None not in batches and batches[0] else 1.0  # type: ignore[operator]
    if None in batches:
        notes.append("local batch not recorded in both summaries: assumed the same (give --local-batch)")
    measured = batch_ratio * step_base / step_cand
    t_base, t_cand = _t_pred(baseline), _t_pred(candidate)
    if not t_base or t_cand is None:
        notes.append("no alpha-beta prediction in both summaries: no predicted efficiency")
        return measured, None
    exposed = _median(baseline, "exposed_comm_us") or 0.0
    predicted_step = step_base + exposed * (t_cand / t_base - 1)
    return measured, batch_ratio * step_base / predicted_step if predicted_step > 0 else None


def scaling_analysis(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> Scaling:
    """The scale-up post-mortem of two summary documents of different world sizes."""
    notes: list[str] = []
    devices = [
        sorted(str(d) for d in (doc.get("run") or {}).get("devices") or ()) for doc in (baseline, candidate)
    ]
    if devices[0] != devices[1]:
        notes.append("the devices differ too: the efficiency mixes the new size with the new hardware")
    measured, predicted = _efficiencies(baseline, candidate, notes)
    step_cand = _median(candidate, "step_us") or 1.0
    factors = _factors(baseline, candidate, step_cand)
    sizes = [int((d.get("run") or {}).get("world_size") or 0) for d in (baseline, candidate)]
    largest = factors.sort("delta_us", descending=True).row(0, named=True)
    sentence = (
        f"Scaling {sizes[0]} -> {sizes[1]} GPUs: measured efficiency {_pct(measured)}, alpha-beta model "
        f"{_pct(predicted)}; the largest loss is {largest['factor']} "
        f"({largest['delta_us'] / 1000:+.2f} ms per step)."
    )
    return Scaling(
        baseline_world_size=sizes[0],
        candidate_world_size=sizes[1],
        measured_efficiency=measured,
        predicted_efficiency=predicted,
        factors=factors,
        new_stragglers=sorted(_stragglers(candidate) - _stragglers(baseline)),
        busbw=busbw_table(baseline, candidate),
        notes=notes,
        sentence=sentence,
    )


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0%}"
