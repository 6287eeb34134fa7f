"""Writing a rank's trace into the run folder: `rank<N>.pt.trace.json.gz` (docs/run-manifest.md, "What each
rank writes")."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path
from typing import Any

from traceview.record.parts import trace_name


def export_trace(finished: Any, run_dir: Path, rank: int) -> Path:
    """Write the trace of a finished `torch.profiler.profile` as the rank's gzip trace; returns its path. The
    profiler exports to a temporary file named relative to the working folder (its name becomes the trace's
    `traceName`), which is then compressed (no name, no time in the gzip header) and removed."""
    target = run_dir / trace_name(rank)
    plain = run_dir / f".rank{rank}.{os.getpid()}.json"
    finished.export_chrome_trace(os.path.relpath(plain))
    try:
        with (
            plain.open("rb") as source,
            target.open("wb") as written,
            gzip.GzipFile(filename="", mode="wb", fileobj=written, mtime=0) as compressed,
        ):
            shutil.copyfileobj(source, compressed)
    finally:
        plain.unlink(missing_ok=True)
    return target
