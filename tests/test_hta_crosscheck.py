"""traceview's overlap ratio and idle share against HolisticTraceAnalysis (GitHub issue 2).

Runs where HTA is installed: CI installs it (`.ci/run`, without its notebook dependencies) and fails this
module when it is missing there; elsewhere it skips. The comparison itself lives in
`benchmarks/hta_crosscheck.py`, which documents HTA's definitions. On HTA's own window (its event filter, its
iterations, first start to last end, its rounding of ns timestamps) our interval unions must give HTA's
figures to within 0.5 percentage points; on our own step windows the figures may differ, and the module
docstring there says why.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.shared_data import REAL_KINETO as REAL
from tests.shared_data import requires_shared

if importlib.util.find_spec("hta") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("HolisticTraceAnalysis is not installed: .ci/run installs it for this cross-check")
    pytest.skip("HolisticTraceAnalysis (hta) is not installed", allow_module_level=True)

pytestmark = requires_shared
SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "hta_crosscheck.py"
TOLERANCE_PP = 0.5


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hta_crosscheck", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


crosscheck = _load_script()


SAME_STEP_KERNELS = {"hta_sampled_2rank", "hta_df_index_resolver"}
"""Traces whose kernels never cross a step boundary and whose timestamps are whole microseconds."""


@pytest.fixture(scope="module", params=["hta_sampled_2rank", "hta_df_index_resolver", "hta_nccl_data"])
def rows(request: pytest.FixtureRequest) -> list[Any]:
    folder = REAL / request.param
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    table: list[Any] = crosscheck.compare(folder)[0]
    return table


def test_every_hta_rank_and_iteration_has_our_figure_on_the_same_window(rows: list[Any]) -> None:
    compared = [r for r in rows if r.hta.idle_pct is not None]
    assert compared, "HTA returned no figures"
    assert all(r.ours_on_hta_window.idle_pct is not None for r in compared)
    assert any(r.window == crosscheck.WHOLE for r in compared)
    assert any(r.window.startswith("step ") for r in compared)


def test_overlap_ratio_matches_hta_within_half_a_point(rows: list[Any]) -> None:
    for row in rows:
        if row.hta.overlap_pct is None:
            continue
        gap = crosscheck.delta(row.ours_on_hta_window.overlap_pct, row.hta.overlap_pct)
        assert gap is not None
        assert abs(gap) <= TOLERANCE_PP, crosscheck.format_row(row)


def test_idle_share_matches_hta_within_half_a_point(rows: list[Any]) -> None:
    for row in rows:
        if row.hta.idle_pct is None:
            continue
        gap = crosscheck.delta(row.ours_on_hta_window.idle_pct, row.hta.idle_pct)
        assert gap is not None
        assert abs(gap) <= TOLERANCE_PP, crosscheck.format_row(row)


def test_our_reported_step_overlap_is_hta_iteration_overlap(rows: list[Any]) -> None:
    """The overlap ratio does not depend on the idle edges of a window: where no kernel runs across a step
    boundary and HTA does not round, the ratio traceview reports per step is HTA's per-iteration figure (the
    idle shares differ, our window running on to the next step's first activity)."""
    for row in rows:
        if (
            row.trace in SAME_STEP_KERNELS
            and row.window.startswith("step ")
            and row.hta.overlap_pct is not None
            and row.ours.overlap_pct is not None
        ):
            assert abs(row.ours.overlap_pct - row.hta.overlap_pct) <= TOLERANCE_PP, crosscheck.format_row(row)
