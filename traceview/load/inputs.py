"""From what the user typed (a trace file, a folder of per-rank files, or a glob) to a `Run`.

Ranks are parsed in parallel processes when there are several files. A file that cannot be read is skipped and
listed; the run goes on with the others (docs/metrics.md, "Errors and exit codes"), unless nothing is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from traceview.core.cores import usable_cores
from traceview.core.errors import InputError, NotKinetoError, RunError, TraceviewError, reason_of
from traceview.core.location import Location, is_url, size_of, url_files
from traceview.load.one_job import make_run
from traceview.model.trace import RankTrace, Run, SkippedInput
from traceview.options.manifest import TRACE_SUFFIXES, traces_in
from traceview.parsers import kineto
from traceview.parsers.kineto.limits import DEFAULT_LIMITS, ParseLimits

Progress = Callable[[int, int], None]
PARALLEL_MIN_BYTES = 16_000_000
"""Below this much input, parsing in one process beats starting workers (each imports polars afresh)."""


def resolve_trace_files(
    spec: str | Path | Sequence[str | Path], listed: Sequence[Path] | None = None
) -> list[Location]:
    """The trace files `spec` names: the file itself, the traces inside a folder, or a glob's matches; several
    specs (a shell that expanded an unquoted glob gives several files) name the union, in order, once each.
    `listed`: the traces the run's manifest names (`RunOptions.listed_traces`, docs/run-manifest.md). A URL
    (`s3://bucket/run/`) names the object, the traces under the prefix, or a glob's matches
    (`traceview.core.location`)."""
    if not isinstance(spec, str | Path):
        found = [path for one in spec for path in resolve_trace_files(one)]
        return list(dict.fromkeys(found))
    if is_url(spec):
        return list(url_files(str(spec), TRACE_SUFFIXES))
    if listed is not None:
        return list[Location](listed)
    path = Path(spec)
    if path.exists() and not path.is_dir():  # a file, or a FIFO or device named as one: said when read
        return [path]
    if path.is_dir():
        files = traces_in(path)
        if not files:
            raise RunError(f"{path}: no .json or .json.gz traces in this folder")
        return list[Location](files)
    matches = sorted(Path(p) for p in glob.glob(str(spec)) if not Path(p).is_dir())
    if not matches:
        raise RunError(f"{spec}: no such file, folder or glob match")
    return list[Location](matches)


def _parse_or_skip(path: Location, limits: ParseLimits = DEFAULT_LIMITS) -> RankTrace | SkippedInput:
    try:
        return kineto.parse(path, limits)
    except TraceviewError as exc:
        return SkippedInput(str(path), reason_of(exc), not_a_trace=isinstance(exc, NotKinetoError))


def load_run(
    spec: str | Path | Sequence[str | Path],
    workers: int | None = None,
    progress: Progress | None = None,
    limits: ParseLimits = DEFAULT_LIMITS,
) -> Run:
    """Parse every rank `spec` names into a validated `Run`, each file within `limits` (docs/metrics.md).

    A single file that fails raises its `InputError`; with several files, failures are skipped and listed in
    `Run.skipped`, and an error is raised only when no rank could be read. The traces are as parsed: a rank
    without device activity is put on its host timeline by the analysis (`traceview.events.host_timeline`).
    """
    files = resolve_trace_files(spec)
    if len(files) == 1:
        trace = kineto.parse(files[0], limits)
        release_free_heap()
        return make_run([trace], source=str(spec))
    results = _parse_all(files, workers, progress, limits)
    release_free_heap()
    traces = [r for r in results if isinstance(r, RankTrace)]
    skipped = [r for r in results if isinstance(r, SkippedInput)]
    if not traces:
        raise InputError(
            skipped[0].path, f"none of the {len(files)} files could be read; first: {skipped[0].reason}"
        )
    return make_run(traces, skipped, source=str(spec))


def release_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`; nothing elsewhere).

    Parsing frees tens of MiB of Python objects and JSON text; glibc keeps much of it in its heap (its mmap
    threshold rises once a large block is freed), so without this the analyses' peak memory sits that much
    higher (about 10 MiB on hta_df_index_resolver, benchmarks/parse_bench.py).
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL(None).malloc_trim(0)


def _parse_all(
    files: Sequence[Location], workers: int | None, progress: Progress | None, limits: ParseLimits
) -> list[RankTrace | SkippedInput]:
    parse_one = functools.partial(_parse_or_skip, limits=limits)
    count = min(len(files), workers or usable_cores())
    total_bytes = sum(map(size_of, files))
    if count <= 1 or (workers is None and total_bytes < PARALLEL_MIN_BYTES):
        return [_report(progress, i, len(files), parse_one(f)) for i, f in enumerate(files)]
    # spawn, not fork: polars' thread pool does not survive a fork
    with ProcessPoolExecutor(max_workers=count, mp_context=multiprocessing.get_context("spawn")) as pool:
        return [_report(progress, i, len(files), r) for i, r in enumerate(pool.map(parse_one, files))]


def _report(
    progress: Progress | None, index: int, total: int, result: RankTrace | SkippedInput
) -> RankTrace | SkippedInput:
    if progress is not None:
        progress(index + 1, total)
    return result
