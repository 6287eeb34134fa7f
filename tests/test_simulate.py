"""The scenario simulator: Kineto schema of what it writes, its ground truth recomputed from the JSON by a
plain-Python pass, determinism, the planted straggler/mismatch/offsets, and the data-parallel closed form."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.shared_data import requires_shared
from tests.simulate.engine import write_run
from tests.simulate.scenario import (
    CollectiveSpec,
    GroundTruth,
    MismatchSpec,
    ProcessGroupSpec,
    Scenario,
    StragglerSpec,
    data_parallel_scenario,
    ground_truth_dict,
)
from traceview.core.errors import UsageError

REAL = Path(__file__).resolve().parents[2] / "shared/data/real/kineto/hta_nccl_data/nccl_data.json.gz"
MIB = 1 << 20
WORLD4 = ProcessGroupSpec("0", "default_pg", (0, 1, 2, 3))
PAIR = ProcessGroupSpec("5", "pp_1_2", (1, 2))
QUAD_TP = ProcessGroupSpec("7", "tp", (0, 1, 2, 3))
Doc = dict[str, Any]


def mixed_scenario(**changes: Any) -> Scenario:
    """4 ranks on 2 hosts, overlap, AllReduce + SendRecv + AllGather, offset 25 ms on host 1."""
    base: dict[str, Any] = {
        "ranks": 4,
        "ranks_per_host": 2,
        "steps": 3,
        "collectives": (
            CollectiveSpec("AllReduce", 8 * MIB, WORLD4),
            CollectiveSpec("SendRecv", 2 * MIB, PAIR),
            CollectiveSpec("AllGather", 4 * MIB, QUAD_TP, "Float"),
        ),
        "compute_us": 4_000.0,
        "jitter": 0.05,
        "host_offsets_us": (0.0, 25_000.0),
        "bandwidth_Bps": 20e9,
        "alpha_s": 5e-6,
        "optimizer_us": 200.0,
        "seed": 7,
    }
    base.update(changes)
    return Scenario(**base)


def load(path: Path) -> Doc:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as stream:
        document: Doc = json.load(stream)
    return document


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Sort and merge (a different method from the simulator's two-pointer sweep)."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None and current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None and current_start is not None:
        total += current_end - current_start
    return total


def kernels(doc: Doc) -> list[Doc]:
    return [event for event in doc["traceEvents"] if event.get("cat") == "kernel"]


def is_comm(event: Doc) -> bool:
    return str(event["name"]).startswith("nccl")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[GroundTruth, list[Doc]]:
    truth = write_run(mixed_scenario(include_seq=True), tmp_path_factory.mktemp("mixed"), gzip=True)
    return truth, [load(path) for path in truth.files]


@requires_shared
def test_document_header_matches_the_real_pytorch_schema(mixed: tuple[GroundTruth, list[Doc]]) -> None:
    real = load(REAL)
    truth, docs = mixed
    assert [path.name for path in truth.files] == [f"rank-{rank}.pt.trace.json.gz" for rank in range(4)]
    doc = docs[2]
    assert list(doc)[-1] == "baseTimeNanoseconds"
    assert next(iter(doc)) == "schemaVersion"
    assert set(real) - {"INFO"} <= set(doc)
    assert "hostname" not in doc
    info = doc["distributedInfo"]
    assert set(info) == set(real["distributedInfo"])
    assert (info["rank"], info["world_size"], info["backend"]) == (2, 4, "nccl")
    assert set(info["pg_config"][0]) == set(real["distributedInfo"]["pg_config"][0])
    assert [pg["pg_name"] for pg in info["pg_config"]] == ["0", "5", "7"]  # rank 2 is in the SendRecv pair
    assert info["pg_count"] == 3
    assert set(doc["deviceProperties"][0]) == set(real["deviceProperties"][0])
    assert doc["deviceProperties"][0]["name"] == "NVIDIA A100-SXM4-80GB"


@requires_shared
def test_comm_args_carry_every_key_real_pytorch_writes(mixed: tuple[GroundTruth, list[Doc]]) -> None:
    real_events = load(REAL)["traceEvents"]
    real_call = next(event for event in real_events if event.get("name") == "record_param_comms")
    real_kernel = next(event for event in real_events if event.get("cat") == "kernel" and is_comm(event))
    _, docs = mixed
    calls = [event for event in docs[1]["traceEvents"] if event.get("name") == "record_param_comms"]
    assert len(calls) == 3 * 3  # rank 1 is in all three groups, 3 steps
    for call in calls:
        assert set(real_call["args"]) - {"Ev Idx"} <= set(call["args"])
        assert isinstance(call["args"]["Seq"], int)
    comm_kernels = [event for event in kernels(docs[1]) if is_comm(event)]
    for kernel in comm_kernels:
        assert set(real_kernel["args"]) <= set(kernel["args"])
    names = Counter(call["args"]["Collective name"] for call in calls)
    assert names == {"allreduce": 3, "send": 3, "_allgather_base": 3}  # the pair is (sender 1, receiver 2)
    gather = next(call for call in calls if call["args"]["Collective name"] == "_allgather_base")
    assert (gather["args"]["In msg nelems"], gather["args"]["Out msg nelems"]) == (
        4 * MIB // 4 // 4,
        4 * MIB // 4,
    )
    assert gather["args"]["Process Group Ranks"] == "[0, 1, 2, 3]"


def test_every_kernel_has_one_launch_inside_its_call(mixed: tuple[GroundTruth, list[Doc]]) -> None:
    for doc in mixed[1]:
        events = doc["traceEvents"]
        launches = Counter(e["args"]["correlation"] for e in events if e.get("name") == "cudaLaunchKernel")
        launch_by_corr = {e["args"]["correlation"]: e for e in events if e.get("name") == "cudaLaunchKernel"}
        calls = {e["args"]["External id"]: e for e in events if e.get("name") == "record_param_comms"}
        flows = Counter((e["ph"], e["id"]) for e in events if e.get("cat") == "ac2g")
        for kernel in kernels(doc):
            correlation = kernel["args"]["correlation"]
            assert launches[correlation] == 1
            assert flows[("s", correlation)] == 1
            assert flows[("f", correlation)] == 1
            launch = launch_by_corr[correlation]
            assert kernel["ts"] >= launch["ts"] + launch["dur"] - 1e-6
            if is_comm(kernel):
                call = calls[kernel["args"]["External id"]]
                assert call["ts"] <= launch["ts"]
                assert launch["ts"] + launch["dur"] <= call["ts"] + call["dur"]


def test_profiler_step_windows_contain_their_events(mixed: tuple[GroundTruth, list[Doc]]) -> None:
    for doc in mixed[1]:
        events = doc["traceEvents"]
        cpu_steps = [e for e in events if e.get("cat") == "user_annotation" and "ProfilerStep" in e["name"]]
        gpu_steps = {e["name"]: e for e in events if e.get("cat") == "gpu_user_annotation"}
        assert [step["name"] for step in cpu_steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
        for event in events:
            if event.get("ph") != "X" or event.get("cat") in (
                "user_annotation",
                "Trace",
                "gpu_user_annotation",
            ):
                continue
            inside = [
                s
                for s in cpu_steps
                if s["ts"] <= event["ts"] and event["ts"] + event["dur"] <= s["ts"] + s["dur"]
            ]
            assert len(inside) == 1, event
            if event["cat"] == "kernel":
                gpu = gpu_steps[inside[0]["name"]]
                assert gpu["ts"] <= event["ts"]
                assert event["ts"] + event["dur"] <= gpu["ts"] + gpu["dur"] + 1e-6


def test_step_budget_truth_matches_a_union_pass_over_the_json(mixed: tuple[GroundTruth, list[Doc]]) -> None:
    truth, docs = mixed
    by_key = {(step.rank, step.step): step for step in truth.steps}
    for rank, doc in enumerate(docs):
        windows = [
            e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and "ProfilerStep" in e["name"]
        ]
        for window in windows:
            start, end = window["ts"], window["ts"] + window["dur"]
            inside = [k for k in kernels(doc) if start <= k["ts"] < end]
            compute = [(k["ts"], k["ts"] + k["dur"]) for k in inside if not is_comm(k)]
            comm = [(k["ts"], k["ts"] + k["dur"]) for k in inside if is_comm(k)]
            busy = union_length(compute + comm)
            expected = by_key[(rank, int(window["name"].split("#")[1]))]
            assert expected.t_comp_us == pytest.approx(union_length(compute), abs=1e-3)
            assert expected.t_comm_us == pytest.approx(union_length(comm), abs=1e-3)
            overlap = union_length(compute) + union_length(comm) - busy
            assert expected.t_overlap_us == pytest.approx(overlap, abs=1e-3)
            assert expected.idle_us == pytest.approx(window["dur"] - busy, abs=1e-3)
            assert expected.window_start_us == pytest.approx(start, abs=1e-3)


def comm_kernels_by_instance(truth: GroundTruth, docs: list[Doc]) -> dict[tuple[str, int], dict[int, Doc]]:
    """(pg, Seq) -> rank -> kernel, from the JSON."""
    found: dict[tuple[str, int], dict[int, Doc]] = defaultdict(dict)
    for rank, doc in enumerate(docs):
        for kernel in kernels(doc):
            if is_comm(kernel):
                found[(kernel["args"]["Process Group Name"], kernel["args"]["Seq"])][rank] = kernel
    return found


def test_instance_truth_matches_the_json_after_removing_offsets(mixed: tuple[GroundTruth, list[Doc]]) -> None:
    truth, docs = mixed
    found = comm_kernels_by_instance(truth, docs)
    offset = [0.0, 0.0, 25_000.0, 25_000.0]  # host 1 = ranks 2, 3
    assert len(truth.instances) == 3 * 3
    for instance in truth.instances:
        members = found[(instance.pg_name, instance.seq)]
        assert sorted(members) == sorted(instance.ranks)
        starts = {rank: members[rank]["ts"] - offset[rank] for rank in instance.ranks}
        ends = {
            round(members[rank]["ts"] + members[rank]["dur"] - offset[rank], 3) for rank in instance.ranks
        }
        assert len(ends) == 1  # one true completion instant on every member
        assert instance.skew_us == pytest.approx(max(starts.values()) - min(starts.values()), abs=1e-3)
        assert instance.last_rank == max(starts, key=lambda rank: starts[rank])
        shortest = min(members[rank]["dur"] for rank in instance.ranks)
        assert instance.transfer_us == pytest.approx(shortest, abs=1e-3)
        for rank, wait in zip(instance.ranks, instance.wait_us, strict=True):
            assert wait == pytest.approx(members[rank]["dur"] - shortest, abs=1e-3)


def test_transfer_time_is_the_alpha_beta_formula(mixed: tuple[GroundTruth, list[Doc]]) -> None:
    by_index = {instance.index: instance for instance in mixed[0].instances}
    # AllReduce n=4 across hosts: 2*3 hops of 5 us + 2*3/4 * 8 MiB / 20 GB/s
    assert by_index[0].transfer_us == pytest.approx(6 * 5 + 1.5 * 8 * MIB / 20e9 * 1e6, abs=1e-3)
    # SendRecv between ranks 1 (host 0) and 2 (host 1): 1 hop + S / B
    assert by_index[1].transfer_us == pytest.approx(5 + 2 * MIB / 20e9 * 1e6, abs=1e-3)
    # AllGather n=4: 3 hops + 3/4 * S / B
    assert by_index[2].transfer_us == pytest.approx(3 * 5 + 0.75 * 4 * MIB / 20e9 * 1e6, abs=1e-3)


def test_output_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    scenario = mixed_scenario(steps=2)
    first = write_run(scenario, tmp_path / "a")
    second = write_run(scenario, tmp_path / "b")
    other = write_run(mixed_scenario(steps=2, seed=8), tmp_path / "c")
    assert [p.read_bytes() for p in first.files] == [p.read_bytes() for p in second.files]
    assert first.steps == second.steps
    assert first.instances == second.instances
    assert [p.read_bytes() for p in first.files] != [p.read_bytes() for p in other.files]
    assert [p.name for p in first.files] == ["rank0.json", "rank1.json", "rank2.json", "rank3.json"]
    zipped = [write_run(scenario, tmp_path / folder, gzip=True).files for folder in ("gz1", "gz2")]
    assert [p.read_bytes() for p in zipped[0]] == [p.read_bytes() for p in zipped[1]]
    unzipped = [
        gzip.decompress(p.read_bytes()).replace(p.name.encode(), f"rank{r}.json".encode())
        for r, p in enumerate(zipped[0])
    ]
    assert unzipped == [p.read_bytes() for p in first.files]  # the same document but for traceName


def test_data_parallel_gamma_equals_the_closed_form(tmp_path: Path) -> None:
    workers, params, batch, rate, bandwidth = 8, 120_000_000, 4096, 100e12, 12.5e9
    truth = write_run(
        data_parallel_scenario(workers, params, batch, rate, bandwidth, buckets=3, steps=2), tmp_path
    )
    closed_form = 2 * 7 / 8 * 2 * 100e12 / (6 * 4096 * 12.5e9)
    assert truth.model is not None
    assert truth.model.gamma_pred == pytest.approx(closed_form)
    doc = load(truth.files[3])
    comm = sum(k["dur"] for k in kernels(doc) if is_comm(k))
    compute = sum(k["dur"] for k in kernels(doc) if not is_comm(k))
    assert comm / compute == pytest.approx(closed_form, rel=1e-4)
    calls = [e for e in doc["traceEvents"] if e.get("name") == "record_param_comms"]
    assert (
        sum(call["args"]["In msg nelems"] for call in calls) * 2 == 2 * 2 * params
    )  # g * P per step, 2 steps
    flops = sum(e["args"].get("flops", 0) for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    assert flops == pytest.approx(2 * 6 * params * batch, rel=1e-9)
    assert all(instance.skew_us == 0 for instance in truth.instances)


def test_compute_straggler_is_last_and_waits_least(tmp_path: Path) -> None:
    scenario = mixed_scenario(straggler=StragglerSpec(3, "compute", 1_000.0, 1_500.0), jitter=0.01)
    truth = write_run(scenario, tmp_path)
    world = [instance for instance in truth.instances if instance.pg_name == "0"]
    assert {instance.last_rank for instance in world} == {3}
    assert truth.straggler_rank == 3
    comp = {(s.rank, s.step): s.t_comp_us for s in truth.steps}
    assert all(comp[(3, step)] - comp[(0, step)] >= 1_000 - 0.02 * 2 * 4_000 for step in (1, 2, 3))


def test_launch_straggler_shows_a_host_sync_before_its_calls(tmp_path: Path) -> None:
    truth = write_run(mixed_scenario(straggler=StragglerSpec(0, "launch", 800.0, 900.0)), tmp_path)
    assert {instance.last_rank for instance in truth.instances if instance.pg_name == "0"} == {0}
    syncs = [e for e in load(truth.files[0])["traceEvents"] if e.get("name") == "cudaStreamSynchronize"]
    assert len(syncs) >= 3 * 2  # before each of its calls (the step-end sync may be absorbed)


def test_planted_extra_call_and_bytes_mismatch(tmp_path: Path) -> None:
    extra = write_run(
        mixed_scenario(include_seq=True, mismatch=MismatchSpec(2, "extra", 1, 2)), tmp_path / "x"
    )
    assert extra.mismatch is not None
    assert (extra.mismatch.pg_name, extra.mismatch.seq) == ("7", 1)
    counts = [
        sum(1 for k in kernels(load(p)) if is_comm(k) and k["args"]["Process Group Name"] == "7")
        for p in extra.files
    ]
    assert counts == [3, 3, 4, 3]
    wrong = write_run(
        mixed_scenario(include_seq=True, mismatch=MismatchSpec(1, "bytes", 2, 0, 3)), tmp_path / "b"
    )
    found = comm_kernels_by_instance(wrong, [load(p) for p in wrong.files])[("0", 2)]
    assert [found[rank]["args"]["In msg nelems"] for rank in range(4)] == [
        4 * MIB,
        12 * MIB,
        4 * MIB,
        4 * MIB,
    ]


def test_options_hostname_nccl_grammar_and_rank_truncation(tmp_path: Path) -> None:
    world = ProcessGroupSpec("0", "default_pg", tuple(range(32)))
    collectives = (CollectiveSpec("AllReduce", MIB, world),)
    scenario = Scenario(32, 1, collectives, 500.0, include_hostname=True, nccl_version="2.21.5")
    truth = write_run(scenario, tmp_path)
    doc = load(truth.files[9])
    assert doc["hostname"] == "node001"  # 8 ranks a host by default
    kernel = next(k for k in kernels(doc) if is_comm(k))
    assert (
        kernel["name"] == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    )
    assert kernel["args"]["Process Group Ranks"] == "[" + ", ".join(str(r) for r in range(30)) + ", ...]"
    assert "Seq" not in kernel["args"]
    assert json.loads(json.dumps(ground_truth_dict(truth)))["files"][9] == "rank9.json"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"collectives": (CollectiveSpec("AllReduce", 3, WORLD4),)}, "bytes"),
        ({"collectives": (CollectiveSpec("SendRecv", MIB, WORLD4),)}, "SendRecv"),
        ({"host_offsets_us": (1.0,)}, "host_offsets_us"),
        ({"straggler": StragglerSpec(9, "compute", 1.0, 2.0)}, "straggler"),
        ({"mismatch": MismatchSpec(0, "extra", 0, 1)}, "mismatch"),
    ],
)
def test_inconsistent_scenarios_are_refused(tmp_path: Path, change: dict[str, Any], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        write_run(mixed_scenario(**change), tmp_path)
    assert not list(tmp_path.iterdir())
