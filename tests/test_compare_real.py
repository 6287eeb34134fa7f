"""Compare on the real traces: the 2-rank job recorded by others against planted copies of itself (one
collective type 50% slower, all compute 30% slower, one rank's compute 30% slower, identical, jittered by 3%),
and the two real jobs HTA keeps for its trace diff.

The job has two profiled steps on each of two ranks, so only paired tests can tell a change from the spread
between ranks: each rank's calls and its per-step compute of each kernel class, paired with the same in the
copy (docs/metrics.md, "Compare and trend")."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.compare_factory import jitter as jitter_edit
from tests.compare_factory import planted_copy, scale_collective, scale_compute
from tests.shared_data import REAL_KINETO, requires_shared
from tests.test_compare_planted import cause_subjects, named_anything, summary
from traceview.compare.settings import load_settings
from traceview.compare.two_runs import Comparison, compare

pytestmark = requires_shared
SAMPLED = REAL_KINETO / "hta_sampled_2rank"


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    return summary(SAMPLED)


def compared(baseline: dict[str, Any], tmp_path: Path, edit: Any) -> Comparison:
    settings, _ = load_settings()
    return compare(baseline, summary(planted_copy(SAMPLED, tmp_path / "c", edit)), settings)


def allreduce_signatures() -> int:
    """(rank, message size) AllReduce signatures of the job, counted over the raw JSON: each
    `nccl:all_reduce` annotation carries its tensor's `Input Dims`, one per call."""
    found = set()
    for path in sorted(SAMPLED.iterdir()):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            events = json.load(handle)["traceEvents"]
        found |= {
            (path.name, str(e["args"]["Input Dims"])) for e in events if e.get("name") == "nccl:all_reduce"
        }
    return len(found)


@pytest.mark.parametrize("edit", [None, jitter_edit(0.03)], ids=["identical", "jitter 3%"])
def test_identical_and_jittered_are_no_regression(
    baseline: dict[str, Any], tmp_path: Path, edit: Any
) -> None:
    comparison = compared(baseline, tmp_path, edit)
    assert comparison.regressions == []
    assert comparison.improvements == []
    assert named_anything(comparison) == set()


def test_jittered_copy_exits_0(baseline: dict[str, Any], tmp_path: Path) -> None:
    from tests.test_cli import traceview

    saved = tmp_path / "baseline.json"
    saved.write_text(json.dumps(baseline), encoding="utf-8")
    jittered = planted_copy(SAMPLED, tmp_path / "jittered", jitter_edit(0.03))
    assert traceview("compare", str(saved), str(jittered)).returncode == 0
    assert traceview("compare", str(SAMPLED), str(SAMPLED)).returncode == 0


def test_slower_allreduce_is_found_by_pairing_calls(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, scale_collective("AllReduce", 1.5))
    assert cause_subjects(comparison) == {"AllReduce pg=unknown all sizes"}
    # the size buckets hold 2 and 6 kernels over both ranks: +50% there, but not significant
    assert all(s.startswith("AllReduce pg=unknown") for s in named_anything(comparison))
    (calls,) = comparison.failing
    assert calls.change_pct == pytest.approx((1.5 - 1) * 100)
    pairs = allreduce_signatures()
    assert calls.test.baseline_n == pairs
    # every pair longer: exact two-sided signed-rank p = 2 / 2^pairs; Holm over the two collective types with
    # at least 3 pairs (AllReduce and AllToAll; AllGather has one per rank)
    assert calls.p_adjusted == pytest.approx(2 * 2 / 2**pairs)


def test_slower_compute_is_named_by_kernel_class(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, scale_compute(1.3))
    subjects = cause_subjects(comparison)
    assert "kernel class gemm" in subjects
    assert all(s.startswith("kernel class ") for s in named_anything(comparison))  # no rank, no collective
    assert all(f.change_pct == pytest.approx(30, abs=1.5) for f in comparison.failing if f.is_cause)


def test_delayed_rank_is_named(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, scale_compute(1.3, only_rank=1))
    assert cause_subjects(comparison) == {"rank 1"}
    assert named_anything(comparison) == {"rank 1"}
    (rank,) = comparison.failing
    assert rank.change_pct == pytest.approx((1.3 - 1) * 100, abs=0.5)
    # two ranks: the median log ratio of a (step, class) is the mean of rank 0's 0 and rank 1's log 1.3, so
    # rank 1 stands out by exp(log(1.3) / 2) - 1
    assert rank.beyond_peers_pct == pytest.approx((math.sqrt(1.3) - 1) * 100, abs=0.5)
    # the kernel classes moved only on rank 1: explained by it, never named
    assert {f.explained_by for f in comparison.findings if f.outcome == "explained"} <= {"rank 1"}


def test_hta_trace_diff_jobs() -> None:
    """Two different jobs (rank 3 of 8 on A100, rank 1 of 2 on V100): a world-size change, the device change
    listed, ranks that appear and disappear, and the candidate's unlinked kernels marked partial."""
    settings, _ = load_settings()
    control, test = (
        summary(REAL_KINETO / "hta_trace_diff_control"),
        summary(REAL_KINETO / "hta_trace_diff_test"),
    )
    comparison = compare(control, test, settings)
    assert comparison.scaling is not None
    assert (comparison.structure.baseline_world_size, comparison.structure.candidate_world_size) == (8, 2)
    assert any(change.startswith("devices:") for change in comparison.structure.setup_changes)
    assert "rank 3" in comparison.structure.disappeared
    assert "rank 1" in comparison.structure.appeared
    assert all(f.partial for f in comparison.findings if f.family in ("collective", "collective_calls"))
