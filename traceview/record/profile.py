"""`traceview.profile()`: record one rank of a training job into a run folder (docs/run-manifest.md,
"Recording"). Needs PyTorch (`pip install 'traceview[record]'`), imported only when a profile starts.

    with traceview.profile() as prof:      # the folder and settings from `traceview record`, else defaults
        for batch in loader:
            train_step(batch)
            prof.step()                     # once per step

Each rank writes `rank<N>.pt.trace.json.gz` (`torch.profiler` with a wait/warmup/active schedule,
`record_shapes`, `with_flops`, CPU and, where there is one, CUDA activity) and its part of the manifest,
`run.rank<N>.json`; rank 0 then merges the parts present into `run.json` (under `traceview record`, which
merges again when the command has exited, at once; otherwise after waiting up to `merge_wait_s` for the
others).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from traceview.core.errors import UsageError
from traceview.options.manifest import ManifestProfiler
from traceview.record import auto
from traceview.record.observe import BatchObserver, model_chain
from traceview.record.parts import (
    DEFAULT_RUN_DIR,
    MERGED_BY_RECORD_ENV,
    RUN_DIR_ENV,
    RecordSettings,
    merge_parts,
    part_paths,
    settings_from_env,
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
from traceview.record.trace_export import export_trace

MERGE_WAIT_S = 30.0
"""How long rank 0 waits, at most, for the other ranks' parts before merging without `traceview record`."""
STEPS_SOURCE = "prof.step() of traceview.profile()"


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise UsageError("traceview.profile needs PyTorch: pip install 'traceview[record]'") from exc


@dataclass
class Profile:
    """A running recording: call `step()` once per training step. `profiler` is the `torch.profiler.profile`;
    `trace` the rank's trace once written."""

    run_dir: Path
    settings: RecordSettings
    profiler: Any = None
    trace: Path | None = None
    steps: int = 0
    _rank: int | None = field(default=None, repr=False)
    _observer: BatchObserver | None = field(default=None, repr=False)

    def step(self) -> None:
        """Mark the end of a training step (the profiler's schedule advances)."""
        self._observe(self.steps)
        self.steps += 1
        self.profiler.step()

    def _observe(self, ended: int) -> None:
        """The model's batch: found at the end of the first step, summed per step after it."""
        if self._observer is None:
            torch = _torch()
            self._observer = BatchObserver(torch, model_chain(torch, set()))
        else:
            self._observer.end_step(ended)

    def _save(self, finished: Any) -> None:
        """`on_trace_ready`: write the rank's trace, gzip, named with its rank."""
        self._rank = rank_of(_torch())
        self.trace = export_trace(finished, self.run_dir, self._rank)

    def measured(self) -> MeasuredModel:
        """The local batch of the recorded steps and the parameters of the model, as measured."""
        if self._observer is None:
            return MeasuredModel()
        self._observer.close()
        first = self.settings.wait + self.settings.warmup
        recorded = list(range(first, min(first + self.settings.active, self.steps)))
        return self._observer.measured(recorded, "step") if recorded else MeasuredModel()


def _await_parts(run_dir: Path, world_size: int | None, wait_s: float) -> None:
    """Rank 0 without `traceview record`: wait (up to `wait_s`) until every rank's part is there."""
    deadline = time.monotonic() + wait_s
    while world_size and len(part_paths(run_dir)) < world_size and time.monotonic() < deadline:
        time.sleep(0.05)


def _finish(recording: Profile, torch: Any, activities: list[str], merge_wait_s: float) -> None:
    """Write this rank's part; rank 0 merges the parts into run.json."""
    settings = recording.settings
    rank = recording._rank if recording._rank is not None else rank_of(torch)
    profiler = ManifestProfiler(
        wait=settings.wait,
        warmup=settings.warmup,
        active=settings.active,
        repeat=1,
        record_shapes=settings.record_shapes,
        with_flops=settings.with_flops,
        activities=activities,
    )
    part = rank_part(
        RankRecording(
            run_dir=recording.run_dir,
            rank=rank,
            settings=settings,
            activities=activities,
            profiler=profiler,
            traced=recording.trace is not None,
            steps_source=STEPS_SOURCE,
            measured=recording.measured(),
        ),
        torch,
    )
    write_part(recording.run_dir, rank, part)
    if rank != 0:
        return
    if not os.environ.get(MERGED_BY_RECORD_ENV):
        _await_parts(recording.run_dir, part.world_size, merge_wait_s)
    merge_parts(recording.run_dir)


@contextlib.contextmanager
def profile(
    run_dir: str | Path | None = None, *, merge_wait_s: float = MERGE_WAIT_S, **settings: Any
) -> Iterator[Profile]:
    """Record this rank into `run_dir` (default: `$TRACEVIEW_RUN_DIR`, set by `traceview record -o DIR`,
    else `traceview-run`). Keyword settings override the environment's: `wait`, `warmup`, `active` (the
    schedule, in steps), `record_shapes`, `with_flops`, `activities` (`("cpu", "cuda")`), and what the
    manifest should say of the run: `local_batch`, `params`, `flops_per_sample`, `nic`, `job` (the local
    batch and the parameters are measured where not given).

    Yields a `Profile`; call its `step()` once per training step. Every rank of a distributed job enters
    it; rank 0 writes `run.json`. Under `traceview record` the drop-in recorder leaves this process to it.
    Raises `UsageError` without PyTorch or for an unknown setting."""
    unknown = sorted(set(settings) - (set(RecordSettings.__dataclass_fields__) - {"step_on"}))
    if unknown:
        raise UsageError(f"traceview.profile: unknown setting(s) {', '.join(unknown)}")
    torch = _torch()
    auto.hand_over()
    chosen = replace(settings_from_env(), **settings)
    folder = Path(run_dir or os.environ.get(RUN_DIR_ENV) or DEFAULT_RUN_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    recording = Profile(folder, chosen)
    activities, names = profiler_activities(torch, tuple(chosen.activities))
    schedule = torch.profiler.schedule(wait=chosen.wait, warmup=chosen.warmup, active=chosen.active, repeat=1)
    with torch.profiler.profile(
        activities=activities,
        schedule=schedule,
        on_trace_ready=recording._save,
        record_shapes=chosen.record_shapes,
        with_flops=chosen.with_flops,
        **profiler_options(torch),
    ) as profiler:
        recording.profiler = profiler
        yield recording
    _finish(recording, torch, names, merge_wait_s)
