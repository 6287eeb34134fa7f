"""The parts a one-rank run skips (`traceview.across_ranks.lone_rank`): each row's result equals, frame for
frame (schema included), what its function computes on the same one-rank run, and the whole JSON summary of
a one-rank run is the same byte for byte with the table and with it emptied (the full path)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from traceview.reports.json.summary import render_json

from tests import report_factory as rf
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.across_ranks import analysis, lone_rank, matching
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

CALL_SITES = {
    "aligned_positions": matching,
    "mismatches_of": matching,
    "disjoint_instances": analysis,
    "lateness_cost": analysis,
    "spans_hosts": analysis,
}
"""Where each part of the table is called from (the module whose name the test replaces)."""
REAL_ONE_RANK = (
    "hta_16rank_job_rank0/rank0.json.gz",  # one rank of 16: all-reduces, all-to-alls, send/recv
    "hta_nccl_data/nccl_data.json.gz",
    "h200_pt211_nccl_fsdp1/fsdp_rank0.json.gz",
    "h200_pt211_gloo_dp2/gloo_rank0.json.gz",  # one rank of two, gloo's host collectives
)


def _one_rank_run(tmp_path: Path) -> Path:
    """Rank 0 of the report factory's two-rank run alone: three all-reduces of a group of two."""
    return rf.write_run(tmp_path / "run") / "rank0.json"


def _full_results(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, list[Any]], str]:
    """Each part's results when the table is empty (the full path), and the run's JSON summary."""
    seen: dict[str, list[Any]] = {name: [] for name in CALL_SITES}

    def recording(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            seen[name].append(result)
            return result

        return run

    with monkeypatch.context() as patch:
        patch.setattr(lone_rank, "LONE_RANK_PARTS", {})
        for name, module in CALL_SITES.items():
            patch.setattr(module, name, recording(name, getattr(module, name)))
        document = render_json(analyze(load_run(str(path), workers=1)), full=True)
    return seen, document


def _frames(result: Any) -> list[pl.DataFrame]:
    return list(result) if isinstance(result, tuple) else [result]


def _check(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen, full_document = _full_results(path, monkeypatch)
    for name, results in seen.items():
        assert results, f"{name} was not called on {path.name}"
        fixed = _frames(lone_rank.LONE_RANK_PARTS[name].result())
        for result in results:
            computed = _frames(result)
            assert [f.schema for f in computed] == [f.schema for f in fixed], name
            assert all(f.equals(g) for f, g in zip(computed, fixed, strict=True)), name
    assert render_json(analyze(load_run(str(path), workers=1)), full=True) == full_document


def test_every_part_is_named_once_and_called() -> None:
    assert set(lone_rank.LONE_RANK_PARTS) == set(CALL_SITES)
    for name, module in CALL_SITES.items():
        assert getattr(module, name).__name__ == name


def test_factory_rank_alone_matches_the_full_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(_one_rank_run(tmp_path), monkeypatch)


def test_two_ranks_take_the_full_path() -> None:
    """The table is for one rank only: with two, every part is the function itself."""
    for name, module in CALL_SITES.items():
        function = getattr(module, name)
        assert lone_rank.lone(function, 2) is function
        assert lone_rank.lone(function, 1) is not function


@requires_shared
@pytest.mark.parametrize("name", REAL_ONE_RANK)
def test_real_rank_alone_matches_the_full_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(REAL_KINETO / name, monkeypatch)
