"""The polars engine the analyses run on.

polars 2 runs a lazy query on its streaming engine unless told otherwise, which for the small frames of one
rank (a few thousand rows) costs about twice the in-memory engine's time per query (docs/scaling.md). The map
(`summarize`, the worker's `summarize_file`) and the reduce (`reduce_summaries`) therefore run under
`in_memory`, a context that restores the caller's setting when they return (a notebook's own polars
configuration is left as it was); no analysis names an engine itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import polars as pl

P = ParamSpec("P")
R = TypeVar("R")


def in_memory(function: Callable[P, R]) -> Callable[P, R]:
    """`function` with every polars query it runs on the in-memory engine (the caller's affinity restored)."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with pl.Config(engine_affinity="in-memory"):
            return function(*args, **kwargs)

    return run
