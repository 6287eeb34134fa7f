"""The `kernels` object of the JSON summary (docs/json-schema.md, "kernels"): where the compute time went.

Compact by default: the class medians per rank and over the run, each rank's top kernels and operators, the
roofline, launch and host-side medians per rank, the ranks' link figures and the slow ranks explained; with
`full`, also every (rank, step) row of classes, kernel keys, launches and host phases. `rank`, `step` and
`top` select rows (the `traceview kernels` command); nothing is computed here.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from traceview.reports.json.records import clean, records

from traceview.kernels.analysis import KernelAnalysis
from traceview.kernels.operators import TOP_OPERATORS
from traceview.kernels.slow_rank import SlowRank
from traceview.kernels.top import TOP_KERNELS, TOP_KEYS


def _selected(frame: pl.DataFrame, rank: int | None, step: int | None) -> pl.DataFrame:
    if rank is not None and "rank" in frame.columns:
        frame = frame.filter(pl.col("rank") == rank)
    if step is not None and "step" in frame.columns:
        frame = frame.filter(pl.col("step") == step)
    return frame


def _top(frame: pl.DataFrame, top: int | None) -> pl.DataFrame:
    """The first `top` rows of each rank (of the frame when it has no rank)."""
    if top is None:
        return frame
    if "rank" not in frame.columns:
        return frame.head(top)
    return frame.filter(pl.int_range(pl.len()).over("rank") < top)


def slow_rank_document(found: SlowRank) -> dict[str, Any]:
    """One slow rank against the median rank: the excess, by class, by kernel, the remainder, the sentence."""
    return {
        "rank": found.rank,
        "reference_rank": found.reference_rank,
        "comp_us": clean(found.comp_us),
        "reference_comp_us": clean(found.reference_comp_us),
        "excess_us": clean(found.excess_us),
        "remainder_us": clean(found.remainder_us),
        "sentence": found.sentence,
        "by_class": records(found.by_class),
        "by_kernel": records(found.by_kernel),
    }


def _device(kernels: KernelAnalysis) -> dict[str, Any]:
    device = kernels.device
    spec = device.spec
    return {
        "name": device.name,
        "table_row": None if spec is None else spec.key,
        "peak_flops": {} if spec is None else dict(spec.peak_dense_flops),
        "memory_bytes_per_s": device.memory_bytes_per_s,
        "source": None if spec is None else spec.source,
        "memory_source": None if spec is None else spec.memory_source,
    }


def kernels_document(
    kernels: KernelAnalysis,
    full: bool = False,
    rank: int | None = None,
    step: int | None = None,
    top: int | None = None,
) -> dict[str, Any]:
    """The `kernels` object (module docstring)."""
    parts = kernels.parts
    slow = [kernels.explain(rank)] if rank is not None else list(kernels.slow_ranks)
    document: dict[str, Any] = {
        "device": _device(kernels),
        "linked_share": clean(kernels.linked_share),
        "bounds": {"top_kernels": TOP_KERNELS, "top_keys": TOP_KEYS, "top_operators": TOP_OPERATORS},
        "classes": records(kernels.run_classes),
        "per_rank": records(_selected(kernels.per_rank, rank, None)),
        "run_kernels": records(_top(kernels.run_kernels, top)),
        "run_operators": records(_top(kernels.run_operators, top)),
        "top_kernels": records(_top(_selected(parts.top_kernels, rank, None), top)),
        "operators": records(_top(_selected(parts.operators, rank, None), top)),
        "roofline": records(kernels.roofline),
        "roofline_per_rank": records(_selected(parts.roofline, rank, None)),
        "launches_per_rank": records(_selected(kernels.launches_per_rank, rank, None)),
        "host_per_rank": records(_selected(kernels.host_per_rank, rank, None)),
        "ranks": records(_selected(parts.ranks, rank, None)),
        "slow_ranks": [slow_rank_document(found) for found in slow if found is not None],
    }
    if full or step is not None:
        document |= {
            "per_step": records(_selected(parts.class_steps, rank, step)),
            "key_steps": records(_top(_selected(parts.key_steps, rank, step), None)),
            "launches": records(_selected(parts.launches, rank, step)),
            "host": records(_selected(parts.host, rank, step)),
        }
    return document
