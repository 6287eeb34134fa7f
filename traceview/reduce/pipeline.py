"""From what the user typed to the run's results in bounded memory: files -> map (in workers) -> reduce.

`analyze_files(run, options)` resolves the rank files (those the options' `run.json` lists, else those `run`
names), summarises each in an executor (`traceview.map.executors`), checks the ranks as one run
(`traceview.load.one_job.make_run` on the compact traces) and reduces the summaries
(`traceview.reduce.reduce`). Only summaries are ever held together, never two parsed traces per worker.
`traceview.reduce.analysis.analyze` does the same for a `Run` already in memory.
"""

from __future__ import annotations

from traceview.core.errors import InputError
from traceview.events.kernel_names import user_patterns
from traceview.load.inputs import resolve_trace_files
from traceview.load.one_job import make_run
from traceview.map.executors import PARALLEL_MIN_BYTES, Progress, map_ranks
from traceview.map.rank_summary import RankSummary
from traceview.model.trace import SkippedInput
from traceview.options.run import RunOptions, RunSpec, build_options
from traceview.reduce.reduce import reduce_summaries
from traceview.reduce.results import RunAnalysis


def analyze_files(
    run: RunSpec,
    options: RunOptions | None = None,
    progress: Progress | None = None,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
) -> RunAnalysis:
    """Every analysis of the run `run` names (a file, a folder, a glob or a `run.json`) with `options` (built
    from `run` with the defaults when not given). A single file that cannot be read raises its `InputError`;
    of several, the unreadable are skipped and listed, and an error is raised only when none could be read."""
    options = options or build_options(run)
    user_patterns(options.comm_patterns, options.compute_patterns)  # a bad pattern fails before any read
    files = resolve_trace_files(run, options.listed_traces)
    results = map_ranks(files, options, progress, parallel_min_bytes)
    summaries = [r for r in results if isinstance(r, RankSummary)]
    skipped = [r for r in results if isinstance(r, SkippedInput)]
    if len(files) == 1 and skipped:
        raise InputError(skipped[0].path, skipped[0].reason.removeprefix(f"{skipped[0].path}: "))
    if not summaries:
        raise InputError(
            skipped[0].path, f"none of the {len(files)} files could be read; first: {skipped[0].reason}"
        )
    compact = make_run([summary.trace for summary in summaries], skipped, source=options.source)
    by_rank = {summary.rank: summary for summary in summaries}
    ordered = [by_rank[trace.rank] for trace in compact]
    return reduce_summaries(ordered, options, compact.skipped, compact.source, compact.extra_warnings)
