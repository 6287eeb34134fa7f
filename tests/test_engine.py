"""The analyses' queries run on polars' in-memory engine, and the caller's own setting is left as it was."""

from __future__ import annotations

import os

import polars as pl

from traceview.core.engine import in_memory


def test_in_memory_inside_and_the_callers_affinity_restored() -> None:
    seen: list[str | None] = []

    @in_memory
    def query() -> int:
        seen.append(os.environ.get("POLARS_ENGINE_AFFINITY"))
        return pl.LazyFrame({"a": [1, 2, 3]}).filter(pl.col("a") > 1).collect().height

    with pl.Config(engine_affinity="streaming"):
        assert query() == 2
        assert os.environ.get("POLARS_ENGINE_AFFINITY") == "streaming"
    assert seen == ["in-memory"]


def test_in_memory_nested_keeps_the_engine_until_the_outer_call_returns() -> None:
    seen: list[str | None] = []

    @in_memory
    def inner() -> None:
        seen.append(os.environ.get("POLARS_ENGINE_AFFINITY"))

    @in_memory
    def outer() -> None:
        inner()
        seen.append(os.environ.get("POLARS_ENGINE_AFFINITY"))

    with pl.Config(engine_affinity="streaming"):
        outer()
        inner()
        assert os.environ.get("POLARS_ENGINE_AFFINITY") == "streaming"
    assert seen == ["in-memory", "in-memory", "in-memory"]
