"""The public Python API: what a notebook user calls (`traceview.analyze`, `traceview.load_rank`).

    import traceview
    result = traceview.analyze("runs/nightly/", local_batch=16_384)
    result.verdict                      # the headline sentence
    result.time_budget                  # polars DataFrame, one row per (rank, step)
    result.kernels, result.operators    # the heaviest kernels and operators of each rank
    result.summary()["prediction"]      # the same document as `traceview summary RUN --json`
    result.to_html("report.html")

Everything here is a thin layer over the command line's own path (parse -> analyse -> render), so the API and
the CLI give the same figures. Every bad input, an unknown keyword included, is a `traceview.TraceviewError`
naming the argument as the API spells it (`local_batch`, not `--local-batch`); tables keep their units in
their column names (`_us`), `to_ms` turns them into milliseconds.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import polars as pl

from traceview.core.errors import TraceviewError, UsageError
from traceview.core.output import write_output
from traceview.core.records import record
from traceview.model.trace import RankTrace, Run
from traceview.options.user import UserOptions
from traceview.parsers import kineto
from traceview.reduce.analysis import RunAnalysis
from traceview.reduce.analysis import analyze as analyze_run

if TYPE_CHECKING:
    from traceview.flight_recorder.analysis import HangAnalysis
    from traceview.reports.html.plots import Plots

RunSpec = str | Path | Run | Sequence[str | Path]
"""A trace file, a folder of per-rank traces, a glob, a `run.json`, several files, or a `Run` already loaded.
"""

Params = ParamSpec("Params")
Result = TypeVar("Result")
_FLAGS = {f.metadata["flag"].flag: f.name for f in fields(UserOptions)}
_FLAG = re.compile("|".join(re.escape(flag) for flag in sorted(_FLAGS, key=len, reverse=True)) + r"(?![\w-])")


def in_api_terms(error: TraceviewError) -> TraceviewError:
    """`error` with every command-line flag of a shared option named as the API spells it (`--local-batch`
    -> `local_batch`): the same error class, the same problem."""
    text = _FLAG.sub(lambda found: _FLAGS[found[0]], str(error))
    if text == str(error):
        return error
    return type(error)(text) if isinstance(error, UsageError) else UsageError(text)


def _unknown_argument(function: Callable[..., Any], error: TypeError, given: dict[str, Any]) -> UsageError:
    known = list(inspect.signature(function).parameters)
    unknown = [name for name in given if name not in known]
    if unknown:
        near = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else f" (known: {', '.join(known)})"
        return UsageError(f"{function.__name__}: unknown argument {unknown[0]!r}{hint}")
    return UsageError(f"{function.__name__}: {error}")


def api_call(function: Callable[Params, Result]) -> Callable[Params, Result]:
    """A public function whose every bad call is a `TraceviewError` in the API's terms: arguments that do not
    bind (an unknown or missing one) before anything runs, option errors renamed (`in_api_terms`)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def call(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise _unknown_argument(function, exc, dict(kwargs)) from None
        try:
            return function(*args, **kwargs)
        except TraceviewError as exc:
            renamed = in_api_terms(exc)
            if renamed is exc:
                raise
            raise renamed from None

    return call


def _path(value: object, name: str) -> Path:
    """`value` as a path; anything else a `UsageError` naming the argument."""
    if isinstance(value, str | Path) and str(value):
        return Path(value)
    raise UsageError(f"{name}: expected a path (str or pathlib.Path), got {value!r}")


def _run_spec(run: object) -> str | Path | Run | list[str | Path]:
    """`run` checked: a path, a glob, a `Run`, or a list of paths; anything else a `UsageError`."""
    if isinstance(run, Run | Path) or (isinstance(run, str) and run):
        return run
    if isinstance(run, list | tuple) and run and all(isinstance(item, str | Path) for item in run):
        return list(run)
    raise UsageError(
        f"run: expected a trace file, a folder, a glob, a run.json, a list of files or a Run, got {run!r}"
    )


@api_call
def load_rank(path: str | Path) -> RankTrace:
    """One rank's Kineto trace (`.json`, `.json.gz` or another compressed form), parsed and validated.
    Raises `InputError`."""
    return kineto.parse(_path(path, "path")).validate()


def to_ms(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every microsecond column (`..._us`) in milliseconds, renamed `..._ms`; others
    as they are."""
    if not isinstance(frame, pl.DataFrame):
        raise UsageError(f"to_ms: expected a polars DataFrame, got {type(frame).__name__}")
    micro = [name for name in frame.columns if name.endswith("_us")]
    return frame.with_columns(
        (pl.col(name) / 1000).alias(name.removesuffix("_us") + "_ms") for name in micro
    ).select(name.removesuffix("_us") + "_ms" if name in micro else name for name in frame.columns)


@record
class Analysis:
    """Every result of one run, with its tables as polars DataFrames (units in the column names: `_us`,
    `_Bps`; `traceview.to_ms` for milliseconds). `raw` is the full `RunAnalysis` the renderers read. A
    notebook shows it as its verdict card (`_repr_html_`)."""

    raw: RunAnalysis

    @property
    def verdict(self) -> str:
        """The headline: the verdict sentence (`label` is its one-word form)."""
        return self.raw.verdict.sentence

    @property
    def label(self) -> str:
        """The verdict's label: `compute-bound`, `communication-bound`, `straggler-bound`, ...
        (docs/metrics.md)."""
        return self.raw.verdict.label

    @property
    def figures(self) -> dict[str, float | None]:
        """The run's headline figures by name: what `--fail-on` can name (medians of the time budget, gamma,
        stragglers, ...)."""
        return self.raw.gate_figures()

    def __repr__(self) -> str:
        header, figures = self.raw.header, self.raw.gate_figures()
        step, gamma = figures.get("step_us"), figures.get("gamma")
        step_text = "-" if step is None else f"{step / 1000:.3g} ms"
        gamma_text = "-" if gamma is None else f"{gamma:.3g}"
        source = header.source if len(header.source) <= 60 else header.source[:57] + "..."
        return (
            f"<traceview.Analysis {source!r}: {len(header.ranks)} rank(s), {self.label}, "
            f"median step {step_text}, gamma {gamma_text}>"
        )

    def _repr_html_(self) -> str:
        """The verdict card: label, sentence and headline figures (`traceview.reports.html.card`)."""
        from traceview.reports.html.card import verdict_card

        return verdict_card(self.raw)

    @property
    def flight_recorder(self) -> HangAnalysis | None:
        """The job's Flight Recorder dumps read together (`flight_recorder=`, run.json's `flight_recorder`),
        as `traceview.hang` returns them; None without dumps."""
        return self.raw.flight_recorder

    @property
    def recommendations(self) -> pl.DataFrame:
        """What to change, highest stake first: `stake_share` (its share of the median step), `rule`,
        `sentence`, `time_per_step_us` (the time per step at stake); the card shows the first three."""
        schema = {
            "stake_share": pl.Float64,
            "rule": pl.Utf8,
            "sentence": pl.Utf8,
            "time_per_step_us": pl.Float64,
        }
        return pl.DataFrame(self.raw.recommendation_rows(), schema=schema)

    @property
    def plot(self) -> Plots:
        """Plotly figures of the run, shown inline in Jupyter: `plot.time_budget()`, `plot.stragglers()`,
        `plot.collectives()` (times in milliseconds)."""
        from traceview.reports.html.plots import Plots

        return Plots(self.raw)

    @property
    def time_budget(self) -> pl.DataFrame:
        """One row per (rank, step): T_comp, T_comm, overlap, exposed communication, idle, gammas
        (docs/metrics.md)."""
        return self.raw.budget.per_step

    @property
    def collectives(self) -> pl.DataFrame:
        """One row per communication kernel (and CPU-only collective call), linked to its call, with bytes and
        bus bandwidth; empty when the run has none."""
        return _frame(self.raw.collectives.kernels if self.raw.collectives else None)

    @property
    def instances(self) -> pl.DataFrame:
        """One row per collective instance matched across ranks, with its skew, last rank and
        transfer time."""
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
        """One row per parallelism dimension (and `unknown`): its groups, confidence, link and its cost per
        step (calls, bytes, T_comm, exposed, waiting, transfer, busbw: medians over its ranks and steps)."""
        return _frame(self.raw.dimensions.per_dimension if self.raw.dimensions else None)

    @property
    def process_groups(self) -> pl.DataFrame:
        """One row per process group: its dimension, confidence, best guess and the evidence seen."""
        return _frame(self.raw.dimensions.groups if self.raw.dimensions else None)

    @property
    def critical_path(self) -> pl.DataFrame:
        """One row per (rank, step): what held each microsecond of the step on its critical path, a
        `<category>_us` column per category (compute classes, communication, peer waits, launches, blocking
        calls, host code) summing to `step_us` (docs/metrics.md, "Critical path")."""
        path = self.raw.critical_path
        return _frame(path.per_step if path else None)

    @property
    def critical_path_holders(self) -> pl.DataFrame:
        """Per rank, what held its steps' critical path the longest, by name: category, name, microseconds
        per step, share of the rank's median step, calls per step (at most 8 per rank and a `rest` row)."""
        path = self.raw.critical_path
        return _frame(path.holders if path else None)

    @property
    def replay(self) -> pl.DataFrame:
        """One row per lever of the replay (lever, step_us, gamma, saved_us, notes; docs/metrics.md,
        "Replay"): the run's own step skeletons replayed with one change each."""
        return _frame(self.raw.replay.levers if self.raw.replay else None)

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
        """Write the JSON summary to `path` (atomically, never over one of the run's inputs); returns it."""
        from traceview.reports.json.summary import render_json

        target = _path(path, "path")
        self._write(target, render_json(self.raw) + "\n")
        return target

    def to_html(self, path: str | Path, plotlyjs: str = "inline") -> Path:
        """Write the self-contained HTML report to `path` (`plotlyjs="cdn"` for a smaller page; atomically,
        never over one of the run's inputs); returns it."""
        from traceview.reports.html.page import render_html

        target = _path(path, "path")
        if plotlyjs not in ("inline", "cdn"):
            raise UsageError(f"plotlyjs: takes 'inline' or 'cdn', got {plotlyjs!r}")
        self._write(target, render_html(self.raw, plotlyjs=plotlyjs))
        return target

    def _write(self, target: Path, text: str) -> None:
        from traceview.core.output import refuse_inputs

        header = self.raw.header
        inputs = [
            *header.files,
            *(self.raw.nccl.paths if self.raw.nccl else ()),
            *([header.manifest] if header.manifest else []),
        ]
        refuse_inputs(target, inputs, flag="path")
        write_output(target, text, flag="path")


def _frame(frame: pl.DataFrame | None) -> pl.DataFrame:
    return frame if frame is not None else pl.DataFrame()


@api_call
def analyze(
    run: RunSpec,
    *,
    comm_patterns: Sequence[str] = (),
    compute_patterns: Sequence[str] = (),
    nccl_logs: Sequence[str | Path] = (),
    inspector: Sequence[str] = (),
    flight_recorder: Sequence[str | Path] = (),
    run_root: str | Path | None = None,
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
    nics_per_node: int | None = None,
    dtype: str | None = None,
    dims: str | None = None,
    shape: str | None = None,
    links: str = "table",
    levers: Sequence[str] = (),
    run_label: str | None = None,
) -> Analysis:
    """Analyse a run: summarise every rank (in `workers` processes, or on Ray with `executor="ray"`), then
    run every cross-rank analysis; return the results.

    `run` is a trace file, a folder, a glob, a `run.json` or a loaded `Run`. The keywords are the command
    line's options (`traceview summary --help`; one definition, `traceview.options.user.UserOptions`):
    `nccl_logs` NCCL_DEBUG logs to join (logs inside the run folder are found too); `inspector` NCCL Inspector
    JSON output (files, folders, globs) joined to the calls (`summary()["nccl"]["inspector"]`);
    `flight_recorder` the job's Flight Recorder dumps (`.flight_recorder`, as `traceview.hang` reads them);
    the alpha-beta model's inputs `params`, `local_batch`, `peak_flops` ("312T" or 312e12), `efficiency`,
    `bandwidth` ("300G,25G"), `host_bandwidth` (collectives run on the host inside a host: gloo, MPI), `alpha`
    ("1,5", microseconds), `nic`, `gpus_per_node`, `nics_per_node` (NICs per node of the rings across nodes),
    `dtype`; the parallelism layout `dims` ("tp=8,pp=4,dp=*"), the model's `shape` ("hidden=4096,seq=2048")
    and `links` ("table", or "measured": fitted on this run); `levers` the replay's levers ("no_straggler",
    "comm:x2", "ranks:16": docs/metrics.md, "Replay"; default all); `run_label` the summary's `run.label`
    (`--label`); `run_root` a folder a `run.json`'s entries may lie below besides its own (`--run-root`,
    docs/run-manifest.md). Raises a `TraceviewError` for bad input or options, naming the argument as here.
    """
    from traceview.options.run import build_options
    from traceview.reduce.pipeline import analyze_files

    stated = {name: value for name, value in locals().items() if name in _OPTION_NAMES}
    if run_root is not None:
        stated["run_root"] = str(run_root)
    spec = _run_spec(run)
    user = UserOptions(**stated)
    if isinstance(spec, Run):
        return Analysis(analyze_run(spec, build_options(spec.source, user)))
    return Analysis(analyze_files(spec, build_options(spec, user)))


_OPTION_NAMES = frozenset(f.name for f in fields(UserOptions))


@api_call
def hang(paths: str | Path | Sequence[str | Path], *, nccl_logs: Sequence[str | Path] = ()) -> HangAnalysis:
    """PyTorch Flight Recorder dumps of one job (files, folders, globs; pickle or JSON, plain or compressed)
    read together (docs/metrics.md, "Hang forensics"): `.verdict` (`agree`, `unsure`, `divergence`),
    `.headline`, `.findings` (earliest first), `.chains`, `.positions` (the per-group table) and the dumps
    that could not be read (`.unread`, `.missing_ranks`). `nccl_logs`: NCCL_DEBUG logs of the same job whose
    failures are joined (`.nccl_problems`)."""
    from traceview.flight_recorder.job import hang_job

    named = [paths] if isinstance(paths, str | Path) else list(paths)
    if not named or not all(isinstance(item, str | Path) and str(item) for item in named):
        raise UsageError(f"paths: expected Flight Recorder dumps (a path or a list of paths), got {paths!r}")
    return hang_job(named, [_path(log, "nccl_logs") for log in nccl_logs])
