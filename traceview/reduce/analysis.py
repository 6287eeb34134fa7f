"""One call from a `Run` to every result the renderers show: `analyze(run, options) -> RunAnalysis`.

The pipeline: each rank's trace becomes a compact summary (`traceview.map.rank_summary.summarize`, the map),
and the summaries become the run's results (`traceview.reduce.reduce.reduce_summaries`, the reduce).
"""

from __future__ import annotations

from traceview.core.errors import RunError
from traceview.events.kernel_names import user_patterns
from traceview.map.rank_summary import summarize
from traceview.model.trace import Run
from traceview.options.run import RunOptions
from traceview.reduce.reduce import reduce_summaries
from traceview.reduce.results import RunAnalysis, RunHeader, run_header

__all__ = ["RunAnalysis", "RunHeader", "RunOptions", "analyze", "run_header"]


def analyze(run: Run, options: RunOptions | None = None) -> RunAnalysis:
    """Run every analysis on `run`: each rank summarised, then the summaries reduced. Raises `RunError` when
    two traces claim one rank (a `Run` built by hand: loading keeps the first file of each rank)."""
    _each_rank_once(run)
    options = options or RunOptions()
    patterns = user_patterns(options.comm_patterns, options.compute_patterns)
    summaries = [summarize(trace, patterns, len(run)) for trace in run]
    return reduce_summaries(summaries, options, run.skipped, run.source, run.extra_warnings)


def _each_rank_once(run: Run) -> None:
    claimed: dict[int, str] = {}
    for trace in run:
        if trace.rank in claimed:
            raise RunError(f"{trace.path}: rank {trace.rank} is also claimed by {claimed[trace.rank]}")
        claimed[trace.rank] = trace.path
