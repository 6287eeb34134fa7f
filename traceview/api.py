"""The public Python API: what a notebook user calls (`traceview.analyze`, `traceview.load_rank`).

    import traceview
    result = traceview.analyze("runs/nightly/", local_batch=16_384)
    result.verdict                      # the headline sentence
    result.time_budget                  # polars DataFrame, one row per (rank, step)
    result.kernels, result.operators    # the heaviest kernels and operators of each rank
    result.summary()["prediction"]      # the same document as `traceview summary RUN --json`
    result.to_html("report.html")

Everything here is a thin layer over the command line's own path (parse -> analyse -> render), so the API and
the CLI give the same figures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import polars as pl

from traceview.model.trace import RankTrace, Run
from traceview.options.user import UserOptions
from traceview.parsers import kineto
from traceview.reduce.analysis import RunAnalysis
from traceview.reduce.analysis import analyze as analyze_run

RunSpec = str | Path | Run
"""A trace file, a folder of per-rank traces, a glob, a `run.json`, or a `Run` already loaded."""


def load_rank(path: str | Path) -> RankTrace:
    """One rank's Kineto trace (`.json` or `.json.gz`), parsed and validated. Raises `InputError`."""
    return kineto.parse(path).validate()


@dataclass(frozen=True)
class Analysis:
    """Every result of one run, with its tables as polars DataFrames. `raw` is the full `RunAnalysis` the
    renderers read."""

    raw: RunAnalysis

    @property
    def verdict(self) -> str:
        """The headline: the verdict sentence (`raw.verdict.label` is its one-word form)."""
        return self.raw.verdict.sentence

    @property
    def time_budget(self) -> pl.DataFrame:
        """One row per (rank, step): T_comp, T_comm, overlap, exposed communication, idle, gammas (docs/metrics.md)."""
        return self.raw.budget.per_step

    @property
    def collectives(self) -> pl.DataFrame:
        """One row per communication kernel (and CPU-only collective call), linked to its call, with bytes and
        bus bandwidth; empty when the run has none."""
        return _frame(self.raw.collectives.kernels if self.raw.collectives else None)

    @property
    def instances(self) -> pl.DataFrame:
        """One row per collective instance matched across ranks, with its skew, last rank and transfer time."""
        return _frame(self.raw.crossrank.instances if self.raw.crossrank else None)

    @property
    def stragglers(self) -> pl.DataFrame:
        """One row per rank: waits, times last, lateness, whether it is a straggler and the likely cause."""
        return _frame(self.raw.crossrank.per_rank if self.raw.crossrank else None)

    @property
    def kernels(self) -> pl.DataFrame:
        """One row per (rank, kernel name) of each rank's heaviest kernels (the summary keeps 24 per rank):
        class, key, count, total, median, p99 and longest duration (docs/metrics.md, "Kernels and
        operators")."""
        return _frame(self.raw.kernels.parts.top_kernels if self.raw.kernels else None)

    @property
    def operators(self) -> pl.DataFrame:
        """One row per (rank, operator) of each rank's operators of most kernel time (the innermost operator
        that launched each kernel): calls, kernels, kernel time, FLOPs and bytes from shapes, achieved
        FLOP/s."""
        return _frame(self.raw.kernels.parts.operators if self.raw.kernels else None)

    @property
    def kernel_classes(self) -> pl.DataFrame:
        """One row per (rank, step, kernel class): the class's time, its time alone (the compute classes' with
        the `overlap` row add up to T_comp), the kernels and their summed duration."""
        return _frame(self.raw.kernels.parts.class_steps if self.raw.kernels else None)

    @property
    def dimensions(self) -> pl.DataFrame:
        """One row per parallelism dimension (and `unknown`): its groups, confidence, link and its cost per step
        (calls, bytes, T_comm, exposed, waiting, transfer, busbw: medians over its ranks and steps)."""
        return _frame(self.raw.dimensions.per_dimension if self.raw.dimensions else None)

    @property
    def process_groups(self) -> pl.DataFrame:
        """One row per process group: its dimension, confidence, best guess and the evidence seen."""
        return _frame(self.raw.dimensions.groups if self.raw.dimensions else None)

    @property
    def bubbles(self) -> pl.DataFrame:
        """One row per idle gap of the device inside a step, with its cause."""
        return _frame(self.raw.bubbles.gaps if self.raw.bubbles else None)

    def summary(self) -> dict[str, Any]:
        """The JSON summary as Python data: equal to what `traceview summary RUN --json` prints."""
        from traceview.reports.json.summary import render_json

        document: dict[str, Any] = json.loads(render_json(self.raw))
        return document

    def to_json(self, path: str | Path) -> Path:
        """Write the JSON summary to `path`; returns it."""
        from traceview.reports.json.summary import render_json

        target = Path(path)
        target.write_text(render_json(self.raw) + "\n", encoding="utf-8")
        return target

    def to_html(self, path: str | Path, plotlyjs: str = "inline") -> Path:
        """Write the self-contained HTML report to `path` (`plotlyjs="cdn"` for a smaller page); returns it."""
        from traceview.reports.html.page import render_html

        target = Path(path)
        target.write_text(render_html(self.raw, plotlyjs=plotlyjs), encoding="utf-8")
        return target


def _frame(frame: pl.DataFrame | None) -> pl.DataFrame:
    return frame if frame is not None else pl.DataFrame()


def analyze(
    run: RunSpec,
    *,
    comm_patterns: Sequence[str] = (),
    compute_patterns: Sequence[str] = (),
    nccl_logs: Sequence[str | Path] = (),
    ranks_per_host: int | None = None,
    virtual_stages: int = 1,
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    max_trace_bytes: int | None = None,
    params: float | None = None,
    local_batch: float | None = None,
    peak_flops: str | float | None = None,
    efficiency: float | None = None,
    bandwidth: str | float | None = None,
    host_bandwidth: str | float | None = None,
    alpha: str | float | None = None,
    nic: str | None = None,
    gpus_per_node: int | None = None,
    dtype: str | None = None,
    dims: str | None = None,
    shape: str | None = None,
    links: str = "table",
) -> Analysis:
    """Analyse a run: summarise every rank (in `workers` processes, or on Ray with `executor="ray"`), then
    run every cross-rank analysis; return the results.

    `run` is a trace file, a folder, a glob, a `run.json` or a loaded `Run`. The keywords are the command
    line's options (`traceview summary --help`; one definition, `traceview.options.user.UserOptions`):
    `nccl_logs` NCCL_DEBUG logs to join (logs inside the run folder are found too); the alpha-beta model's
    inputs `params`, `local_batch`, `peak_flops` ("312T" or 312e12), `efficiency`, `bandwidth` ("300G,25G"),
    `host_bandwidth` (collectives run on the host inside a host: gloo, MPI), `alpha` ("1,5", microseconds),
    `nic`, `gpus_per_node`, `dtype`; the parallelism layout `dims` ("tp=8,pp=4,dp=*"), the model's `shape`
    ("hidden=4096,seq=2048,layers=32") and `links` ("table" or "measured": B and alpha fitted on this run).
    Raises a `TraceviewError` subclass for
    bad input or options, naming the option.
    """
    from traceview.options.run import build_options
    from traceview.reduce.pipeline import analyze_files

    stated = {name: value for name, value in locals().items() if name in _OPTION_NAMES}
    user = UserOptions(**stated)
    if isinstance(run, Run):
        return Analysis(analyze_run(run, build_options(run.source, user)))
    return Analysis(analyze_files(run, build_options(run, user)))


_OPTION_NAMES = frozenset(f.name for f in fields(UserOptions))
