"""One job's dumps read and analysed, from what the user named: the one sequence the `hang` command, the API
(`traceview.hang`) and the report's section share."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from traceview.core.errors import InputError, RunError
from traceview.flight_recorder.analysis import HangAnalysis, analyze_hang
from traceview.flight_recorder.inputs import dump_paths, read_dumps, traces_beside
from traceview.flight_recorder.traces import read_traces


def hang_job(dumps: Sequence[str | Path], nccl_logs: Sequence[Path] = ()) -> HangAnalysis:
    """The dumps `dumps` names (files, folders, globs, URLs) and the NCCL logs `nccl_logs` names, read and
    analysed, with the Kineto traces found beside the dumps (`traces`: each rank's last traced collective).
    Raises `UsageError` for a name that names nothing, `InputError` when the only dump named cannot be read,
    `RunError` when none of several can; the others are analysed and the unread named."""
    from traceview.nccl.inputs import read_logs
    from traceview.options.run import nccl_log_files

    paths = dump_paths(dumps)
    read, unread = read_dumps(paths)
    if not read:
        first = unread[0]
        if len(unread) == 1:
            raise InputError(first.path, first.reason)
        raise RunError(f"no dump could be read ({len(unread)} named; first: {first.path}: {first.reason})")
    logs, logs_unread = read_logs(nccl_log_files([str(p) for p in nccl_logs]))
    beside = traces_beside(dumps, paths)
    traces = None if beside is None else beside[1]
    traced = read_traces(traces) if traces else None
    return analyze_hang(read, unread, logs, logs_unread, traces, traced)
