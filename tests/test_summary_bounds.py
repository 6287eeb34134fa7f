"""What a rank costs the run (issue 26): a summary bounded by steps and collectives, never by events; a
compact JSON document; saved schema-1.5 summaries still read; workers and polars threads sized together;
commands that import only what they use."""

from __future__ import annotations

import gzip
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from traceview.reports.json import summary as json_summary

from tests.kineto_factory import document, kernel, step, write
from traceview import analyze
from traceview.compare.samples import crossrank_samples
from traceview.map.executors import MapTask, summarize_file, worker_threads
from traceview.map.rank_summary import RankSummary

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
SAVED_1_5 = Path(__file__).parent / "fixtures" / "summaries" / "dp8_ideal-schema-1.5.json.gz"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COMPUTE_NAMES = (
    "ampere_sgemm_128x64_nn",
    "vectorized_elementwise_kernel<4>",
    "my_fused_kernel",
    "softmax_fwd",
)
STEPS, ALLREDUCES_PER_STEP = 4, 2


def _rank_trace(path: Path, kernels_per_step: int, seed: int) -> Path:
    """STEPS steps of `kernels_per_step` compute kernels (1-3 us apart, so every one is its own timeline
    segment) then ALLREDUCES_PER_STEP all-reduces: events grow with `kernels_per_step`, steps and collectives
    do not."""
    events, ts = [], 0.0
    for number in range(STEPS):
        start = ts
        for index in range(kernels_per_step):
            name = COMPUTE_NAMES[(index + seed) % len(COMPUTE_NAMES)]
            events.append(kernel(name, ts, 4.0 + (index * 7 + seed) % 5))
            ts += 10.0 + (index + seed) % 3
        for _ in range(ALLREDUCES_PER_STEP):
            events.append(kernel(ALLREDUCE, ts, 120.0, stream=20))
            ts += 130.0
        events.append(step(number, start - 1.0, ts - start + 2.0))
        ts += 50.0
    return write(document(events), path)


def _summary(path: Path) -> RankSummary:
    found = summarize_file(MapTask(str(path), ranks_in_run=1))
    assert isinstance(found, RankSummary), found
    return found


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1000), base=st.integers(300, 400))
def test_a_summary_stays_flat_when_events_per_step_grow_tenfold(tmp_path: Path, seed: int, base: int) -> None:
    small = _summary(_rank_trace(tmp_path / f"small-{seed}.json", base, seed))
    large = _summary(_rank_trace(tmp_path / f"large-{seed}.json", 10 * base, seed))
    assert small.per_step.height == large.per_step.height == STEPS
    assert small.kernels.height == large.kernels.height == STEPS * ALLREDUCES_PER_STEP
    small_bytes, large_bytes = len(pickle.dumps(small)), len(pickle.dumps(large))
    assert large_bytes <= 1.1 * small_bytes, (small_bytes, large_bytes)
    for name in ("segments", "class_sketches", "top_gaps", "kernel_classes", "gap_steps"):
        assert getattr(large, name).height <= getattr(small, name).height * 1.1, name


@pytest.fixture(scope="module")
def straggler_documents() -> tuple[dict[str, Any], dict[str, Any]]:
    analysis = analyze(SAMPLES / "dp8_straggler", workers=1).raw
    full = json.loads(json_summary.render_json(analysis, full=True))
    listed = json_summary.LISTED_INSTANCES
    try:
        json_summary.LISTED_INSTANCES = 5
        compact = json.loads(json_summary.render_json(analysis))
    finally:
        json_summary.LISTED_INSTANCES = listed
    return compact, full


def test_the_compact_document_lists_the_instances_of_largest_skew(
    straggler_documents: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    compact, full = straggler_documents
    every = full["across_ranks"]["instances"]
    assert full["across_ranks"]["instances_total"] == compact["across_ranks"]["instances_total"] == len(every)
    assert len(every) > 5
    listed = compact["across_ranks"]["instances"]
    assert len(listed) == 5
    assert [row["instance"] for row in listed] == sorted(row["instance"] for row in listed)
    skews = sorted((row["skew_us"] for row in every if row["skew_us"] is not None), reverse=True)
    assert sorted((row["skew_us"] for row in listed), reverse=True) == skews[:5]
    listing = ("across_ranks", "kernels", "critical_path")  # the keys a full document lists more of
    assert {k: v for k, v in compact.items() if k not in listing} == {
        k: v for k, v in full.items() if k not in listing
    }
    assert compact["kernels"] == {k: v for k, v in full["kernels"].items() if k in compact["kernels"]}


def test_compare_reads_every_skew_of_a_compact_document(
    straggler_documents: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    compact, full = straggler_documents
    (from_sketch,) = crossrank_samples(compact)
    (from_instances,) = crossrank_samples(full)
    every = [row["skew_us"] for row in full["across_ranks"]["instances"] if row["skew_us"] is not None]
    assert len(every) <= 512  # below the sketch's bound the sketch is every value
    assert sorted(from_sketch.values) == sorted(from_instances.values) == sorted(every)


def _traceview(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False, timeout=300)


def test_a_saved_schema_1_5_summary_stays_readable_by_compare_and_trend(tmp_path: Path) -> None:
    old = tmp_path / "night-1.json"
    old.write_bytes(gzip.decompress(SAVED_1_5.read_bytes()))
    assert json.loads(old.read_text())["schema_version"] == "1.5"
    new = tmp_path / "night-2.json"
    written = _traceview("summary", str(SAMPLES / "dp8_ideal"), "--json", "--quiet", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    new.write_text(written.stdout)
    assert json.loads(written.stdout)["schema_version"] == json_summary.SCHEMA_VERSION
    compared = _traceview("compare", str(old), str(new), "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr  # the same run: nothing regressed
    found = json.loads(compared.stdout)
    assert found["regressions"] == found["improvements"] == []
    trend = _traceview("trend", str(old), str(new), "--json", cwd=tmp_path)
    assert trend.returncode == 0, trend.stderr
    assert len(json.loads(trend.stdout)["runs"]) == 2


def test_workers_share_the_cores_among_their_threads() -> None:
    assert worker_threads(1, cores=16) == 16
    assert worker_threads(2, cores=16) == 8
    assert worker_threads(3, cores=16) == 5  # 16 // 3
    assert worker_threads(16, cores=16) == 1
    assert worker_threads(32, cores=16) == 1  # never zero


PROBE = """
import sys
sys.argv = ["traceview", *sys.argv[1:]]
from traceview.cli.entry import main
try:
    main()
except SystemExit:
    pass
heavy = ("polars", "plotly", "jinja2", "msgspec", "rich", "rich.progress")
heavy += ("traceview.reduce", "traceview.parsers")
print(",".join(name for name in heavy if name in sys.modules))
"""


@pytest.mark.parametrize(
    ("args", "unused"),
    [
        (["--version"], "polars,plotly,jinja2,msgspec,traceview.reduce,traceview.parsers"),
        (["--help"], "polars,plotly,jinja2,rich,traceview.reduce,traceview.parsers"),
        (["summary", "--help"], "polars,plotly,jinja2,rich,traceview.reduce,traceview.parsers"),
    ],
)
def test_version_and_help_import_no_analysis(args: list[str], unused: str) -> None:
    found = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True, timeout=60
    )
    imported = set(found.stdout.strip().splitlines()[-1].split(",")) - {""}
    assert not imported & set(unused.split(",")), imported


def test_summary_imports_no_renderer_it_does_not_use() -> None:
    probe = PROBE.replace('"msgspec", "rich", ', "")
    found = subprocess.run(
        [sys.executable, "-c", probe, "summary", str(SAMPLES / "dp8_ideal"), "--json", "--quiet"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    imported = set(found.stdout.strip().splitlines()[-1].split(","))
    assert "polars" in imported  # it analysed the run
    assert not imported & {"plotly", "jinja2", "rich.progress"}, imported  # no bar drawn: --quiet
