"""What a run is made of, said once (docs/metrics.md, "Errors and exit codes"): files beside the traces that
are not traces (a job's sidecar JSON, another tool's file) are ignored in one line and never make the run
partial; a folder lacking ranks of its world size is partial (exit 4) while a trace given alone is not; and
compare fails a regression in a family the missing ranks cannot affect (exit 1), calls one they affect
uncertain (exit 4)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.compare_factory import planted_copy, scale_compute
from traceview.core.ranks import absent_ranks, rank_ranges

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"
SIDECARS = 8


def traceview(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
    )


def _with_sidecars(folder: Path) -> Path:
    """`folder` with a job's per-rank facts JSON and a log beside its traces (an ordinary layout)."""
    for rank in range(SIDECARS):
        (folder / f"job_facts_rank{rank}.json").write_text(json.dumps({"rank": rank, "step_ms": 80.5}))
    (folder / "train.log").write_text("epoch 1 loss 2.3\n")
    return folder


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base/: the 8-rank sample's traces; cand/: the same with rank 1's compute 1.6x longer, and sidecars."""
    root = tmp_path_factory.mktemp("runs")
    planted_copy(SAMPLE, root / "base")
    planted_copy(SAMPLE, root / "cand", scale_compute(1.6, only_rank=1))
    for side in ("base", "cand"):
        (root / side / "run.json").unlink()  # a folder of traces, as a job left it
    _with_sidecars(root / "cand")
    done = traceview("summary", "base", "--json", "-q", cwd=root)
    assert done.returncode == 0, done.stderr
    (root / "base.json").write_text(done.stdout)
    return root


def test_rank_ranges_and_absent_ranks() -> None:
    assert rank_ranges([0, 1, 2, 3, 8]) == "0-3, 8"
    assert absent_ranks([0, 1], 8) == [2, 3, 4, 5, 6, 7]
    assert absent_ranks([0, 1], None) == []


def test_sidecars_are_ignored_in_one_line(lab: Path) -> None:
    done = traceview("summary", "cand", "--json", cwd=lab)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"ignored {SIDECARS} file(s)" in lines[0]
    assert "skipped" not in done.stderr
    run = json.loads(done.stdout)["run"]
    assert run["skipped"] == []
    assert run["ignored"]["count"] == SIDECARS
    assert run["ignored"]["examples"][0].endswith("job_facts_rank0.json")
    assert len(run["ranks"]) == 8


def test_compare_fails_a_regression_beside_sidecars(lab: Path) -> None:
    done = traceview("compare", "base.json", "cand", "--fail-on", "regressions>0", cwd=lab)
    assert done.returncode == 1, done.stderr
    assert "compute_us of rank 1 +60%" in done.stdout


def test_thousands_of_non_traces_are_one_line(tmp_path: Path) -> None:
    for name in ("rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    count = 2_000
    for index in range(count):
        (tmp_path / f"metrics_{index:05d}.json").write_text(json.dumps({"index": index}))
    done = traceview("summary", str(tmp_path), "-q", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"traceview: note: ignored {count} file(s)"), done.stderr
    # the folder holds ranks 0 and 1 of the sample's 8: a promise it does not keep (exit 4, one line)
    assert done.returncode == 4, done.stderr
    assert lines[1:] == ["traceview: warning: rank(s) 2-7 not read: the run has 2 of world size 8"]


def test_a_trace_given_alone_is_not_partial(tmp_path: Path) -> None:
    done = traceview("summary", str(SAMPLE / "rank-0.pt.trace.json.gz"), "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_sidecar_named_alone_is_an_error(lab: Path) -> None:
    done = traceview("summary", "cand/job_facts_rank0.json", cwd=lab)
    assert done.returncode == 2
    assert "job_facts_rank0.json" in done.stderr


def _summary_without(lab: Path, ranks: set[int], name: str) -> dict[str, Any]:
    folder = lab / name
    folder.mkdir()
    for path in (lab / "cand").glob("rank-*.pt.trace.json.gz"):
        if int(path.name.split("-")[1].split(".")[0]) not in ranks:
            shutil.copy(path, folder / path.name)
    done = traceview("summary", name, "--json", "-q", cwd=lab)
    assert done.returncode == 4, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    (lab / f"{name}.json").write_text(done.stdout)
    return document


def test_compare_with_ranks_missing(lab: Path) -> None:
    """Ranks 6 and 7 not read: rank 1's own compute (the per-rank family) still fails (exit 1); the
    figures that pool ranks are uncertain, said in the verdict."""
    document = _summary_without(lab, {6, 7}, "cand6")
    assert document["run"]["ranks"] == [0, 1, 2, 3, 4, 5]
    done = traceview("compare", "base.json", "cand6.json", cwd=lab)
    assert done.returncode == 1, done.stderr
    assert "compute_us of rank 1 +60%" in done.stdout


def test_compare_uncertain_when_only_pooled_families_regress(lab: Path) -> None:
    """The baseline against itself less ranks 6 and 7: nothing per-rank changed; a change in a pooled
    figure is uncertain (exit 4 at most), never a failure."""
    _summary_without(lab, {6, 7}, "cand67")
    done = traceview("compare", "cand67.json", "base.json", cwd=lab)
    assert done.returncode in (0, 4), done.stdout + done.stderr
    if done.returncode == 4:
        assert "uncertain: baseline: rank(s) 6-7 not read" in done.stderr
