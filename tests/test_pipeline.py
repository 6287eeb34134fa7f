"""The map/reduce pipeline gives exactly what the in-memory analysis gives, with one worker or several."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from traceview.reports.json.summary import render_json

from tests.shared_data import REAL_KINETO, requires_shared
from traceview.load.inputs import load_run
from traceview.map.rank_summary import summarize
from traceview.options.run import build_options
from traceview.options.user import UserOptions
from traceview.reduce.analysis import analyze
from traceview.reduce.pipeline import analyze_files

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _document(analysis: object) -> dict[str, object]:
    return json.loads(render_json(analysis))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["dp8_straggler", "pp4_mismatch"])
@pytest.mark.parametrize("workers", [1, 2])
def test_pipeline_equals_the_in_memory_analysis(name: str, workers: int) -> None:
    run = SAMPLES / name
    options = build_options(run, UserOptions(workers=workers))  # the samples state their settings in run.json
    assert options.manifest is not None
    expected = _document(analyze(load_run(run), options))
    got = _document(analyze_files(run, options, parallel_min_bytes=0))  # workers: a process pool
    assert got == expected


@requires_shared
@pytest.mark.parametrize("name", ["hta_sampled_2rank", "hta_nccl_data", "hta_amd_mi250"])
def test_pipeline_on_real_traces(name: str) -> None:
    expected = _document(analyze(load_run(REAL_KINETO / name)))
    assert _document(analyze_files(REAL_KINETO / name, build_options(REAL_KINETO / name))) == expected


def test_a_summary_does_not_grow_with_events() -> None:
    """A summary keeps the collectives, steps and bounded parts: far fewer rows than the trace's events."""
    trace = load_run(SAMPLES / "dp8_straggler").ranks[0]
    summary = summarize(trace)
    assert summary.trace.gpu.height == 0
    kept = sum(
        getattr(summary, name).height
        for name in ("windows", "per_step", "kernels", "launch_marks", "gap_steps", "top_gaps")
    )
    # 6 steps x 8 all-reduce kernels (sample_traces/README.md); at most one launch mark per kernel
    assert summary.kernels.height == 6 * 8
    assert kept <= 6 + 6 + 6 * 8 + 6 * 8 + 6 + 20
    assert summary.trace.cpu.height < trace.cpu.height / 10
