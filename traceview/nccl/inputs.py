"""The NCCL_DEBUG logs of a run read one by one (docs/metrics.md, "NCCL log"): a log that cannot be read is
skipped and named, never fatal to the run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from traceview.core.errors import TraceviewError
from traceview.model.nccl_log import NcclLog


def read_logs(paths: Sequence[Path]) -> tuple[tuple[NcclLog, ...], tuple[tuple[str, str], ...]]:
    """(the logs read, (path, reason) of each log that could not be)."""
    if not paths:
        return (), ()
    from traceview.parsers import nccl_log  # only when there is a log: its import costs ~10 ms

    logs: list[NcclLog] = []
    skipped: list[tuple[str, str]] = []
    for path in paths:
        try:
            logs.append(nccl_log.parse(path))
        except TraceviewError as exc:
            skipped.append((str(path), str(exc)))
    return tuple(logs), tuple(skipped)
