"""The advice's reading of the critical path (docs/metrics.md, "Critical path" and section 5): the facts the
path gives (each category's median time, the device's idle on the path, the holders of that idle across
ranks) and what each idle category means for the user, as data.

A holder is cited when it holds at least `CITED_SHARE` of the median step; the holders below say so in one
clause, so a sliver of the idle never names the cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import polars as pl

from traceview.across_ranks.analysis import CrossRank
from traceview.core.sanitize import printable
from traceview.critical_path.analysis import CriticalPath
from traceview.critical_path.categories import CATEGORIES, IDLE_CATEGORIES
from traceview.critical_path.holders import REST

CITED_SHARE = 0.03
"""A holder under this share of the median step is not cited as a cause (docs/metrics.md section 5)."""
CITED_HOLDERS = 3
"""How many idle holders the facts keep (most time first)."""
NAME_CHARS = 80
"""A holder's name is cut to this many characters in a sentence."""

IDLE_CAUSES: Mapping[str, str] = {
    "blocking_module_load": (
        "kernels' modules are loaded on their first call inside the step: warm up before the measured steps "
        "(or load modules eagerly, CUDA_MODULE_LOADING=EAGER)"
    ),
    "blocking_alloc": (
        "the caching allocator is off or thrashing: keep PyTorch's caching allocator on "
        "(PYTORCH_NO_CUDA_MEMORY_CACHING unset), reuse buffers, leave memory headroom"
    ),
    "blocking_copy": (
        "the host waits in a copy: pin the host memory and copy with non_blocking=True, or read device "
        "values (`.item()`, `.cpu()`) once, outside the step's hot path"
    ),
    "blocking_sync": (
        "the host waits for the device: remove synchronisations from the step (`.item()`, `.cpu()`, "
        "torch.cuda.synchronize)"
    ),
    "graph_replay": "the host waits in a graph launch: replay fewer, larger graphs",
    "launch": (
        "the host launches work slower than the GPU runs it: CUDA graphs or fusion (torch.compile) would "
        "remove launches"
    ),
    "host_data": "the data loader feeds the step late: more workers, pinned memory, prefetching",
    "host_optimizer": "the optimizer's host code: a fused or foreach optimizer (fused=True)",
    "host_other": "operators' host-side code (dispatch): torch.compile or CUDA graphs would cut it",
    "host_python": "Python between operators: torch.compile, or move host work out of the step",
    "other": "no event the trace records (untraced host code, or the profiler's own overhead)",
}
"""What an idle category means, and what to do about it (docs/metrics.md section 5)."""
REPLAYED_LAUNCH = "launches outside the replayed graphs: capture the rest of the step, or fuse it"
"""`launch`'s meaning when the step already replays CUDA/HIP graphs (never advise graphs to a replay)."""


class HasPath(Protocol):
    """What the facts read: the run's critical path, when it was computed, and the stragglers across ranks
    names (their idle is their lateness: the straggler advice's stake, not the idle's)."""

    @property
    def path(self) -> CriticalPath | None: ...

    @property
    def crossrank(self) -> CrossRank | None: ...


def _median_idle(path: CriticalPath, stragglers: list[int]) -> float:
    """The median over the (rank, step) rows of the ranks not named stragglers (every row where all are) of
    the device's idle on the path (the host-side categories)."""
    idle = pl.sum_horizontal([f"{c}_us" for c in IDLE_CATEGORIES])
    rows = path.per_step.filter(~pl.col("rank").is_in(stragglers))
    value = (rows if rows.height else path.per_step).select(idle.median()).item()
    return float(value) if value is not None else 0.0


def _idle_holders(path: CriticalPath, stragglers: list[int]) -> pl.DataFrame:
    """The idle holders over the ranks not named stragglers (every rank where all are): per (category,
    name), the mean over those ranks of the time per step."""
    ranks = path.per_rank.filter(~pl.col("rank").is_in(stragglers)).height
    found = path.idle_holders().filter(~pl.col("rank").is_in(stragglers)) if ranks else path.idle_holders()
    ranks = max(ranks or path.per_rank.height, 1)
    return (
        found.group_by("category", "name")
        .agg((pl.col("us_per_step").sum() / ranks).alias("us"), (pl.col("calls_per_step").sum() / ranks))
        .sort(["us", "name"], descending=[True, False])
        .head(CITED_HOLDERS)
    )


def _top_holders(path: CriticalPath) -> pl.DataFrame:
    """Per category, the holder of the most time over the run (the mean over ranks of its time per step)."""
    ranks = max(path.per_rank.height, 1)
    return (
        path.holders.filter(pl.col("category") != REST)
        .group_by("category", "name")
        .agg((pl.col("us_per_step").sum() / ranks).alias("us"), (pl.col("calls_per_step").sum() / ranks))
        .sort(["us", "category", "name"], descending=[True, False, False])
        .group_by("category", maintain_order=True)
        .first()
    )


def _top_facts(path: CriticalPath) -> tuple[dict[str, float], dict[str, str]]:
    """`path_top_<category>_us`, `_calls` and the word `_name`: each category's top holder."""
    numbers: dict[str, float] = {}
    words: dict[str, str] = {}
    for row in _top_holders(path).iter_rows(named=True):
        numbers[f"path_top_{row['category']}_us"] = float(row["us"])
        numbers[f"path_top_{row['category']}_calls"] = float(row["calls_per_step"])
        words[f"path_top_{row['category']}_name"] = printable(row["name"], NAME_CHARS)
    return numbers, words


def path_facts(measured: HasPath) -> tuple[dict[str, float], dict[str, str]]:
    """The path's facts: `path_step_us`, `path_idle_us`, `path_<category>_us` (run medians) and the idle
    holders `path_idle_holder_<i>_us`, `_calls` (per step) with words `_name`, `_category`; each category's
    top holder (`_top_facts`)."""
    path = measured.path
    if path is None or path.per_step.height == 0:
        return {}, {}
    stragglers = list(measured.crossrank.stragglers) if measured.crossrank is not None else []
    numbers = {f"path_{c}_us": float(path.run_median.get(f"{c}_us") or 0.0) for c in CATEGORIES}
    numbers |= {
        "path_step_us": float(path.run_median.get("step_us") or 0.0),
        "path_idle_us": _median_idle(path, stragglers),
    }
    top_numbers, words = _top_facts(path)
    numbers |= top_numbers
    for index, row in enumerate(_idle_holders(path, stragglers).iter_rows(named=True)):
        numbers[f"path_idle_holder_{index}_us"] = float(row["us"])
        numbers[f"path_idle_holder_{index}_calls"] = float(row["calls_per_step"])
        words[f"path_idle_holder_{index}_name"] = printable(row["name"], NAME_CHARS)
        words[f"path_idle_holder_{index}_category"] = row["category"]
    return numbers, words
