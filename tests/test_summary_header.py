"""The summary's run line says where the steps came from, and, when a trace holds no step annotation, says so
in words (never `steps from none annotations`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import kineto_factory as kf


def _summary(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(path), "--workers", "1"],
        capture_output=True,
        text=True,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_trace_without_step_annotations_says_so(tmp_path: Path) -> None:
    events = [
        kf.kernel("ampere_sgemm_128x64_nn", 1_000.0, 300.0),
        kf.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1_400.0, 100.0),
    ]
    out = _summary(kf.write(kf.document(events), tmp_path / "rank-0.json"))
    assert "no step annotations (one window a rank)" in out
    assert "none annotations" not in out


def test_step_annotations_are_named(tmp_path: Path) -> None:
    events = [
        kf.step(1, 900.0, 1_000.0, on_gpu=True),
        kf.kernel("ampere_sgemm_128x64_nn", 1_000.0, 300.0),
        kf.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1_400.0, 100.0),
    ]
    out = _summary(kf.write(kf.document(events), tmp_path / "rank-0.json"))
    assert "steps from gpu annotations" in out
