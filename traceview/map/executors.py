"""Where the map runs: rank files parsed and summarised in tasks, only summaries coming back.

A task is a batch of consecutive rank files (`traceview.map.batch.batches_of_sizes`: a few small files, a
large file alone) parsed and summarised together (`traceview.map.rank_summary.summarize_many`): a small rank
costs its queries, not its rows, and stacked, a batch of small ranks costs the queries of one.

- `local` (default): a process pool of `workers` processes (by default one per core this process may use:
  its affinity mask and its cgroup's CPU quota, `traceview.core.cores`; one worker is still a pool),
  started with spawn (polars' thread pool does not survive a fork), each started once and given the ranks in
  turn, its polars thread pool sized to its share of the cores (`worker_threads`: two workers on 16 cores run
  8 threads each, rather than 16 threads each fighting over the cores). Small runs (one file, or under 16 MB
  of input, each file counted with its fixed cost, `_worth_a_pool`) run in this process: starting workers
  costs more than it saves there. A summary made in this process keeps views into its rank's buffers (polars
  strings share them); one that crossed a process boundary does not, which is what keeps the parent's memory
  to the summaries alone.
- `ray` (`traceview.map.ray_executor`): one Ray task per batch on a cluster (`ray_address`, else
  `RAY_ADDRESS`, else a local Ray). Each task reads its rank from a path every node can see, or from a URL
  (`s3://...`, `traceview.core.location`). Ray is an optional extra (`pip install 'traceview[ray]'`). A task
  asks for one CPU and its worker runs one polars thread; Ray starts the workers once and reuses them across
  tasks.

Either way a worker holds one batch's parsed traces at a time (a rank past `BATCH_TEXT_BYTES` of JSON text,
or ranks of at most that much text together) and returns their `RankSummary`s (small: they grow with
collectives and steps, not events), so peak memory is one batch's parse per worker plus the summaries.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import field
from itertools import chain
from typing import Any

from traceview.core.address_space import fitted_threads, limit_text
from traceview.core.cores import usable_cores
from traceview.core.engine import in_memory
from traceview.core.errors import NotKinetoError, RunError, TraceviewError, UsageError, reason_of
from traceview.core.location import Location, size_of
from traceview.core.records import record
from traceview.map.batch import batches_of_sizes, text_size
from traceview.map.ray_executor import RAY_BATCH_SHARE, ray_results
from traceview.model.trace import RankTrace, SkippedInput, checked
from traceview.options.run import RunOptions
from traceview.parsers.kineto.limits import DEFAULT_LIMITS, ParseLimits

EXECUTORS = ("local", "ray")
PARALLEL_MIN_BYTES = 16_000_000
"""Below this much input the local executor works in this process (each worker imports polars afresh)."""
FILE_COST_BYTES = 24_000
"""A file's fixed cost (its parse, its share of its batch's queries: 3 to 4 ms) as bytes of input: on 2 cores
1,024 ranks of 9 KB took 3.8 to 4.1 s in 2 workers, 5.4 to 6.7 s in this process; 512, as long either way."""

THREADS_VARIABLE = "POLARS_MAX_THREADS"
"""The variable polars reads once, when its thread pool starts: set for each worker before it is spawned."""
RESULT_POLL_S = 0.1
"""How often the parent, waiting for a worker's result, looks for an interrupt (seconds)."""

Progress = Callable[[int, int, int], None]
"""progress(ranks done, ranks in all, bytes of the files done)."""


@record
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


@in_memory
def summarize_file(task: MapTask) -> Any:
    """Parse one rank file and summarise it (`RankSummary`), or say why it could not be read
    (`SkippedInput`). Runs in a worker: module-level, its argument and result picklable."""
    return summarize_files([task])[0]


@in_memory
def summarize_files(tasks: Sequence[MapTask]) -> list[Any]:
    """`summarize_file` of each task, in order, the ranks summarised together
    (`traceview.map.rank_summary.summarize_many`); a rank whose batch meets a defect is summarised again
    alone, so that the defect costs that rank only. Runs in a worker (module level, picklable); the results
    travel packed (`traceview.map.packed`); the batch's traces are checked together (`_checked`)."""
    from traceview.load.inputs import release_free_heap
    from traceview.map.packed import PackedResults

    try:
        read = _checked(_parsed_together(tasks), tasks)
        release_free_heap()  # the parses' freed pages back to the system before the analyses
        traces = [trace for trace in read if not isinstance(trace, SkippedInput)]
        read = [result if isinstance(result, SkippedInput) else None for result in read]  # held by `traces`
        summaries = iter(_summaries(traces, tasks[0]) if traces else [])
        return PackedResults(  # sent to the parent packed (traceview.map.packed)
            result if isinstance(result, SkippedInput) else next(summaries) for result in read
        )
    finally:
        release_free_heap()  # the parses' freed pages back to the system before the next batch


def _parsed_together(tasks: Sequence[MapTask]) -> list[Any]:
    """Each task's trace parsed, or why it could not be read (`SkippedInput`): the batch's files parsed
    together (`traceview.parsers.kineto.batch.parse_many`: their queries run once, keyed by file; the tasks
    of a run share their limits), each alone should that meet a defect."""
    from traceview.parsers.kineto.batch import parse_many

    try:
        parsed = parse_many([task.path for task in tasks], tasks[0].limits)
    except Exception:  # a defect met by the batch's parse costs no file: each parsed alone
        return [_parsed(task) for task in tasks]
    return [
        result if isinstance(result, RankTrace) else _skipped(task.path, result)
        for task, result in zip(tasks, parsed, strict=True)
    ]


def _parsed(task: MapTask) -> Any:
    """The task's trace parsed, or why it could not be read (`SkippedInput`)."""
    from traceview.parsers import kineto

    try:
        return kineto.parse(task.path, task.limits)
    except Exception as exc:
        return _skipped(task.path, exc)


def _checked(read: list[Any], tasks: Sequence[MapTask]) -> list[Any]:
    """The traces of `read` checked together (`traceview.model.trace.checked`: one query per kind of frame
    for the batch), a trace that fails its check skipped with why."""
    positions = [i for i, result in enumerate(read) if not isinstance(result, SkippedInput)]
    traces = [read[i] for i in positions]
    try:
        outcomes: list[RankTrace | Exception] = list(checked(traces))
    except Exception:  # a defect met by the batch's check costs no rank: each checked alone
        outcomes = [_checked_alone(trace) for trace in traces]
    for i, outcome in zip(positions, outcomes, strict=True):
        if not isinstance(outcome, RankTrace):
            read[i] = _skipped(tasks[i].path, outcome)
    return read


def _checked_alone(trace: RankTrace) -> RankTrace | Exception:
    try:
        return trace.validate()
    except Exception as exc:
        return exc


def _skipped(path: str, exc: Exception) -> SkippedInput:
    if isinstance(exc, TraceviewError):
        return SkippedInput(path, reason_of(exc), not_a_trace=isinstance(exc, NotKinetoError))
    # a defect met on one rank must not lose the others: skipped, and said so
    return SkippedInput(path, f"internal error while reading it ({type(exc).__name__}: {exc}); please report")


def _summaries(traces: list[RankTrace], task: MapTask) -> list[Any]:
    """The summaries of `traces` (one batch, taken out of the list: `summarize_taken`); a trace's
    `SkippedInput` where it cannot be summarised. A batch of several keeps its traces for a second try, each
    alone; a batch of one (a large rank) keeps none, so that its analyses free its columns as they go."""
    from traceview.events.kernel_names import user_patterns
    from traceview.map.rank_summary import summarize, summarize_taken

    patterns = user_patterns(task.options.comm_patterns, task.options.compute_patterns)
    kept, path = (list(traces) if len(traces) > 1 else []), traces[0].path
    try:
        return list(summarize_taken(traces, patterns, task.ranks_in_run))
    except Exception as exc:
        if not kept:
            return [_skipped(path, exc)]
    results: list[Any] = []
    for trace in kept:  # alone, so that a defect costs its own rank only
        try:
            results.append(summarize(trace, patterns, task.ranks_in_run))
        except Exception as exc:
            results.append(_skipped(trace.path, exc))
    return results


def batches(
    tasks: Sequence[MapTask], sizes: Sequence[int], workers: int | None = None
) -> list[list[MapTask]]:
    """`tasks` (files holding `sizes` bytes of text, `text_size`) cut into the map's batches
    (`batches_of_sizes`)."""
    return [[tasks[i] for i in batch] for batch in batches_of_sizes(sizes, workers)]


def map_ranks(
    files: Sequence[Location],
    options: RunOptions,
    progress: Progress | None = None,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
) -> Iterator[Any]:
    """Every file's `RankSummary` (or `SkippedInput`), in the order of `files`, as each is ready, on the
    executor the options name (the options are checked here, the ranks read as the results are taken). The
    local executor works in this process for one file or under `parallel_min_bytes` of input."""
    execution = options.execution
    if execution.executor not in EXECUTORS:
        raise UsageError(f"--executor {execution.executor!r}: expected one of {', '.join(EXECUTORS)}")
    tasks = [MapTask(str(f), options, len(files)) for f in files]
    sizes = [size_of(f) for f in files]
    texts = [text_size(f, size) for f, size in zip(files, sizes, strict=True)]  # what a batch holds
    if execution.executor == "ray":
        ray_batches = batches(tasks, texts, RAY_BATCH_SHARE)
        results = ray_results(summarize_files, ray_batches, execution.ray_address, THREADS_VARIABLE)
    else:
        results = _local(tasks, (sizes, texts), execution.workers, parallel_min_bytes)
    return _reported(results, sizes, progress)


def _reported(results: Iterable[Any], sizes: Sequence[int], progress: Progress | None) -> Iterator[Any]:
    done_bytes = 0
    for index, result in enumerate(results):
        done_bytes += sizes[index]
        if progress is not None:
            progress(index + 1, len(sizes), done_bytes)
        yield result


def _local(
    tasks: Sequence[MapTask],
    sizes: tuple[Sequence[int], Sequence[int]],
    workers: int | None,
    parallel_min_bytes: int,
) -> Iterable[Any]:
    """The local executor; `sizes`: each file's bytes on disk (whether a pool is worth it) and of text
    (`text_size`: the batches)."""
    on_disk, texts = sizes
    count = min(len(tasks), workers or usable_cores())
    if len(tasks) == 1 or not _worth_a_pool(on_disk, count, parallel_min_bytes):
        return chain.from_iterable(map(summarize_files, batches(tasks, texts)))
    return _pooled(batches(tasks, texts, count), count)


def _worth_a_pool(sizes: Sequence[int], count: int, parallel_min_bytes: int) -> bool:
    """Whether the input is worth a pool of `count` workers: its bytes, and for more than one worker each
    file's fixed cost (`FILE_COST_BYTES`), reach `parallel_min_bytes` (one worker is a pool only for the
    memory it keeps apart: large inputs)."""
    return sum(sizes) + (FILE_COST_BYTES * len(sizes) if count > 1 else 0) >= parallel_min_bytes


def worker_threads(workers: int, cores: int | None = None) -> int:
    """Polars threads for each of `workers` processes sharing `cores` (by default the cores this process may
    use, `traceview.core.cores.usable_cores`): an equal share, at least one."""
    return max(1, (cores or usable_cores()) // workers)


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


def ignore_interrupts() -> None:
    """A worker's initializer: Ctrl-C reaches the whole process group, and the parent alone answers it (it
    stops the workers), so that no worker prints a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (an interrupt: exit within a second)."""
    pool.shutdown(wait=False, cancel_futures=True)
    for child in multiprocessing.active_children():
        child.terminate()


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back while the workers start: a process inherits the signal mask of the thread that starts
    it, so a Ctrl-C sent to the process group during a worker's start-up (before its initializer ran) never
    reaches it; the parent gets the held interrupt when the block ends."""
    held = {signal.SIGINT}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _result_of(future: Future[Any]) -> Any:
    """The future's result, waited for in short slices: a wait on a lock is not woken by a signal that another
    thread received, so the main thread looks at pending interrupts (Ctrl-C) between slices."""
    while True:
        try:
            return future.result(timeout=RESULT_POLL_S)
        except FutureTimeout:
            continue


def _pooled(tasks: Sequence[Sequence[MapTask]], count: int) -> Iterable[Any]:
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=count, mp_context=context, initializer=ignore_interrupts)
    try:
        with _interrupts_held(), _environment(THREADS_VARIABLE, str(fitted_threads(worker_threads(count)))):
            futures = deque(pool.submit(summarize_files, batch) for batch in tasks)  # every worker started
        while futures:  # each future let go once its summaries are taken: the caller holds what it keeps
            yield from _result_of(futures.popleft())
    except BrokenProcessPool:
        raise RunError(_worker_death(pool)) from None
    except BaseException:  # an interrupt, or the reader of the results gone
        _stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True)


def _exit_codes_settled(processes: Sequence[Any], wait_s: float = 1.0) -> None:
    """Wait (at most `wait_s`) until each joined worker's exit code is set: the pool's own thread reaps the
    workers of a broken pool too, and a join that loses that race returns before the winner has set it."""
    deadline = time.monotonic() + wait_s
    while any(getattr(p, "exitcode", 0) is None for p in processes) and time.monotonic() < deadline:
        time.sleep(0.01)


def _worker_death(pool: ProcessPoolExecutor) -> str:
    """One line on a worker that died: the signal that ended it and the memory limit in force, if any."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:  # a dead worker's exit status is known once it is joined
        with contextlib.suppress(Exception):
            process.join(timeout=1)
    _exit_codes_settled(processes)
    codes = [p.exitcode for p in processes if getattr(p, "exitcode", None)]
    signals = sorted({-code for code in codes if code < 0})
    how = (
        f"was ended by signal {', '.join(f'{signal.Signals(n).name} ({n})' for n in signals)}"
        if signals
        else "died"
    )
    limit = limit_text()
    memory = f"out of memory under {limit}?" if limit else "out of memory?"
    return f"a worker process {how} ({memory}): try fewer --workers, or more memory"
