"""From what the user typed to the run's results in bounded memory: files -> map (in workers) -> reduce.

`analyze_files(spec, options)` resolves the rank files, summarises each in an executor
(`traceview.map.executors`), checks the ranks as one run (`traceview.load.one_job.make_run` on the compact traces) and
reduces the summaries (`traceview.reduce.reduce`). Only summaries are ever held together, never two parsed traces per
worker. `traceview.reduce.analysis.analyze` does the same for a `Run` already in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from traceview.core.errors import InputError
from traceview.load.inputs import resolve_trace_files
from traceview.load.manifest_inputs import run_manifest, with_manifest
from traceview.load.one_job import make_run
from traceview.map.executors import PARALLEL_MIN_BYTES, Progress, map_ranks
from traceview.map.rank_summary import RankSummary
from traceview.model.trace import SkippedInput
from traceview.parsers.kineto.limits import DEFAULT_LIMITS, ParseLimits
from traceview.reduce.reduce import reduce_summaries
from traceview.reduce.results import AnalysisOptions, RunAnalysis


def analyze_files(
    spec: str | Path | Sequence[str | Path],
    options: AnalysisOptions | None = None,
    workers: int | None = None,
    executor: str = "local",
    progress: Progress | None = None,
    ray_address: str | None = None,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
    limits: ParseLimits = DEFAULT_LIMITS,
) -> RunAnalysis:
    """Every analysis of the run `spec` names (a file, a folder or a glob). A single file that cannot be read
    raises its `InputError`; of several, the unreadable are skipped and listed, and an error is raised only
    when none could be read. A `run.json` (or a folder holding one) supplies the traces it lists and the
    model inputs the options leave unset (`traceview.load.manifest_inputs`)."""
    options = options or AnalysisOptions()
    manifest = run_manifest(spec)
    if manifest is not None:
        options = with_manifest(options, *manifest)
    files = resolve_trace_files(spec)
    results = map_ranks(
        files,
        options.comm_patterns,
        workers,
        executor,
        progress,
        ray_address,
        parallel_min_bytes,
        limits,
        options.compute_patterns,
    )
    summaries = [r for r in results if isinstance(r, RankSummary)]
    skipped = [r for r in results if isinstance(r, SkippedInput)]
    if len(files) == 1 and skipped:
        raise InputError(skipped[0].path, skipped[0].reason.removeprefix(f"{skipped[0].path}: "))
    if not summaries:
        raise InputError(
            skipped[0].path, f"none of the {len(files)} files could be read; first: {skipped[0].reason}"
        )
    source = str(spec) if isinstance(spec, str | Path) else " ".join(map(str, spec))
    run = make_run([summary.trace for summary in summaries], skipped, source=source)
    by_rank = {summary.rank: summary for summary in summaries}
    ordered = [by_rank[trace.rank] for trace in run]
    return reduce_summaries(ordered, options, run.skipped, run.source, run.extra_warnings)
