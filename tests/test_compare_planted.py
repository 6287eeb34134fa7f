"""Planted changes in copies of a multi-rank run (the simulated 8-rank sample, six steps, a 2% compute jitter
and a straggler of its own; tests/test_compare_real.py does the same on a real recorded run): each change is
found and named by its subject, nothing else is named; identical and jittered copies are no regression.
Kernel durations are edited in the JSON (tests/compare_factory.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from traceview.reports.json.summary import summary_document

from tests.compare_factory import jitter as jitter_edit
from tests.compare_factory import planted_copy, scale_collective, scale_compute
from traceview.compare.settings import load_settings
from traceview.compare.two_runs import Comparison, compare
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"
# every AllReduce of the sample moves a 25 MiB bucket: the 4 MiB - 64 MiB size bucket of process group 0
ALLREDUCE_SUBJECT = "AllReduce pg=0 4 MiB - 64 MiB"
ALLREDUCE_CALLS = "AllReduce pg=0 all sizes"  # the paired calls of that collective, every size


def summary(run: Path) -> dict[str, Any]:
    """The JSON summary of a run as a nightly job would keep it."""
    document: dict[str, Any] = msgspec.json.decode(
        msgspec.json.encode(summary_document(analyze(load_run(str(run)))))
    )
    return document


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    return summary(SAMPLE)


def compared(baseline: dict[str, Any], tmp_path: Path, edit: Any) -> Comparison:
    settings, _ = load_settings()
    return compare(baseline, summary(planted_copy(SAMPLE, tmp_path / "candidate", edit)), settings)


def cause_subjects(comparison: Comparison) -> set[str]:
    """The subjects of the failing findings that name a cause."""
    return {f.subject for f in comparison.failing if f.is_cause}


def named_anything(comparison: Comparison) -> set[str]:
    """Every cause subject the comparison names in any way: failing, improved, or beyond the threshold but
    not significant (a planted change must leave the others silent)."""
    shown = comparison.regressions + comparison.improvements + comparison.not_significant
    return {f.subject for f in shown if f.is_cause}


def test_identical_copy_is_no_change(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, None)
    assert comparison.regressions == []
    assert comparison.improvements == []
    assert all(f.change_pct in (0.0, None) for f in comparison.findings)


def test_jittered_copy_is_no_regression(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, jitter_edit(0.03))
    assert comparison.regressions == []
    assert comparison.improvements == []


def test_slower_collective_is_named(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, scale_collective("AllReduce", 1.5))
    assert cause_subjects(comparison) == {ALLREDUCE_SUBJECT, ALLREDUCE_CALLS}
    assert named_anything(comparison) == {ALLREDUCE_SUBJECT, ALLREDUCE_CALLS}
    by_metric = {f.metric: f for f in comparison.failing if f.subject in (ALLREDUCE_SUBJECT, ALLREDUCE_CALLS)}
    # every kernel 1.5 x longer: the median duration x 1.5, the median bus bandwidth x 1 / 1.5, and every
    # rank's paired call 1.5 x longer
    assert by_metric["kernel_us"].change_pct == pytest.approx((1.5 - 1) * 100)
    assert by_metric["busbw_Bps"].change_pct == pytest.approx((1 / 1.5 - 1) * 100)
    assert by_metric["call_us"].change_pct == pytest.approx((1.5 - 1) * 100)
    # one 25 MiB signature per rank: 8 pairs, all longer: exact signed-rank p = 2 / 2^8, one collective
    assert by_metric["call_us"].p_adjusted == pytest.approx(2 / 2**8)
    effects = [f for f in comparison.failing if not f.is_cause]
    assert effects  # the run-level figures it moves (comm, transfer gamma, skew) point back to it
    assert all("AllReduce pg=0" in (f.likely_cause or "") for f in effects)
    assert by_metric["kernel_us"].p_adjusted is not None
    assert by_metric["kernel_us"].p_adjusted < 0.05


def test_slower_compute_is_named_by_kernel_class(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, scale_compute(1.3))
    subjects = cause_subjects(comparison)
    assert "kernel class gemm" in subjects
    assert all(subject.startswith("kernel ") for subject in named_anything(comparison))  # no rank
    gemm = next(f for f in comparison.failing if f.subject == "kernel class gemm")
    assert gemm.change_pct == pytest.approx((1.3 - 1) * 100, abs=0.5)  # kernels cut at a step's end move less
    # each compute kernel, paired by its key over the 8 ranks: every kernel 1.3 x longer, 8 pairs all longer
    kernels = [f for f in comparison.failing if f.family == "kernel"]
    assert kernels
    for finding in kernels:
        assert finding.change_pct == pytest.approx((1.3 - 1) * 100, rel=1e-6)
        assert finding.test.p_value == pytest.approx(2 / 2**8)


def test_delayed_rank_is_named(baseline: dict[str, Any], tmp_path: Path) -> None:
    comparison = compared(baseline, tmp_path, scale_compute(1.3, only_rank=1))
    assert cause_subjects(comparison) == {"rank 1"}
    assert named_anything(comparison) == {"rank 1"}
    (rank,) = comparison.failing
    # its compute 1.3 x longer (a kernel cut at a step's end moves less); its peers' unchanged: the median
    # log ratio over 8 ranks is 0, so it stands out by the whole change
    assert rank.change_pct == pytest.approx((1.3 - 1) * 100, abs=0.5)
    assert rank.beyond_peers_pct == pytest.approx((1.3 - 1) * 100, abs=1.5)


def test_cli_exit_codes_and_json(baseline: dict[str, Any], tmp_path: Path) -> None:
    from tests.test_cli import traceview

    saved = tmp_path / "baseline.json"
    saved.write_text(json.dumps(baseline), encoding="utf-8")
    planted = planted_copy(SAMPLE, tmp_path / "slow", scale_collective("AllReduce", 1.5))
    same = traceview("compare", str(saved), str(SAMPLE), "--json")
    slow = traceview("compare", str(saved), str(planted), "--json", "-o", str(tmp_path / "diff.html"))
    assert (same.returncode, slow.returncode) == (0, 1), slow.stderr
    document = json.loads(slow.stdout)
    assert document["regressions"][0]["subject"] == ALLREDUCE_SUBJECT
    for finding in document["regressions"]:
        keys = {"metric", "subject", "baseline", "candidate", "change_pct", "test", "p_value", "p_adjusted"}
        assert keys <= set(finding)
    from tests.test_cli import documented_schema_version

    assert document["schema_version"] == documented_schema_version()
    assert isinstance(document["verdict"], str)
    assert document["improvements"] == []
    page = (tmp_path / "diff.html").read_text(encoding="utf-8")
    assert "Content-Security-Policy" in page
    assert ALLREDUCE_SUBJECT in page
    markdown = traceview("compare", str(saved), str(planted), "--markdown")
    assert markdown.stdout.count("\n") < 30
    assert ALLREDUCE_SUBJECT in markdown.stdout
    gated = traceview("compare", str(saved), str(SAMPLE), "--fail-on", "regressions>0")
    assert gated.returncode == 0


def test_bad_input_is_exit_2(tmp_path: Path) -> None:
    from tests.test_cli import traceview

    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": "1.3", "time_budget": ', encoding="utf-8")
    result = traceview("compare", str(broken), str(SAMPLE))
    assert result.returncode == 2
    assert "broken.json" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_kind_of_run_input(tmp_path: Path) -> None:
    """A folder, a glob, a run.json (and a folder holding one: the manifest names the traces, so run.json is
    not read as a trace) and a single rank's file all compare against the folder; the single rank is one of
    eight ranks read: the comparison says so instead of failing (uncertain, exit 4)."""
    from tests.test_cli import traceview

    copy = planted_copy(SAMPLE, tmp_path / "run")
    traces = [{"rank": rank, "path": f"rank-{rank}.pt.trace.json.gz"} for rank in range(8)]
    manifest = {"schema_version": "1.0", "kind": "traceview-run", "world_size": 8, "traces": traces}
    (copy / "run.json").write_text(json.dumps(manifest), encoding="utf-8")
    for candidate in (copy, copy / "run.json", f"{SAMPLE}/rank-*.pt.trace.json.gz"):
        result = traceview("compare", str(SAMPLE), str(candidate), "--json")
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["structure"]["partial"] == []
        assert document["candidate"] == str(candidate)
    one_rank = traceview("compare", str(SAMPLE), str(SAMPLE / "rank-0.pt.trace.json.gz"), "--markdown")
    # changes in the figures that pool ranks are uncertain with 7 ranks not read: exit 4, never 1
    assert one_rank.returncode == 4, one_rank.stdout
    assert "uncertain: candidate: rank(s) 1-7 not read" in one_rank.stderr
    assert "ranks read differ at world size 8: baseline 8, candidate 1, 1 in both" in one_rank.stdout
