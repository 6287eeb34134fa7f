"""The polars engine the analyses run on.

polars 2 runs a lazy query on its streaming engine unless told otherwise, which for the small frames of one
rank (a few thousand rows) costs about twice the in-memory engine's time per query (docs/scaling.md), and a
tiny query ten times (0.3 against 0.03 ms here). The parser (`kineto.parse`), the map (`summarize`, the
worker's `summarize_file`) and the reduce (`reduce_summaries`) therefore run under
`in_memory`, a context that restores the caller's setting when they return (a notebook's own polars
configuration is left as it was); no analysis names an engine itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

import polars as pl

P = ParamSpec("P")
R = TypeVar("R")


_INSIDE: ContextVar[bool] = ContextVar("in_memory", default=False)


def in_memory(function: Callable[P, R]) -> Callable[P, R]:
    """`function` with every polars query it runs on the in-memory engine (the caller's affinity restored;
    a call inside another leaves the setting alone: setting it costs about 0.1 ms)."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        if _INSIDE.get():
            return function(*args, **kwargs)
        token = _INSIDE.set(True)
        try:
            with pl.Config(engine_affinity="in-memory"):
                return function(*args, **kwargs)
        finally:
            _INSIDE.reset(token)

    return run
