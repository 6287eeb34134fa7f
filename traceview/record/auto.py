"""The drop-in recorder: under `traceview record`, every Python process of the command that imports PyTorch
records itself, with no change to the script (docs/run-manifest.md, "Drop-in recording").

The start-up hook (`traceview/record/hook/sitecustomize.py`) calls `start(torch)` once PyTorch is imported.
From then on each end of a step (`traceview.record.steps`: the job's optimizer steps, or `--step-on`) counts:
at the first, the model is found (`traceview.record.observe`); once the process group is up (where the
launcher says there will be one), the profiler starts with the wait/warmup/active window counted in the job's
own step indices (its trace's `ProfilerStep#N` is the job's step N); when the window ends the rank's trace and
its part of the manifest are written and every hook is removed. A process that never steps records nothing.

Nothing here may break the job: an error in a hook stands the recorder down with one line on stderr. A job
that enters `traceview.profile()` records itself (`hand_over`), one that starts its own torch profiler stands
the recorder down first (the two would corrupt each other's sessions).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from traceview.options.manifest import ManifestProfiler
from traceview.record.observe import BatchObserver, model_chain
from traceview.record.parts import (
    RUN_DIR_ENV,
    RecordSettings,
    merge_parts,
    part_name,
    settings_from_env,
    trace_name,
    write_part,
)
from traceview.record.rank_facts import (
    MeasuredModel,
    RankRecording,
    profiler_activities,
    profiler_options,
    rank_of,
    rank_part,
)
from traceview.record.steps import FunctionSteps, OptimizerSteps, is_main_script
from traceview.record.trace_export import export_trace

WORLD_SIZE_ENV = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
"""Where a launcher says how many processes the job has: above 1, the recorder waits for the process group."""
PROCESS_GROUP_WAIT_STEPS = 20
"""Steps the window waits, at most, for a process group the launcher announced but the job never created."""
PREFIX = "traceview record"

_ARMED: dict[str, Recorder] = {}
"""The process's recorder, once `start` armed it."""


def say(message: str) -> None:
    """One line on the job's stderr, marked as ours."""
    sys.stderr.write(f"{PREFIX}: {message}\n")
    sys.stderr.flush()


def _expects_process_group() -> bool:
    sizes = (os.environ.get(name, "") for name in WORLD_SIZE_ENV)
    return any(size.isdigit() and int(size) > 1 for size in sizes)


class Recorder:
    """One process's drop-in recording; `state` is watching, recording, done or stood down."""

    def __init__(self, torch: Any, settings: RecordSettings, run_dir: Path) -> None:
        self.torch, self.settings, self.run_dir = torch, settings, run_dir
        self.state = "watching"
        self.step = 0  # the job's step in progress: steps ended so far
        self.window_start: int | None = None
        self.profiler: Any = None
        self.trace: Path | None = None
        self.observer: BatchObserver | None = None
        self.own_call = False
        self._recorded_by: int | None = None  # a rank another process recorded already
        self.steps: OptimizerSteps | FunctionSteps
        if settings.step_on:
            self.steps = FunctionSteps(settings.step_on, self.on_step_end)
        else:
            self.steps = OptimizerSteps(torch, self.on_step_end)

    def on_step_end(self) -> None:
        """The job's step `self.step` ended: count it, find the model, move the window; never raise."""
        if self.state not in ("watching", "recording"):
            return
        try:
            self._step_ended()
        except Exception as error:  # the job must go on whatever the recorder meets
            self.stand_down(f"stopped in this process: {type(error).__name__}: {error}")

    def _step_ended(self) -> None:
        ended, self.step = self.step, self.step + 1
        if self.observer is None:
            found = self.steps.optimizer_params() if isinstance(self.steps, OptimizerSteps) else set()
            self.observer = BatchObserver(self.torch, model_chain(self.torch, found))
        else:
            self.observer.end_step(ended)
        if self.profiler is None:
            self._maybe_start()
            return
        with self._ours():
            self.profiler.step()
        if self._recorded_by is not None:
            self.stand_down(
                f"rank {self._recorded_by} is recorded already in {self.run_dir} by another process"
            )
        elif self.trace is not None:
            self._finish()

    @contextlib.contextmanager
    def _ours(self) -> Iterator[None]:
        """Mark the profiler calls the recorder makes itself (any other start is the job's own profiler)."""
        self.own_call = True
        try:
            yield
        finally:
            self.own_call = False

    def _maybe_start(self) -> None:
        """Start the profiler at step `self.step` once the process group is up (or none is coming)."""
        dist = self.torch.distributed
        ready = dist.is_available() and dist.is_initialized()
        if not ready and _expects_process_group() and self.step <= PROCESS_GROUP_WAIT_STEPS:
            return
        if _profiler_enabled(self.torch):
            self.stand_down("the job runs its own profiler: this process is left to it")
            return
        settings = self.settings
        self.window_start = max(settings.wait, self.step)
        schedule = self.torch.profiler.schedule(
            wait=self.window_start, warmup=settings.warmup, active=settings.active, repeat=1
        )
        self.profiler = self.torch.profiler.profile(
            activities=self._activities()[0],
            schedule=schedule,
            on_trace_ready=self._save,
            record_shapes=settings.record_shapes,
            with_flops=settings.with_flops,
            **profiler_options(self.torch),
        )
        self.state = "recording"
        with self._ours():
            self.profiler.start()
            for _ in range(self.step):  # the profiler counts from 0: bring it to the job's step
                self.profiler.step()

    def _activities(self) -> tuple[list[Any], list[str]]:
        return profiler_activities(self.torch, tuple(self.settings.activities))

    def _save(self, finished: Any) -> None:
        """`on_trace_ready`: write the rank's trace, unless another process of this rank wrote one."""
        if self.state != "recording":
            return
        rank = rank_of(self.torch)
        if (self.run_dir / trace_name(rank)).exists() or (self.run_dir / part_name(rank)).exists():
            self._recorded_by = rank
            return
        self.trace = export_trace(finished, self.run_dir, rank)

    def recorded_steps(self) -> list[int]:
        """The job's steps the trace holds: the active ones that ended before it was written."""
        if self.window_start is None:
            return []
        first = self.window_start + self.settings.warmup
        return list(range(first, min(first + self.settings.active, self.step)))

    def _finish(self, notes: tuple[str, ...] = ()) -> None:
        """The trace is written: close the profiler, remove every hook, write the rank's part."""
        self.state = "done"
        self._close_profiler()
        self._remove_hooks()
        rank = rank_of(self.torch)
        write_part(self.run_dir, rank, rank_part(self._recording(rank, notes), self.torch))
        if rank == 0:
            merge_parts(self.run_dir)

    def _recording(self, rank: int, notes: tuple[str, ...]) -> RankRecording:
        steps, settings, names = self.recorded_steps(), self.settings, self._activities()[1]
        step_name = "optimizer step" if isinstance(self.steps, OptimizerSteps) else "step"
        profiler = ManifestProfiler(
            wait=self.window_start,
            warmup=settings.warmup,
            active=len(steps),
            repeat=1,
            record_shapes=settings.record_shapes,
            with_flops=settings.with_flops,
            activities=names,
        )
        window = []
        if self.window_start is not None and self.window_start > settings.wait:
            window = [
                f"the window started at step {self.window_start}, not {settings.wait}: once the process "
                "group was up"
            ]
        return RankRecording(
            run_dir=self.run_dir,
            rank=rank,
            settings=settings,
            activities=names,
            profiler=profiler,
            traced=True,
            steps_source=self.steps.describe(),
            measured=self.observer.measured(steps, step_name) if self.observer and steps else MeasuredModel(),
            notes=(*window, *notes),
        )

    def _close_profiler(self) -> None:
        """Stop the profiler (a window still recording is written by `_save`)."""
        profiler, self.profiler = self.profiler, None
        if profiler is not None:
            with self._ours(), contextlib.suppress(Exception):
                profiler.__exit__(None, None, None)

    def _remove_hooks(self) -> None:
        self.steps.close()
        if self.observer is not None:
            self.observer.close()

    def stand_down(self, why: str | None) -> None:
        """Stop recording in this process for good, writing nothing; `why` (None: silently) on stderr."""
        if self.state in ("done", "stood down"):
            return
        self.state = "stood down"
        self._close_profiler()
        self._remove_hooks()
        if why:
            say(why)

    def at_exit(self) -> None:
        """The process ends: a window cut short is written as far as it got; else say why nothing was."""
        try:
            self._exiting()
        except Exception as error:  # never a traceback at the job's exit
            say(f"rank {rank_of(self.torch)} not recorded: {type(error).__name__}: {error}")

    def _exiting(self) -> None:
        if self.state == "recording" and self.recorded_steps():
            ended = self.step
            self._close_profiler()  # writes the trace: the open step is the process's end
            if self.trace is not None:
                cut = (
                    f"the job ended during the window: the trace's last step, ProfilerStep#{ended}, is the "
                    "process's end, not a training step",
                )
                self._finish(cut)
                return
        if self.state in ("watching", "recording") and self.step > 0:
            start = self.window_start if self.window_start is not None else self.settings.wait
            self.stand_down(
                f"rank {rank_of(self.torch)} ended after {self.step} step(s), before its window recorded "
                f"one (steps from {start + self.settings.warmup}): nothing recorded; lower --wait/--warmup "
                "or run more steps"
            )
        self.stand_down(None)


def _profiler_enabled(torch: Any) -> bool:
    """Whether a profiler session is on in this process (the job's own)."""
    enabled = getattr(torch._C._autograd, "_profiler_enabled", None)
    return bool(enabled()) if enabled is not None else False


def _guard_profilers(torch: Any) -> None:
    """Before any profiler the job starts itself, stand the recorder down (two sessions corrupt each
    other)."""
    legacy = torch.autograd.profiler.profile
    original: Callable[..., Any] | None = getattr(legacy, "_prepare_trace", None)
    if original is None:
        return

    @functools.wraps(original)
    def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _ARMED.get("recorder")
        if recorder is not None and not recorder.own_call and recorder.state == "recording":
            recorder.stand_down("the job starts its own profiler: this process is left to it")
        return original(self, *args, **kwargs)

    legacy._prepare_trace = prepare


def start(torch: Any) -> Recorder | None:
    """Arm the drop-in recorder in this process (the start-up hook calls it once PyTorch is imported)."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if "recorder" in _ARMED or not run_dir:
        return _ARMED.get("recorder")
    recorder = _ARMED["recorder"] = Recorder(torch, settings_from_env(), Path(run_dir))
    _guard_profilers(torch)
    atexit.register(recorder.at_exit)
    steps = recorder.steps
    if isinstance(steps, FunctionSteps) and is_main_script(steps.module):
        steps.watch_main()
    elif isinstance(steps, FunctionSteps) and steps.module in sys.modules:
        steps.patch(sys.modules[steps.module])  # imported before PyTorch (or still importing it)
    return recorder


def step_module_imported(module: ModuleType) -> None:
    """The module `--step-on` names is imported: wrap its function (once PyTorch armed the recorder)."""
    recorder = _ARMED.get("recorder")
    steps = recorder.steps if recorder is not None else None
    if isinstance(steps, FunctionSteps) and not steps.patch(module) and not steps.wrapped:
        say(f"--step-on: {module.__name__} has no function {steps.name}: steps are not found in this process")


def current() -> Recorder | None:
    """The drop-in recorder of this process, if `traceview record` armed one."""
    return _ARMED.get("recorder")


def hand_over() -> None:
    """`traceview.profile()` records this process: the drop-in recorder stands down, silently."""
    recorder = _ARMED.get("recorder")
    if recorder is not None:
        recorder.stand_down(None)
