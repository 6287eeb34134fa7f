"""Collectives on real traces (../shared/data/real/kineto, never edited).

Expected values come from an independent plain-Python pass over the JSON (json + gzip, dictionaries and
bisect, no polars and no traceview code): each NCCL kernel, its launch by correlation, the collective calls
that contain the launch on the same thread, and the collective and bytes those calls name. busbw is checked by
hand arithmetic on numbers read from the JSON for one kernel of each collective type present.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.shared_data import requires_shared
from traceview.budget.time_budget import classified_events
from traceview.collectives.tables import CollectiveAnalysis, analyze_collectives
from traceview.load.inputs import load_run

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"
TRACES = (
    "hta_nccl_data",
    "hta_16rank_job_rank0",
    "hta_sampled_2rank",
    "hta_trace_diff_control",
    "hta_df_index_resolver",
)

# The spellings these five traces use, written out by hand.
COLLECTIVES = {
    "allreduce": "AllReduce",
    "all_reduce": "AllReduce",
    "broadcast": "Broadcast",
    "_all_gather_base": "AllGather",
    "_reduce_scatter_base": "ReduceScatter",
    "all_to_all": "AllToAll",
}
ELEMENT_BYTES = {"Float": 4, "float": 4, "Long": 8, "long": 8, "int": 4, "signed char": 1, "unsigned char": 1}
CALL_PREFIXES = ("nccl:", "c10d::")

pytestmark = requires_shared


def numel(dims: list[int]) -> int:
    return math.prod(dims)


@cache
def analysis(name: str) -> CollectiveAnalysis:
    run = load_run(REAL / name, workers=1)
    return analyze_collectives(run, classified_events(run))


def _calls_by_thread(events: list[dict[str, Any]]) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    calls = defaultdict(list)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") in ("cpu_op", "user_annotation") and (
            name == "record_param_comms" or name.startswith(CALL_PREFIXES)
        ):
            calls[(event["pid"], event["tid"])].append(event)
    return {key: sorted(found, key=lambda e: e["ts"]) for key, found in calls.items()}


def _containing(calls: list[dict[str, Any]], starts: list[float], ts: float) -> list[dict[str, Any]]:
    """The calls of one thread that contain time `ts` (they nest, so they are among the last few to start)."""
    last = bisect.bisect_right(starts, ts)
    return [c for c in calls[max(0, last - 8) : last] if c["ts"] <= ts <= c["ts"] + c["dur"]]


def _from_calls(containing: list[dict[str, Any]]) -> tuple[str, int | None]:
    """(collective, S) from the `nccl:*` annotation's Input Dims (and the c10d base op's output for
    AllGather)."""
    backend = next(c for c in containing if c["name"].startswith("nccl:"))
    collective = COLLECTIVES[backend["name"].removeprefix("nccl:")]
    args = backend.get("args", {})
    if "Input Dims" not in args:
        return collective, None
    size = sum(
        numel(d) * ELEMENT_BYTES[t] for d, t in zip(args["Input Dims"], args["Input type"], strict=True)
    )
    if collective == "AllGather":
        c10d = next(c for c in containing if c["name"] == "c10d::_allgather_base_")
        size = numel(c10d["args"]["Input Dims"][0]) * ELEMENT_BYTES[c10d["args"]["Input type"][0]]
    return collective, size


def _from_kernel_args(args: dict[str, Any]) -> tuple[str, int]:
    return COLLECTIVES[args["Collective name"]], args["In msg nelems"] * ELEMENT_BYTES[args["dtype"]]


@cache
def plain_pass(name: str) -> dict[str, Any]:
    """Per rank: Counter of calls per collective, bytes per collective, calls of unknown size, linked kernels,
    kernels; and per correlation id: (collective, S, duration)."""
    result: dict[str, Any] = {}
    for path in sorted((REAL / name).iterdir()):
        with gzip.open(path) as stream:
            document = json.loads(stream.read())
        events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
        rank = document["distributedInfo"]["rank"]
        launches = {
            e["args"]["correlation"]: e
            for e in events
            if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
        }
        calls = _calls_by_thread(events)
        starts = {key: [c["ts"] for c in found] for key, found in calls.items()}
        calls_of, bytes_of, unknown = Counter(), Counter(), Counter()
        linked, kernels, by_correlation = 0, 0, {}
        for kernel in (e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()):
            kernels += 1
            args = kernel["args"]
            launch = launches.get(args.get("correlation"))
            key = (launch["pid"], launch["tid"]) if launch else None
            containing = _containing(calls[key], starts[key], launch["ts"]) if key in calls else []
            if "Collective name" in args:
                collective, size = _from_kernel_args(args)
            elif containing:
                collective, size = _from_calls(containing)
            else:
                collective, size = "SendRecv" if "SendRecv" in kernel["name"] else "?", None
            linked += bool(containing) or "Collective name" in args
            calls_of[collective] += 1  # every call of these traces launches one kernel
            bytes_of[collective] += size or 0
            unknown[collective] += size is None
            by_correlation[(rank, args["correlation"])] = (collective, size, kernel["dur"])
        result[rank] = {
            "calls": calls_of,
            "bytes": bytes_of,
            "unknown": unknown,
            "linked": linked,
            "kernels": kernels,
        }
        result.setdefault("kernels", {}).update(by_correlation)
    return result


def program_totals(result: CollectiveAnalysis) -> dict[tuple[int, str], tuple[int, int, int]]:
    table = result.per_collective.group_by("rank", "collective").agg(
        pl.col("calls").sum(), pl.col("size_bytes").fill_null(0).sum(), pl.col("calls_unknown_size").sum()
    )
    return {
        (r["rank"], r["collective"]): (r["calls"], r["size_bytes"], r["calls_unknown_size"])
        for r in table.iter_rows(named=True)
    }


@pytest.mark.parametrize("name", TRACES)
def test_calls_and_bytes_per_collective_match_a_plain_pass(name: str) -> None:
    expected = plain_pass(name)
    found = program_totals(analysis(name))
    ranks = [rank for rank in expected if rank != "kernels"]
    wanted = {
        (rank, collective): (
            expected[rank]["calls"][collective],
            expected[rank]["bytes"][collective],
            expected[rank]["unknown"][collective],
        )
        for rank in ranks
        for collective in expected[rank]["calls"]
    }
    assert found == wanted


@pytest.mark.parametrize("name", TRACES)
def test_linked_share_matches_a_plain_pass(name: str) -> None:
    expected = plain_pass(name)
    ranks = [rank for rank in expected if rank != "kernels"]
    per_rank = {row["rank"]: row for row in analysis(name).per_rank.iter_rows(named=True)}
    for rank in ranks:
        assert per_rank[rank]["comm_kernels"] == expected[rank]["kernels"]
        assert per_rank[rank]["linked_kernels"] == expected[rank]["linked"]
    total = sum(expected[rank]["linked"] for rank in ranks) / sum(expected[rank]["kernels"] for rank in ranks)
    assert analysis(name).linked_share == pytest.approx(total)


def test_linked_share_is_complete_where_args_or_launches_exist() -> None:
    assert analysis("hta_nccl_data").linked_share == 1  # comm args on every kernel
    assert analysis("hta_nccl_data").kernels.get_column("linked_by").unique().to_list() == ["kernel args"]
    assert analysis("hta_16rank_job_rank0").linked_share == pytest.approx(
        75 / 80
    )  # 5 launches before the window


def kernel(name: str, rank: int, correlation: int) -> dict[str, Any]:
    rows = analysis(name).kernels.filter((pl.col("rank") == rank) & (pl.col("correlation") == correlation))
    assert rows.height == 1
    return rows.row(0, named=True)


# (trace, rank, correlation) -> (collective, S, t in us, f(n)); numbers from the JSON. Where the trace names
# no process group (PyTorch before 1.13), n is its `distributedInfo.world_size`: the default group is assumed.
HAND_CHECKS: dict[tuple[str, int, int], tuple[str, int, float, float]] = {
    ("hta_nccl_data", 0, 19832): ("Broadcast", 53120 * 4, 30.975, 1.0),
    ("hta_nccl_data", 0, 25941): ("AllReduce", 2049000 * 4, 3306.963, 2 * (2 - 1) / 2),
    ("hta_16rank_job_rank0", 0, 825847): (
        "ReduceScatter",
        65536 * 384 * 4,
        1071,
        (8 - 1) / 8,
    ),  # n = 65536 / 8192
    ("hta_16rank_job_rank0", 0, 837764): ("AllGather", 65536 * 64 * 4, 621, (8 - 1) / 8),  # n = 65536 / 8192
    ("hta_16rank_job_rank0", 0, 832565): ("AllReduce", 366336 * 4, 1106, 2 * (16 - 1) / 16),  # world 16
    ("hta_16rank_job_rank0", 0, 829911): ("AllToAll", 48 * 8, 143, (16 - 1) / 16),
    ("hta_sampled_2rank", 0, 7041617): ("AllGather", 1073741824 * 1, 42496, (64 - 1) / 64),  # n = 2^30 / 2^24
    ("hta_sampled_2rank", 1, 6907311): ("AllToAll", 339738624 * 1, 57924, (128 - 1) / 128),  # world 128
    ("hta_sampled_2rank", 0, 6981619): ("AllReduce", 19618307 * 4, 11727, 2 * (128 - 1) / 128),
    ("hta_trace_diff_control", 3, 1767604): ("AllToAll", 8 * 1024 * 8816 * 4, 3088, (8 - 1) / 8),  # world 8
    ("hta_trace_diff_control", 3, 1780254): ("AllReduce", 45310188 * 4, 1575, 2 * (8 - 1) / 8),
}


@pytest.mark.parametrize(("name", "rank", "correlation"), list(HAND_CHECKS))
def test_busbw_by_hand(name: str, rank: int, correlation: int) -> None:
    collective, size, duration_us, factor = HAND_CHECKS[(name, rank, correlation)]
    row = kernel(name, rank, correlation)
    assert (row["collective"], row["size_bytes"]) == (collective, size)
    # end - start on a clock of ~1e9 us keeps about 1e-6 of relative precision on a 30 us kernel
    assert row["dur_us"] == pytest.approx(duration_us, abs=1e-3)
    assert row["algbw_Bps"] == pytest.approx(size / (duration_us * 1e-6), rel=1e-4)
    assert row["busbw_Bps"] == pytest.approx(size / (duration_us * 1e-6) * factor, rel=1e-4)


def test_trace_without_comm_args_has_no_bytes() -> None:
    result = analysis("hta_df_index_resolver")
    kernels = result.kernels
    assert kernels.height == 2020
    assert kernels.get_column("collective").unique().to_list() == ["AllReduce"]
    assert kernels.get_column("size_bytes").null_count() == 2020
    assert kernels.get_column("busbw_Bps").null_count() == 2020
    assert kernels.get_column("call_name").unique().to_list() == ["c10d::allreduce_"]


def test_process_group_of_nccl_data() -> None:
    groups = analysis("hta_nccl_data").per_process_group.row(0, named=True)
    assert (groups["pg_key"], groups["pg_desc"], groups["pg_ranks"], groups["group_size"]) == (
        "0",
        "default_pg",
        "[0, 1]",
        2,
    )
    assert groups["calls"] == 15 + 6
