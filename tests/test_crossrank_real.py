"""Across ranks on real traces and on the samples, every expectation from an independent computation.

`hta_sampled_2rank` (ranks 0 and 1 of a 128-rank job, events sampled, no process groups): each trace holds
calls the other lost. Recomputed in plain Python from the raw JSON: two NCCL kernels of the two ranks are one
instance when they run on the same stream under the same kernel name and overlap in time (the two ranks share
a host clock: the AllToAll they share ends at the same microsecond on both). Paired by position instead, 3 of
the 7 pairs joined different calls and the median skew read 22.3 ms.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.shared_data import requires_shared
from traceview.across_ranks.analysis import CrossRank
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"
PAIR = REAL / "hta_sampled_2rank"
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"

Kernel = tuple[float, float, str, int]


def _nccl_kernels(path: Path) -> list[Kernel]:
    """(start, end, name, stream) of every NCCL kernel in the file, in time order."""
    with gzip.open(path, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl")]
    return sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"], int(e["args"]["stream"]))
        for e in kernels
    )


def _overlapping_pairs(rank0: list[Kernel], rank1: list[Kernel]) -> list[tuple[Kernel, Kernel]]:
    return [
        (a, b)
        for a in rank0
        for b in rank1
        if a[2] == b[2] and a[3] == b[3] and max(a[0], b[0]) <= min(a[1], b[1])
    ]


@pytest.fixture(scope="module")
def crossrank() -> CrossRank:
    result = analyze(load_run(str(PAIR))).crossrank
    assert result is not None
    return result


@requires_shared
def test_sampled_pair_matches_only_the_calls_both_ranks_hold(crossrank: CrossRank) -> None:
    rank0 = _nccl_kernels(PAIR / "sampled_rank-0.json.gz")
    rank1 = _nccl_kernels(PAIR / "sampled_rank-1.json.gz")
    pairs = _overlapping_pairs(rank0, rank1)
    assert len(pairs) == 5
    usable = crossrank.instances.filter(pl.col("skew_us").is_not_null()).get_column("instance")
    calls = crossrank.calls.filter(pl.col("instance").is_in(usable.implode()))
    starts = calls.group_by("instance").agg(pl.col("start_us").sort_by("rank")).get_column("start_us")
    assert sorted(tuple(pair) for pair in starts.to_list()) == sorted((a[0], b[0]) for a, b in pairs)
    offset = statistics.median(b[1] - a[1] for a, b in pairs)
    assert crossrank.clocks.offsets.sort("host").get_column("offset_us").to_list() == pytest.approx(
        [0.0, offset]
    )
    skews = [abs((b[0] - offset) - a[0]) for a, b in pairs]
    assert crossrank.gate_figures()["median_skew_us"] == pytest.approx(statistics.median(skews))
    # every kernel neither pair holds is listed, never silently dropped or paired
    paired = {a for a, _ in pairs} | {b for _, b in pairs}
    assert crossrank.mismatches.height >= (len(rank0) + len(rank1) - len(paired)) // 2


@requires_shared
def test_command_json_and_report_section(crossrank: CrossRank) -> None:
    from traceview.reports.html.page import render_html

    from tests.test_cli import traceview

    printed = traceview("stragglers", str(PAIR), "--json")
    # ranks 0 and 1 of a 128-rank job: the folder lacks ranks its traces promise, so the run is partial
    # (exit 4, one line) and the document is still printed
    assert printed.returncode == 4, printed.stderr
    assert printed.stderr.splitlines()[-1] == (
        "traceview: warning: rank(s) 2-127 not read: the run has 2 of world size 128"
    )
    document = json.loads(printed.stdout)
    assert document["sentence"] == crossrank.sentence
    assert len(document["instances"]) == crossrank.instances.height
    assert len(document["mismatches"]) == crossrank.mismatches.height
    assert document["stragglers"] == list(crossrank.stragglers)
    assert {"lateness_cost_us", "clock_uncertainty_us", "resolvable"} <= set(document["per_rank"][0])
    page = render_html(analyze(load_run(str(PAIR))), plotlyjs="cdn")
    for element in (
        "straggler-sentence",
        "fig-lateness",
        "fig-wait",
        "table-clock-offsets",
        "table-stragglers",
    ):
        assert f'id="{element}"' in page


@requires_shared
def test_calls_without_a_process_group_are_grouped_by_stream() -> None:
    """`hta_16rank_job_rank0` records no process group: its NCCL kernels form one group per CUDA stream, every
    kernel one instance (one member present, nothing to miss)."""
    path = REAL / "hta_16rank_job_rank0"
    result = analyze(load_run(str(path))).crossrank
    assert result is not None
    per_stream = Counter(stream for *_, stream in _nccl_kernels(path / "rank0.json.gz"))
    counted = dict(result.instances.group_by("group").len().rows())
    assert counted == {f"stream {stream}": count for stream, count in per_stream.items()}
    assert result.mismatches.height == 0


def _truth(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SAMPLES / f"{name}.ground_truth.json").read_text())
    return document


def test_dp8_straggler_rank_5_slow_compute_and_its_cost() -> None:
    """Ground truth: per step, rank 5's arrival minus the second latest, summed over the instances it was last
    in, capped at the median over ranks of the step's exposed communication (T_comm - T_overlap)."""
    truth = _truth("dp8_straggler")
    result = analyze(load_run(str(SAMPLES / "dp8_straggler"))).crossrank
    assert result is not None
    assert result.stragglers == (truth["straggler_rank"],)
    row = result.per_rank.filter(pl.col("rank") == 5).row(0, named=True)
    assert (row["cause"], row["resolvable"]) == ("slow compute", True)
    sums: dict[int, float] = {}
    for instance in truth["instances"]:
        arrivals = instance["arrive_us"]
        late = (
            arrivals[instance["ranks"].index(5)] - sorted(arrivals)[-2] if instance["last_rank"] == 5 else 0.0
        )
        sums[instance["step"]] = sums.get(instance["step"], 0.0) + late
    steps = sorted({s["step"] for s in truth["steps"]})
    exposed = [
        statistics.median(s["t_comm_us"] - s["t_overlap_us"] for s in truth["steps"] if s["step"] == step)
        for step in steps
    ]
    costs = [min(sums[index], cap) for index, cap in enumerate(exposed)]
    assert row["lateness_cost_us"] == pytest.approx(statistics.median(costs), rel=0.01)
    assert "rank 5" in result.sentence.lower()
    assert "per step" in result.sentence


def test_pp4_mismatch_is_listed_where_it_was_planted() -> None:
    truth = _truth("pp4_mismatch")["mismatch"]
    result = analyze(load_run(str(SAMPLES / "pp4_mismatch"))).crossrank
    assert result is not None
    names = dict(result.groups.select("group", "pg_name").rows())
    found = [
        (names[row["group"]], row["rank"], row["seq"], row["kind"])
        for row in result.mismatches.iter_rows(named=True)
    ]
    assert found == [(truth["pg_name"], truth["rank"], truth["seq"], truth["kind"])]
    step = result.mismatches.item(0, "step")
    assert step == 3  # `ProfilerStep#3`, step index 2 of the simulator (README: pp4_mismatch)
