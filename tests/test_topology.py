"""GPUs per node from what the run shows (docs/metrics.md, "Predicted gamma", "Topology"): each kind of
evidence on its own, their precedence, one line wherever the value used disagrees with evidence, and the
samples and simulated runs whose placement is known from their settings."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl

from tests.simulate.engine import write_run
from tests.simulate.scenario import CollectiveSpec, ProcessGroupSpec, Scenario
from traceview.load.inputs import load_run
from traceview.prediction.topology import RunFacts, clock_groups, file_host, resolve_topology
from traceview.reduce.analysis import analyze

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
EIGHT = tuple(range(8))


def facts(**changes: object) -> RunFacts:
    return replace(RunFacts(ranks=EIGHT, world_size=8), **changes)  # type: ignore[arg-type]


def test_nothing_known_is_the_default_and_says_so() -> None:
    found = resolve_topology(facts())
    assert (found.ranks_per_node, found.source, found.known, found.hosts) == (8, "default", False, None)
    assert found.conflicts == ()


def test_device_ids_that_repeat_give_ranks_per_node() -> None:
    found = resolve_topology(facts(local_devices={r: r % 2 for r in EIGHT}))
    assert (found.ranks_per_node, found.source, found.hosts) == (2, "trace", 8 // 2)
    assert "every 2 ranks" in found.detail


def test_every_rank_on_device_zero_says_nothing() -> None:
    """CUDA_VISIBLE_DEVICES=<local rank> shows each process its GPU as device 0: no placement in that."""
    assert resolve_topology(facts(local_devices=dict.fromkeys(EIGHT, 0))).source == "default"


def test_hostnames_clock_groups_and_device_count() -> None:
    hosts = {r: f"node{r // 4}" for r in EIGHT}
    assert resolve_topology(facts(trace_hosts=hosts)).ranks_per_node == 4
    assert resolve_topology(facts(file_hosts=hosts)).ranks_per_node == 4
    assert resolve_topology(facts(clock_groups=((0, 1, 2, 3), (4, 5, 6, 7)))).ranks_per_node == 4
    # two clocks that are not blocks of ranks: no exact value (ranks 0-5 cannot all share a node of 4)
    uneven = resolve_topology(facts(clock_groups=((0, 1, 2, 3, 4, 5), (6, 7))))
    assert uneven.source == "default"
    assert uneven.conflicts == ()  # at least 6 per node is below the default 8
    # deviceProperties lists 4 GPUs, but a world of 2 fills only 2 of them
    assert resolve_topology(replace(facts(device_counts={0: 4, 1: 4}), world_size=2)).ranks_per_node == 2


def test_precedence_and_one_line_per_disagreement() -> None:
    stated = facts(stated_ranks_per_node=4, trace_hosts=dict.fromkeys(EIGHT, "one-big-node"))
    found = resolve_topology(stated)
    assert (found.ranks_per_node, found.source) == (4, "command line")
    assert found.conflicts == (
        "GPUs per node 4 (command line) although 1 host(s) of up to 8 rank(s) (hostnames in the traces) "
        "(trace): 8 per node",
    )
    logs_first = facts(
        log_hosts={r: f"h{r // 2}" for r in EIGHT}, trace_hosts={r: f"t{r // 4}" for r in EIGHT}
    )
    assert resolve_topology(logs_first).ranks_per_node == 2  # the NCCL log before the traces' hostnames


def test_default_against_a_lower_bound_is_one_line() -> None:
    """Rank 3 of a 16-rank world traced alone, on device 11: a node holds at least 12 GPUs."""
    found = resolve_topology(RunFacts(ranks=(3,), world_size=16, local_devices={3: 11}))
    assert found.source == "default"
    assert found.conflicts == (
        "GPUs per node 8 (default) although device ids in the traces: device 11 in use (trace): at least 12 "
        "per node",
    )


def test_a_partial_host_map_is_a_lower_bound() -> None:
    found = resolve_topology(RunFacts(ranks=(0, 1), world_size=128, trace_hosts={0: "a", 1: "a"}))
    assert found.source == "default"
    assert found.evidence[0].at_least == 2


def test_clock_groups_split_where_offsets_jump() -> None:
    offsets = pl.DataFrame(
        {
            "ranks": [[0], [1], [2], [3], [4]],
            "host_source": ["one rank per host (assumed)"] * 5,
            "offset_us": [0.0, 3.0, 25_000.0, 25_004.0, None],
            "spread_us": [0.0, 0.0, 1.0, 1.0, None],
        }
    )
    assert clock_groups(offsets) == ((0, 1), (2, 3))  # rank 4 has no offset: left out
    noisy = offsets.with_columns(pl.Series("spread_us", [0.0, 0.0, 40.0, 40.0, None]))
    jump = noisy.with_columns(pl.Series("offset_us", [0.0, 100.0, 200.0, 300.0, None]))
    # steps of 100 us, each split unless within twice the two ranks' spreads: 0 -> 100 (2 x 0 = 0: split),
    # 100 -> 200 (2 x (0 + 40) = 80: split), 200 -> 300 (2 x (40 + 40) = 160: one clock)
    assert clock_groups(jump) == ((0,), (1,), (2, 3))


def test_hostnames_in_file_names() -> None:
    assert file_host("ip-10-0-0-1_12345.1700000000123.pt.trace.json.gz") == "ip-10-0-0-1"
    assert file_host("gpu-a17.cluster_77.1700000000123.pt.trace.json") == "gpu-a17.cluster"
    assert file_host("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz") is None
    assert file_host("rank3_12.1700000000123.pt.trace.json") is None
    assert file_host("rank-3.pt.trace.json.gz") is None


def test_dp8_straggler_two_hosts_of_four_from_its_traces_alone(tmp_path: Path) -> None:
    """The traces without their run.json: device ids, clocks and deviceProperties all say 2 hosts of 4."""
    truth = json.loads((SAMPLES / "dp8_straggler.ground_truth.json").read_text(encoding="utf-8"))
    for path in (SAMPLES / "dp8_straggler").glob("*.pt.trace.json.gz"):
        shutil.copy(path, tmp_path / path.name)
    found = analyze(load_run(str(tmp_path), workers=1)).prediction
    assert found is not None
    assert found.inputs.topology is not None
    topology = found.inputs.topology
    assert topology.ranks_per_node == truth["ranks_per_host"] == 4
    assert topology.hosts == len(truth["host_offsets_us"]) == 2
    assert topology.source == "trace"
    details = [e.detail for e in topology.evidence if e.ranks_per_node == 4]
    assert details == [
        "device ids in the traces: ranks reuse devices 0-3 every 4 ranks",
        "the clock alignment finds 2 clocks (ranks 0-3; 4-7)",
        "deviceProperties lists 4 GPUs on the node",
    ]
    assert topology.conflicts == ()
    # the world's all-reduce spans the two hosts: priced on the link across nodes
    assert set(found.calls["spans_nodes"].to_list()) == {True}


def _two_hosts(hostnames: bool) -> Scenario:
    world = ProcessGroupSpec("0", "default_pg", (0, 1, 2, 3))
    return Scenario(
        ranks=4,
        ranks_per_host=2,
        steps=2,
        compute_us=5_000.0,
        collectives=(CollectiveSpec("AllReduce", 1 << 20, world, "Float"),),
        host_offsets_us=(0.0, 8_000.0),
        include_hostname=hostnames,
        seed=5,
    )


def test_simulated_hostnames_and_file_names(tmp_path: Path) -> None:
    named = tmp_path / "named"
    write_run(_two_hosts(hostnames=True), named)
    found = analyze(load_run(str(named), workers=1)).prediction
    assert found is not None
    assert found.inputs.topology is not None
    assert (found.inputs.topology.ranks_per_node, found.inputs.topology.detail.split(" (")[0]) == (
        2,
        "2 host(s) of up to 2 rank(s)",
    )
    renamed = tmp_path / "renamed"
    truth = write_run(_two_hosts(hostnames=False), renamed)
    for rank, path in enumerate(sorted(truth.files)):
        path.rename(renamed / f"gpu-host{rank // 2}_{100 + rank}.1700000000000.pt.trace.json")
    by_name = analyze(load_run(str(renamed), workers=1)).prediction
    assert by_name is not None
    assert by_name.inputs.topology is not None
    evidence = {
        e.detail.split(" (")[-1].rstrip(")"): e.ranks_per_node for e in by_name.inputs.topology.evidence
    }
    assert evidence["hostnames in the trace file names"] == 2
    assert by_name.inputs.topology.ranks_per_node == 2
