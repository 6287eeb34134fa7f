"""A rank whose clock is hours off the others is analysed on the aligned clock and named in a warning with the
offset applied (docs/metrics.md, "Across ranks", clock offsets)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simulate.engine import write_run
from tests.simulate.scenario import CollectiveSpec, ProcessGroupSpec, Scenario

OFFSET_S = 3 * 3600.0


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    world = ProcessGroupSpec("0", "default_pg", tuple(range(4)))
    scenario = Scenario(
        ranks=4,
        steps=4,
        compute_us=20_000.0,
        ranks_per_host=2,
        include_hostname=True,
        collectives=(CollectiveSpec("AllReduce", 8 << 20, world, "BFloat16"),),
        host_offsets_us=(0.0, OFFSET_S * 1e6),  # node001's clock three hours ahead
    )
    folder = tmp_path_factory.mktemp("clock") / "run"
    write_run(scenario, folder, gzip=True)
    return folder


def test_the_far_clock_is_named_with_its_offset(run: Path) -> None:
    done = traceview("summary", str(run), "--json", "-q")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    expected = (
        f"the clock of node001 (ranks 2, 3) is 3 h 0 min ahead of node000's: offset +{OFFSET_S:.3f} s applied"
    )
    assert any(w.startswith(expected) for w in document["run"]["warnings"]), document["run"]["warnings"]
    offsets = {row["host"]: row["offset_us"] for row in document["across_ranks"]["clock_offsets"]}
    assert offsets["node001"] == pytest.approx(OFFSET_S * 1e6, abs=1_000)  # aligned: within a millisecond
    text = traceview("summary", str(run))  # not --quiet: that prints no warnings
    assert "3 h 0 min ahead of node000's" in text.stdout
    assert document["across_ranks"]["stragglers"] == []  # the offset is not read as lateness
