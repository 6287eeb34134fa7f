"""Across ranks on the real pair `hta_sampled_2rank` (ranks 0 and 1 of a 128-rank job), every figure recomputed
independently in plain Python from the raw JSON: NCCL kernels in time order, paired by ordinal."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.shared_data import requires_shared
from traceview.across_ranks.analysis import CrossRank
from traceview.load.inputs import load_run
from traceview.reduce.analysis import analyze

pytestmark = requires_shared

PAIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto" / "hta_sampled_2rank"


def _nccl_kernels(path: Path) -> list[tuple[float, float]]:
    """(start, end) of every NCCL kernel in the file, in time order."""
    with gzip.open(path, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl")]
    return sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels)


@pytest.fixture(scope="module")
def crossrank() -> CrossRank:
    result = analyze(load_run(str(PAIR))).crossrank
    assert result is not None
    return result


@pytest.fixture(scope="module")
def raw() -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    return _nccl_kernels(PAIR / "sampled_rank-0.json.gz"), _nccl_kernels(PAIR / "sampled_rank-1.json.gz")


def test_every_kernel_is_matched_by_ordinal(crossrank: CrossRank, raw: tuple[list[Any], list[Any]]) -> None:
    rank0, rank1 = raw
    assert len(rank0) == len(rank1) == 10
    assert crossrank.instances.height == 10
    assert crossrank.groups.select("members", "present").row(0) == (2, 2)
    # The program's pairs, instance by instance, are the raw kernels zipped in time order.
    instances = crossrank.instances.sort("instance").get_column("instance").to_list()
    for position, instance in enumerate(instances):
        starts = dict(
            crossrank.calls.filter(pl.col("instance") == instance).select("rank", "start_us").rows()
        )
        if starts:  # usable instances only carry per-call figures
            assert starts == {0: pytest.approx(rank0[position][0]), 1: pytest.approx(rank1[position][0])}


def test_offset_skew_and_transfer_recomputed(crossrank: CrossRank, raw: tuple[list[Any], list[Any]]) -> None:
    rank0, rank1 = raw
    usable = crossrank.instances.filter(pl.col("skew_us").is_not_null()).sort("instance")
    ordinals = usable.get_column("ordinal").to_list()  # the pairing itself is checked in the test above
    offset = statistics.median(rank1[i][1] - rank0[i][1] for i in ordinals)
    offsets = crossrank.clocks.offsets.sort("host").get_column("offset_us").to_list()
    assert offsets == pytest.approx([0.0, offset])
    expected_skew = [abs((rank1[i][0] - offset) - rank0[i][0]) for i in ordinals]
    expected_last = [1 if rank1[i][0] - offset > rank0[i][0] else 0 for i in ordinals]
    expected_transfer = [min(rank0[i][1] - rank0[i][0], rank1[i][1] - rank1[i][0]) for i in ordinals]
    assert usable.get_column("skew_us").to_list() == pytest.approx(expected_skew)
    assert usable.get_column("last_rank").to_list() == expected_last
    assert usable.get_column("transfer_us").to_list() == pytest.approx(expected_transfer)
    times_last = crossrank.per_rank.sort("rank").get_column("times_last").to_list()
    assert times_last == [expected_last.count(0), expected_last.count(1)]


def test_command_json_and_report_section(crossrank: CrossRank) -> None:
    from traceview.reports.html import render_html
    from typer.testing import CliRunner

    from traceview.cli.main import app

    printed = CliRunner().invoke(app, ["stragglers", str(PAIR), "--json"])
    assert printed.exit_code == 0
    document = json.loads(printed.stdout)
    assert document["sentence"] == crossrank.sentence
    assert len(document["instances"]) == 10
    assert document["stragglers"] == list(crossrank.stragglers)
    page = render_html(analyze(load_run(str(PAIR))), plotlyjs="cdn")
    for element in (
        "straggler-sentence",
        "fig-lateness",
        "fig-wait",
        "table-clock-offsets",
        "table-stragglers",
    ):
        assert f'id="{element}"' in page
