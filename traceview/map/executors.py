"""Where the map runs: each rank file parsed and summarised in its own task, only summaries coming back.

- `local` (default): a process pool of `workers` processes (all CPUs by default; one worker is still a pool),
  started with spawn (polars' thread pool does not survive a fork), each started once and given the ranks in
  turn, its polars thread pool sized to its share of the cores (`worker_threads`: two workers on 16 cores run 8
  threads each, rather than 16 threads each fighting over the cores). Small runs (one file, or under 16 MB of
  input) run in this process: starting workers costs more than it saves there. A summary made in this process
  keeps views into its rank's buffers (polars strings share them); one that crossed a process boundary does
  not, which is what keeps the parent's memory to the summaries alone.
- `ray`: one Ray task per rank on a cluster (`ray_address`, else `RAY_ADDRESS`, else a local Ray). Each task
  reads its rank from a path every node can see, or from a URL (`s3://...`, `traceview.core.location`). Ray is
  an optional extra (`pip install 'traceview[ray]'`). A task asks for one CPU and its worker runs one polars
  thread; Ray starts the workers once and reuses them across tasks.

Either way a worker holds one rank's parsed trace at a time and returns its `RankSummary` (small: it grows with
collectives and steps, not events), so peak memory is one parse per worker plus the summaries.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from traceview.core.errors import TraceviewError, UsageError
from traceview.core.location import Location, size_of
from traceview.model.trace import SkippedInput
from traceview.options.run import RunOptions
from traceview.parsers.kineto.limits import DEFAULT_LIMITS, ParseLimits

EXECUTORS = ("local", "ray")
PARALLEL_MIN_BYTES = 16_000_000
"""Below this much input the local executor works in this process (each worker imports polars afresh)."""

THREADS_VARIABLE = "POLARS_MAX_THREADS"
"""The variable polars reads once, when its thread pool starts: set for each worker before it is spawned."""

Progress = Callable[[int, int, int], None]
"""progress(ranks done, ranks in all, bytes of the files done)."""


@dataclass(frozen=True)
class MapTask:
    """One rank file to summarise, with the run's options (the task never reads `run.json`)."""

    path: str
    options: RunOptions = field(default_factory=RunOptions)
    ranks_in_run: int = 1

    @property
    def limits(self) -> ParseLimits:
        """The parser's limits, `--max-trace-bytes` as the largest JSON text read."""
        largest = self.options.execution.max_trace_bytes
        return DEFAULT_LIMITS if largest is None else ParseLimits(max_inflated_bytes=largest)


def summarize_file(task: MapTask) -> Any:
    """Parse one rank file and summarise it (`RankSummary`), or say why it could not be read
    (`SkippedInput`). Runs in a worker: module-level, its argument and result picklable."""
    from traceview.events.kernel_names import user_patterns
    from traceview.load.inputs import release_free_heap
    from traceview.map.rank_summary import summarize
    from traceview.parsers import kineto

    try:
        summary = summarize(
            kineto.parse(task.path, task.limits).validate(),
            user_patterns(task.options.comm_patterns, task.options.compute_patterns),
            task.ranks_in_run,
        )
    except TraceviewError as exc:
        return SkippedInput(task.path, str(exc))
    except Exception as exc:  # a defect met on one rank must not lose the others: skipped, and said so
        reason = f"internal error while reading it ({type(exc).__name__}: {exc}); please report"
        return SkippedInput(task.path, reason)
    finally:
        release_free_heap()  # the parse's freed pages back to the system before the next rank
    return summary


def map_ranks(
    files: Sequence[Location],
    options: RunOptions,
    progress: Progress | None = None,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
) -> list[Any]:
    """Every file's `RankSummary` (or `SkippedInput`), in the order of `files`, on the executor the options
    name. The local executor works in this process for one file or under `parallel_min_bytes` of input."""
    execution = options.execution
    if execution.executor not in EXECUTORS:
        raise UsageError(f"--executor {execution.executor!r}: expected one of {', '.join(EXECUTORS)}")
    tasks = [MapTask(str(f), options, len(files)) for f in files]
    sizes = [size_of(f) for f in files]
    results = (
        _ray(tasks, execution.ray_address)
        if execution.executor == "ray"
        else _local(tasks, sizes, execution.workers, parallel_min_bytes)
    )
    return list(_reported(results, sizes, progress))


def _reported(results: Iterable[Any], sizes: Sequence[int], progress: Progress | None) -> Iterable[Any]:
    done_bytes = 0
    for index, result in enumerate(results):
        done_bytes += sizes[index]
        if progress is not None:
            progress(index + 1, len(sizes), done_bytes)
        yield result


def _local(
    tasks: Sequence[MapTask], sizes: Sequence[int], workers: int | None, parallel_min_bytes: int
) -> Iterable[Any]:
    if len(tasks) == 1 or sum(sizes) < parallel_min_bytes:
        return map(summarize_file, tasks)
    return _pooled(tasks, min(len(tasks), workers or os.cpu_count() or 1))


def worker_threads(workers: int, cores: int | None = None) -> int:
    """Polars threads for each of `workers` processes sharing `cores` (all CPUs by default): an equal share,
    at least one."""
    return max(1, (cores or os.cpu_count() or 1) // workers)


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` for the processes started inside the block, as it was afterwards."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def _pooled(tasks: Sequence[MapTask], count: int) -> Iterable[Any]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        with _environment(THREADS_VARIABLE, str(worker_threads(count))):
            results = pool.map(summarize_file, tasks)  # every task submitted: the workers are spawned here
        yield from results


def _ray(tasks: Sequence[MapTask], address: str | None) -> Iterable[Any]:
    try:
        ray: Any = importlib.import_module("ray")
    except ImportError as exc:
        raise UsageError("--executor ray needs Ray: pip install 'traceview[ray]'") from exc
    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False
        )
    threads = {"env_vars": {THREADS_VARIABLE: "1"}}
    remote = ray.remote(num_cpus=1, runtime_env=threads)(summarize_file)
    pending = [remote.remote(task) for task in tasks]
    for reference in pending:  # in order: the summaries of finished tasks wait in Ray's object store
        yield ray.get(reference)
