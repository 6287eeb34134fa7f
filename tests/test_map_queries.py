"""The map's fixed cost (issue 26): a rank is summarised by a bounded number of polars queries, not by
queries per step, per kernel name or per pattern. Counted, not timed: each query on a small frame costs a
fixed hundred microseconds or so of polars' thread hand-off (docs/scaling.md), so their number is the fixed
cost per rank."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import polars.lazyframe.engine as engines
from traceview.parsers import kineto

from tests.simulate.engine import write_run
from tests.simulate.scenario import data_parallel_scenario
from traceview.map.rank_summary import summarize


@contextmanager
def counted_queries() -> Iterator[list[int]]:
    """Counts every polars query run inside (eager operations, lazy collects and `collect_all`)."""
    count = [0]
    patched: list[tuple[Any, str, Any]] = []
    owners = [c for c in vars(engines).values() if isinstance(c, type) and "collect" in vars(c)]
    for owner, name in [*((c, "collect") for c in owners), (pl, "collect_all")]:
        original = getattr(owner, name)

        def counting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            count[0] += 1
            return _original(*args, **kwargs)

        patched.append((owner, name, original))
        setattr(owner, name, counting)
    try:
        yield count
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)


def queries_of_rank(folder: Path, steps: int) -> int:
    scenario = data_parallel_scenario(2, 10_000_000, 8, 100e12, 10e9, steps=steps)
    write_run(scenario, folder)
    trace = kineto.parse(folder / "rank0.json").validate()
    summarize(trace)  # the process's kernel-name cache filled, as for every rank after a worker's first
    with counted_queries() as count:
        summarize(trace)
    return count[0]


def test_queries_bounded_and_not_per_step(tmp_path: Path) -> None:
    few = queries_of_rank(tmp_path / "few", 3)
    many = queries_of_rank(tmp_path / "many", 30)
    assert few == many  # ten times the steps: not one query more
    # 848 on this rank before the map's queries were fused, 79 after, 43 after the third cut; 46 with the
    # critical path (one plan of three sinks), 48 with it collected in turn (fewer queries are not cheaper
    # there: the shared plan cost a third more CPU on a tiny rank); 39 with the budget and the idle gaps'
    # three tables one query, and the timeline's segments with their counts one (about 2% less CPU on a
    # tiny rank)
    assert few <= 41
