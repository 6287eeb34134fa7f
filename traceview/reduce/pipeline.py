"""From what the user typed to the run's results in bounded memory: files -> map (in workers) -> reduce.

`analyze_files(run, options)` resolves the rank files (those the options' `run.json` lists, else those `run`
names), summarises each in an executor (`traceview.map.executors`), checks the ranks as one run
(`traceview.load.one_job.make_run` on the compact traces) and reduces the summaries
(`traceview.reduce.reduce`). Only summaries are ever held together, folded as they arrive
(`traceview.reduce.held`), never two parsed traces per worker.
`traceview.reduce.analysis.analyze` does the same for a `Run` already in memory.
"""

from __future__ import annotations

from traceview.core.errors import InputError
from traceview.events.kernel_names import user_patterns
from traceview.load.inputs import resolve_trace_files
from traceview.load.non_traces import named_by_manifest
from traceview.load.one_job import make_run
from traceview.map.executors import PARALLEL_MIN_BYTES, Progress, map_ranks
from traceview.map.rank_summary import RankSummary
from traceview.options.run import RunOptions, RunSpec, build_options
from traceview.reduce.held import HeldSummaries
from traceview.reduce.reduce import reduce_held
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
    held, skipped = HeldSummaries(), []
    for result in map_ranks(files, options, progress, parallel_min_bytes):
        if isinstance(result, RankSummary):
            held.add(result)  # folded as they arrive: the parent never holds the summaries one by one
        else:
            skipped.append(result)
    if options.listed_traces is not None:  # a file a run.json lists is a rank, whatever it holds
        skipped = named_by_manifest(skipped)
    if len(files) == 1 and skipped:
        raise InputError(skipped[0].path, skipped[0].reason.removeprefix(f"{skipped[0].path}: "))
    if not held:
        raise InputError(
            skipped[0].path, f"none of the {len(files)} files could be read; first: {skipped[0].reason}"
        )
    traces = [rank.trace for rank in held.ranks]
    compact = make_run(traces, skipped, source=options.source, checked_where_made=True)
    arrival = {id(rank.trace): index for index, rank in enumerate(held.ranks)}
    order = [arrival[id(trace)] for trace in compact]  # the summaries of the ranks kept, in rank order
    return reduce_held(held, order, options, compact.skipped, compact.source, compact.extra_warnings)
