"""traceview: where the time went in a distributed training job.

The public API (see the README): `analyze(run, **model_inputs) -> Analysis`, `load_rank(path) -> RankTrace`,
`hang(paths) -> HangAnalysis` (Flight Recorder dumps),
`profile(run_dir=None, **settings)` (records a rank of a training job: `pip install 'traceview[record]'`).
Names are imported on first use, so `import traceview` stays cheap.
"""

from __future__ import annotations

from traceview.core.version import __version__

TYPE_CHECKING = False  # not typing's: importing typing delays the console script's Ctrl-C handler

__all__ = ["Analysis", "TraceviewError", "__version__", "analyze", "hang", "load_rank", "profile", "to_ms"]

if TYPE_CHECKING:
    from typing import Any

    from traceview.api import Analysis, analyze, hang, load_rank, to_ms
    from traceview.core.errors import TraceviewError
    from traceview.record.profile import profile

_LAZY = {
    "Analysis": "traceview.api",
    "analyze": "traceview.api",
    "hang": "traceview.api",
    "load_rank": "traceview.api",
    "to_ms": "traceview.api",
    "profile": "traceview.record.profile",
    "TraceviewError": "traceview.core.errors",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traceview' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
