"""NCCL logs joined to a simulated run: hosts per rank, communicator -> process group, and a socket fallback
that changes the prediction's B and flags the verdict.

The run: 2 hosts x 4 GPUs (ranks 0-3 on node000, 4-7 on node001, node001's clock 500 us ahead), four process
groups: "0" (default_pg, all 8 ranks, AllReduce 8 MiB), "1" (ranks 0 and 4 across hosts, AllGather 1 MiB),
"2" (ranks 1 and 2 on node000, AllReduce 256 KiB), "3" (all 8 ranks again, AllGather 2 MiB). One NCCL log per
host, written in NCCL 2.21's formats by `tests/nccl_log_factory.py`: communicators commId 0xaaa and 0xddd over
all 8 ranks (their COLL lines tell them apart), 0xbbb over (0, 4), 0xccc over (1, 2). The ring crosses hosts
between ranks 3 -> 4 and 7 -> 0, over IB or, in the fallback logs, over TCP sockets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from traceview.parsers import nccl_log
from traceview.reports.html.page import render_html

from tests.nccl_log_factory import (
    CHANNEL_NEW,
    COLL_FORMAT,
    INIT_FORMATS,
    RING_LIST_NEW,
    SHAPE,
    TUNING_NEW,
    Writer,
)
from tests.shared_data import REAL_NCCL_LOGS, requires_shared
from tests.simulate.engine import write_run
from tests.simulate.scenario import CollectiveSpec, ProcessGroupSpec, Scenario
from traceview.load.inputs import load_run
from traceview.model.nccl_log import NcclLog
from traceview.nccl.foreign import TraceFacts, foreign_reasons
from traceview.nccl.join import NcclJoin, join_nccl
from traceview.reduce.analysis import RunAnalysis, RunOptions, analyze

RANKS, PER_HOST = 8, 4
WORLD = tuple(range(RANKS))
MIB = 1 << 20
BF16 = 9  # ncclBfloat16
GROUPS = {
    "0": (ProcessGroupSpec("0", "default_pg", WORLD), "AllReduce", 8 * MIB),
    "1": (ProcessGroupSpec("1", "cross_pair", (0, 4)), "AllGather", 1 * MIB),
    "2": (ProcessGroupSpec("2", "local_pair", (1, 2)), "AllReduce", MIB // 4),
    "3": (ProcessGroupSpec("3", "dp_world", WORLD), "AllGather", 2 * MIB),
}
# commId -> (process group it must match, member global ranks, pointer base)
COMMS = {
    0xAAA: ("0", WORLD, 0xA000),
    0xDDD: ("3", WORLD, 0xD000),
    0xBBB: ("1", (0, 4), 0xB000),
    0xCCC: ("2", (1, 2), 0xC000),
}
HOST_OFFSET_US = 500.0


def host(rank: int) -> str:
    return f"node{rank // PER_HOST:03d}"


def writer(rank: int) -> Writer:
    return Writer(host(rank), 1000 + rank, 2000 + rank, rank % PER_HOST)


def transport(a: int, b: int, network: str) -> str:
    return "P2P/CUMEM/read" if host(a) == host(b) else network


def comm_lines(rank: int, comm_id: int, network: str) -> list[str]:
    """One process's lines for one communicator: ring, its send link, shape, Init COMPLETE (NCCL 2.21)."""
    _, members, base = COMMS[comm_id]
    me, size, w = members.index(rank), len(members), writer(rank)
    peer = members[(me + 1) % size]
    pointer = f"0x{base + rank:x}"
    nodes = len({host(m) for m in members})
    local = [m for m in members if host(m) == host(rank)]
    init = (
        INIT_FORMATS["2.21+"],
        "ncclCommInitRankConfig",
        pointer,
        me,
        size,
        w.dev,
        w.dev,
        0x1000 * (w.dev + 1),
        comm_id,
    )
    return [
        w.info(RING_LIST_NEW, 0, 1, " ".join(f"{i:3d}" for i in range(size))),
        w.info(
            CHANNEL_NEW.replace(" [receive]", ""),
            0,
            0,
            me,
            w.dev,
            (me + 1) % size,
            peer % PER_HOST,
            transport(rank, peer, network),
        ),
        w.info(SHAPE, pointer, me, size, nodes, len(local), local.index(rank), 0),
        w.info(*init),
    ]


def coll_line(rank: int, comm_id: int, op: str, count: int) -> str:
    pointer = f"0x{COMMS[comm_id][2] + rank:x}"
    return writer(rank).info(
        COLL_FORMAT, op, 0, "0x1", "0x2", count, BF16, 0, 0, pointer, len(COMMS[comm_id][1]), "0x9"
    )


def host_log(host_index: int, network: str, pg_lines: bool = False) -> str:
    """The log of one host: every process's version, communicators and COLL lines on the world comms."""
    lines: list[str] = []
    for rank in range(host_index * PER_HOST, (host_index + 1) * PER_HOST):
        lines.append(writer(rank).info("NCCL version 2.21.5+cuda12.4"))
        for comm_id, (group, members, base) in COMMS.items():
            if rank in members:
                lines += comm_lines(rank, comm_id, network)
                if pg_lines:
                    rank_in = members.index(rank)
                    lines.append(
                        f"[PG ID {group} PG GUID {group} Rank {rank_in}] ProcessGroupNCCL created ncclComm_ "
                        f"0x{base + rank:x} on CUDA device: {rank % PER_HOST}"
                    )
        # COLL counts are elements of one rank's buffer: AllReduce S / 2 bytes, AllGather S / 8 ranks / 2
        # bytes.
        tuning = (
            TUNING_NEW + " comm %s",
            "AllReduce",
            8 * MIB,
            "RING",
            "SIMPLE",
            0,
            1,
            f"0x{0xA000 + rank:x}",
        )
        lines.append(writer(rank).info(*tuning))
        lines.append(coll_line(rank, 0xAAA, "AllReduce", 8 * MIB // 2))
        lines.append(coll_line(rank, 0xDDD, "AllGather", 2 * MIB // RANKS // 2))
    return "\n".join(lines) + "\n"


def write_logs(folder: Path, network: str, pg_lines: bool = False) -> list[NcclLog]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(RANKS // PER_HOST):
        path = folder / f"node{index:03d}.log"
        path.write_text(host_log(index, network, pg_lines), encoding="utf-8")
        paths.append(path)
    return [nccl_log.parse(path) for path in paths]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nccl_join") / "run"
    collectives = tuple(CollectiveSpec(kind, size, pg) for pg, kind, size in GROUPS.values())  # type: ignore[arg-type]
    scenario = Scenario(
        ranks=RANKS,
        steps=3,
        collectives=collectives,
        compute_us=2000.0,
        ranks_per_host=PER_HOST,
        host_offsets_us=(0.0, HOST_OFFSET_US),
        nccl_version="2.21.5",  # the logs' version: the same job
    )
    write_run(scenario, folder)
    return folder


@pytest.fixture(scope="module")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nccl_logs")


@pytest.fixture(scope="module")
def plain(run_dir: Path) -> RunAnalysis:
    return analyze(load_run(str(run_dir)))


@pytest.fixture(scope="module")
def with_ib(run_dir: Path, logs_dir: Path) -> RunAnalysis:
    logs = write_logs(logs_dir / "ib", "NET/IB/0/GDRDMA")
    return analyze(load_run(str(run_dir)), RunOptions(nccl_logs=tuple(Path(log.path) for log in logs)))


@pytest.fixture(scope="module")
def with_socket(run_dir: Path, logs_dir: Path) -> RunAnalysis:
    logs = write_logs(logs_dir / "socket", "NET/Socket/0")
    return analyze(load_run(str(run_dir)), RunOptions(nccl_logs=tuple(Path(log.path) for log in logs)))


def nccl_of(analysis: RunAnalysis) -> NcclJoin:
    assert analysis.nccl is not None
    return analysis.nccl


def group_rows(join: NcclJoin) -> dict[str, dict[str, object]]:
    return {row["group"]: row for row in join.groups.iter_rows(named=True)}


def test_hosts_per_rank_from_the_logs(with_ib: RunAnalysis) -> None:
    join = nccl_of(with_ib)
    assert dict(join.hosts_by_rank) == {r: ("node000" if r < 4 else "node001") for r in range(8)}
    assert join.topology.rows() == [("node000", 4, [0, 1, 2, 3]), ("node001", 4, [0, 1, 2, 3])]
    assert join.ranks_per_node == PER_HOST
    assert join.spans_nodes == {"0": True, "1": True, "2": False, "3": True}


def test_hosts_from_the_logs_feed_clock_alignment(plain: RunAnalysis, with_ib: RunAnalysis) -> None:
    assert plain.crossrank is not None
    assert with_ib.crossrank is not None
    assert set(plain.crossrank.hosts["host_source"]) == {"one rank per host (assumed)"}
    hosts = with_ib.crossrank.hosts
    assert set(hosts["host_source"]) == {"nccl log"}
    assert hosts.filter(pl.col("rank") >= 4)["host"].unique().to_list() == ["node001"]
    offsets = with_ib.crossrank.clocks.offsets
    assert offsets["host"].to_list() == ["node000", "node001"]
    assert offsets["offset_us"].to_list() == pytest.approx([0.0, HOST_OFFSET_US], abs=1.0)


def test_communicators_match_their_process_groups(with_ib: RunAnalysis) -> None:
    rows = group_rows(nccl_of(with_ib))
    for comm_id, (group, _, _) in COMMS.items():
        assert rows[group]["comm_keys"] == [f"commId 0x{comm_id:x}"], group
    # 0xaaa and 0xddd have the same rank set as groups 0 and 3: only their COLL lines decide.
    methods = {group: rows[group]["method"] for group in GROUPS}
    assert methods == {
        "0": "call sequence",
        "1": "rank set and size",
        "2": "rank set and size",
        "3": "call sequence",
    }
    assert {g: rows[g]["nodes"] for g in GROUPS} == {"0": 2, "1": 2, "2": 1, "3": 2}
    assert rows["1"]["transports"] == ["NET/IB"]
    assert rows["2"]["transports"] == ["P2P"]
    assert rows["0"]["transports"] == ["NET/IB", "P2P"]


def test_ib_leaves_b_and_the_verdict_alone(plain: RunAnalysis, with_ib: RunAnalysis) -> None:
    join = nccl_of(with_ib)
    assert join.inter_network is None
    assert with_ib.prediction is not None
    assert with_ib.prediction.inputs.inter is not None
    assert with_ib.prediction.inputs.inter.source == "hardware table"
    assert join.link_overrides == ()
    assert join.link_override is None
    assert join.verdict_flags == ()
    assert with_ib.verdict == plain.verdict


def test_socket_fallback_changes_b_and_flags_the_verdict(
    plain: RunAnalysis, with_socket: RunAnalysis
) -> None:
    join = nccl_of(with_socket)
    overridden = {o.group: o for o in join.link_overrides}
    assert sorted(overridden) == ["0", "1", "3"]  # group 2 stays on its host (P2P)
    ten_gbe = 10e9 / 8  # the hardware table's tcp_socket row: 10 Gb/s Ethernet, one direction, bytes/s
    for override in overridden.values():
        assert override.bandwidth_bytes_per_s == pytest.approx(ten_gbe)
        assert override.provenance == "nccl log"
        assert override.link.key == "tcp_socket"
    assert join.link_override is not None
    assert join.link_override.group_size == 8
    assert with_socket.verdict.label == plain.verdict.label
    assert plain.verdict.notes == ()
    (added,) = with_socket.verdict.notes
    assert "process group(s) 0, 1, 3 use TCP sockets instead of IB/RoCE" in added
    assert "1.25 GB/s" in added
    assert "provenance: nccl log" in added


def test_socket_fallback_reaches_the_prediction(with_ib: RunAnalysis, with_socket: RunAnalysis) -> None:
    def b_per_group(analysis: RunAnalysis) -> dict[str, float]:
        assert analysis.prediction is not None
        calls = analysis.prediction.calls.group_by("pg_key").agg(pl.col("bandwidth_Bps").unique())
        return {group: values[0] for group, values in calls.sort("pg_key").iter_rows()}

    ib, socket = b_per_group(with_ib), b_per_group(with_socket)
    assert {g: socket[g] for g in ("0", "1", "3")} == pytest.approx(dict.fromkeys(("0", "1", "3"), 10e9 / 8))
    assert socket["2"] == ib["2"]
    assert all(ib[g] != pytest.approx(10e9 / 8) for g in GROUPS)


def test_nccl_log_hosts_and_socket_links_feed_the_model(with_socket: RunAnalysis) -> None:
    """The logs' hosts place 4 ranks per node (source nccl log); the socket groups' B is the log's, so known;
    group 2 (ranks 1, 2 on one host) stays on the hardware table's link, so the run's links are not all
    known."""
    prediction = with_socket.prediction
    assert prediction is not None
    assert prediction.inputs.topology is not None
    assert (prediction.inputs.topology.ranks_per_node, prediction.inputs.topology.source) == (
        PER_HOST,
        "nccl log",
    )
    sources = prediction.calls.group_by("pg_key").agg(pl.col("link_source").unique()).sort("pg_key").rows()
    assert sources == [
        ("0", ["nccl log"]),
        ("1", ["nccl log"]),
        ("2", ["hardware table"]),
        ("3", ["nccl log"]),
    ]
    assert prediction.link_known is False
    # the socket fallback is the model's link across nodes too (what-ifs and groups no communicator matched)
    assert prediction.inputs.inter is not None
    assert (prediction.inputs.inter.source, prediction.inputs.inter.bandwidth_Bps) == ("nccl log", 10e9 / 8)
    assert prediction.trust is not None
    assert len(prediction.trust.assumed_links) == 1
    assert "from the hardware table, assumed" in prediction.trust.assumed_links[0]


def test_processgroupnccl_lines_name_the_group(run_dir: Path, logs_dir: Path, with_ib: RunAnalysis) -> None:
    logs = write_logs(logs_dir / "pg", "NET/IB/0/GDRDMA", pg_lines=True)
    assert with_ib.collectives is not None
    rows = group_rows(join_nccl(with_ib.collectives, logs))
    assert {g: rows[g]["method"] for g in GROUPS} == dict.fromkeys(GROUPS, "ProcessGroupNCCL line")
    assert {g: rows[g]["comm_keys"] for g in GROUPS} == {
        group: [f"commId 0x{comm_id:x}"] for comm_id, (group, _, _) in COMMS.items()
    }


def test_without_coll_lines_same_rank_sets_stay_unmatched(with_ib: RunAnalysis, logs_dir: Path) -> None:
    logs = write_logs(logs_dir / "nocoll", "NET/IB/0/GDRDMA")
    stripped = [replace(log, collectives=log.collectives.clear()) for log in logs]
    assert with_ib.collectives is not None
    join = join_nccl(with_ib.collectives, stripped)
    rows = group_rows(join)
    assert rows["0"]["comm_keys"] is None
    assert rows["3"]["comm_keys"] is None
    assert rows["1"]["method"] == "rank set and size"
    assert any("commId 0xaaa" in note and "commId 0xddd" in note for note in join.notes)


def test_logs_alone_and_the_call_table(logs_dir: Path) -> None:
    join = join_nccl(None, write_logs(logs_dir / "alone", "NET/Socket/0"))
    assert join.groups.is_empty()
    assert join.link_overrides == ()
    assert join.versions == ("2.21.5+cuda12.4",)
    calls = {(r["comm_key"], r["op"]): r for r in join.calls.iter_rows(named=True)}
    all_reduce = calls[("commId 0xaaa", "AllReduce")]
    assert all_reduce["calls"] == 8
    assert all_reduce["dtype"] == "bfloat16"
    assert all_reduce["bytes"] == 8 * (8 * MIB // 2) * 2
    assert all_reduce["max_size_bytes"] == 8 * MIB
    assert calls[("commId 0xddd", "AllGather")]["max_size_bytes"] == 2 * MIB  # count x 2 bytes x 8 ranks
    comms = {r["comm_key"]: r for r in join.communicators.iter_rows(named=True)}
    assert comms["commId 0xbbb"]["global_ranks"] == [0, 4]
    assert comms["commId 0xbbb"]["nranks"] == 2
    assert comms["commId 0xaaa"]["degraded"]
    assert not comms["commId 0xccc"]["degraded"]
    assert any("communicator commId 0xbbb (2 ranks) uses TCP sockets" in flag for flag in join.verdict_flags)


def test_capped_logs_count_every_call(logs_dir: Path) -> None:
    folder = logs_dir / "capped"
    write_logs(folder, "NET/IB/0/GDRDMA")
    # each host log: 4 processes x 2 COLL lines (one on commId 0xaaa, one on 0xddd); keep only the first 3
    logs = [nccl_log.parse(folder / f"node{i:03d}.log", max_call_rows=3) for i in range(RANKS // PER_HOST)]
    join = join_nccl(None, logs)
    calls = {(r["comm_key"], r["op"]): r for r in join.calls.iter_rows(named=True)}
    assert calls[("commId 0xaaa", "AllReduce")]["calls"] == RANKS
    assert calls[("commId 0xaaa", "AllReduce")]["bytes"] == RANKS * (8 * MIB // 2) * 2
    assert calls[("commId 0xddd", "AllGather")]["calls"] == RANKS
    assert calls[("commId 0xddd", "AllGather")]["max_size_bytes"] == 2 * MIB
    notes = [note for note in join.notes if "call-sequence matching read its first 3 of 8 COLL lines" in note]
    assert len(notes) == RANKS // PER_HOST


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_cli_logs_in_the_run_folder_and_a_bad_log(run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for trace in run_dir.iterdir():
        (run / trace.name).write_bytes(trace.read_bytes())
    (run / "node000.out").write_text(host_log(0, "NET/Socket/0"), encoding="utf-8")
    (run / "node001.txt").write_text(host_log(1, "NET/Socket/0"), encoding="utf-8")
    (run / "notes.log").write_text("nothing from NCCL here\n", encoding="utf-8")
    bad = tmp_path / "bad.log"
    bad.write_text("no records\n", encoding="utf-8")
    done = traceview("summary", str(run), "--json", "--nccl-log", str(bad))
    assert done.returncode == 4, done.stderr  # analysed, one input skipped: a partial run
    assert str(bad) in done.stderr
    document = json.loads(done.stdout)
    assert sorted(Path(p).name for p in document["nccl"]["logs"]) == ["node000.out", "node001.txt"]
    assert [s["path"] for s in document["nccl"]["skipped"]] == [str(bad)]
    assert document["nccl"]["link_override"]["bandwidth_bytes_per_s"] == pytest.approx(10e9 / 8)
    assert any("TCP sockets" in note for note in document["verdict"]["notes"])


def test_report_section(with_socket: RunAnalysis) -> None:
    page = render_html(with_socket)
    section = page[page.index('<section id="nccl">') :]
    section = section[: section.index("</section>")]
    assert "NCCL version 2.21.5+cuda12.4" in section
    assert 'id="fig-nccl-algorithms"' in section
    assert "1.25 GB/s (hardware table row tcp_socket; provenance: nccl log)" in section
    assert section.count("(degraded: TCP sockets instead of IB/RoCE)") == 3 + 3  # 3 communicators, 3 groups
    assert "RING/SIMPLE" in section  # commId 0xaaa's TUNING choice
    groups = section[section.index('id="table-nccl-groups"') :]
    assert groups.count("not changed by the log") == 1  # group 2 only


@requires_shared
def test_one_process_driving_several_gpus_in_a_real_log() -> None:
    # NVIDIA/nccl issue 629: one process per host, one Init COMPLETE line per GPU (8 of the 16 ranks shown).
    real = (
        Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "nccl_logs" / "NVIDIA_nccl_629.log"
    )
    if not real.exists():
        pytest.skip("real data not available")
    join = join_nccl(None, [nccl_log.parse(real)])
    left, right = "A03-R28-I49-2-6000166", "A03-R28-I49-3-9000018"
    expected = {2: left, 5: left, 4: left, 15: right, 14: right, 12: right, 8: right, 9: right}
    assert dict(join.hosts_by_rank) == expected
    assert join.communicators.select("comm_key", "nranks", "ranks_seen", "ambiguous").rows() == [
        ("nranks=16 #0", 16, 8, False)
    ]
    assert join.topology.rows() == [(left, 1, [2, 4, 5]), (right, 1, [0, 1, 4, 6, 7])]


def network_logs(folder: Path, net_lines: tuple[str, ...], version: str = "2.21.5+cuda12.4") -> list[NcclLog]:
    """The socket logs with no `via NET/...` connection line: each process states its network only by
    `net_lines`, printed after its version line (itself rewritten to `version`)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(RANKS // PER_HOST):
        lines = []
        for line in host_log(index, "NET/Socket/0").splitlines():
            if " via NET/" in line:
                continue
            lines.append(line.replace("2.21.5+cuda12.4", version))
            if "NCCL version" in line:
                prefix = line[: line.index("NCCL INFO ") + len("NCCL INFO ")]
                lines += [prefix + text for text in net_lines]
        path = folder / f"node{index:03d}.log"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return [nccl_log.parse(path) for path in paths]


SOCKET_LINES = ("NET/IB : No device found.", "NET/Socket : Using [0]eth0:10.0.0.1<0>")


def test_socket_network_without_connection_lines_overrides_b(
    run_dir: Path, logs_dir: Path, with_ib: RunAnalysis
) -> None:
    logs = network_logs(logs_dir / "socket_net", SOCKET_LINES)
    assert [log.network_in_use for log in logs] == ["Socket", "Socket"]
    assert all(log.transports.filter(pl.col("kind") == "NET/Socket").is_empty() for log in logs)
    assert with_ib.collectives is not None
    join = join_nccl(with_ib.collectives, logs, run=load_run(str(run_dir)))
    overridden = {o.group: o for o in join.link_overrides}
    assert sorted(overridden) == [
        "0",
        "1",
        "3",
    ]  # the groups spanning both hosts; "2" is ranks 1, 2 on node000
    assert {o.link.key for o in overridden.values()} == {"tcp_socket"}
    assert {o.bandwidth_bytes_per_s for o in overridden.values()} == {10e9 / 8}
    assert {o.provenance for o in overridden.values()} == {"nccl log"}
    (flag,) = join.verdict_flags
    assert "process group(s) 0, 1, 3 use TCP sockets" in flag
    assert "NCCL's network is Socket" in flag
    assert "NET/Socket : Using" in flag


def test_socket_network_reaches_groups_no_communicator_matched(
    run_dir: Path, logs_dir: Path, with_ib: RunAnalysis
) -> None:
    logs = network_logs(logs_dir / "socket_nocoll", ("Using network Socket",))
    stripped = [replace(log, collectives=log.collectives.clear()) for log in logs]
    assert with_ib.collectives is not None
    join = join_nccl(with_ib.collectives, stripped, run=load_run(str(run_dir)))
    rows = group_rows(join)
    assert rows["0"]["comm_keys"] is None  # unmatched (two 8-rank communicators, no COLL lines)
    assert rows["0"]["nodes"] == 2  # its ranks' hosts, from the logs
    assert sorted(o.group for o in join.link_overrides) == ["0", "1", "3"]


def foreign_log(folder: Path, nranks: int, version: str) -> NcclLog:
    """A one-process log of another job: one communicator of `nranks` ranks on host elsewhere."""
    folder.mkdir(parents=True, exist_ok=True)
    w = Writer("elsewhere", 77, 77, 0)
    init = w.info(INIT_FORMATS["2.16+"], "0x5000", 0, nranks, 0, 0, 0x1000, 0xEEE)
    path = folder / f"other_{nranks}_{version}.log"
    path.write_text(
        f"{w.info('NCCL version ' + version)}\n{init}\n{w.info(SOCKET_LINES[1])}\n", encoding="utf-8"
    )
    return nccl_log.parse(path)


@pytest.mark.parametrize(
    ("nranks", "version", "reasons"),
    [
        (
            16,
            "2.21.5+cuda12.4",
            ("no communicator of its sizes (16)", "its world size is 16, the traces' is 8"),
        ),
        (8, "2.18.1+cuda12.1", ("its NCCL version 2.18.1 is not the traces' (2.21.5)",)),
    ],
)
def test_a_log_of_another_job_is_set_apart(
    run_dir: Path, logs_dir: Path, with_ib: RunAnalysis, nranks: int, version: str, reasons: tuple[str, ...]
) -> None:
    ours = write_logs(logs_dir / f"ours_{nranks}", "NET/IB/0/GDRDMA")
    other = foreign_log(logs_dir / "other", nranks, version)
    assert with_ib.collectives is not None
    join = join_nccl(with_ib.collectives, [*ours, other], run=load_run(str(run_dir)))
    ((path, why),) = join.foreign
    assert path == other.path
    assert [reason for reason in reasons if reason not in why] == []
    assert other.path not in join.paths
    assert "elsewhere" not in join.hosts_by_rank.values()
    assert join.link_overrides == ()  # its socket network is not used
    assert join.inter_network is None
    assert [note for note in join.notes if other.path in note and "another job" in note]
    assert join.hosts_by_rank == nccl_of(with_ib).hosts_by_rank


def test_a_version_mismatch_alone_sets_every_log_apart(
    run_dir: Path, logs_dir: Path, with_ib: RunAnalysis
) -> None:
    logs = network_logs(logs_dir / "old_version", SOCKET_LINES, version="2.18.3+cuda12.2")
    assert with_ib.collectives is not None
    join = join_nccl(with_ib.collectives, logs, run=load_run(str(run_dir)))
    assert [path for path, _ in join.foreign] == [log.path for log in logs]
    assert join.hosts_by_rank == {}
    assert join.link_overrides == ()
    assert join.verdict_flags == ()


def test_foreign_checks_compare_hosts_and_versions_by_their_stated_parts(logs_dir: Path) -> None:
    other = foreign_log(logs_dir / "facts", 8, "2.21.5+cuda12.4")  # host "elsewhere", one 8-rank communicator
    same_job = TraceFacts(frozenset({8}), 8, frozenset({"elsewhere"}), frozenset({"2.21.5"}))
    assert foreign_reasons(other, same_job) == ()
    fqdn_path = logs_dir / "facts" / "fqdn.log"
    fqdn_path.write_text(Writer("Elsewhere.cluster.local", 1, 1, 0).info("NCCL version 2.21.5") + "\n")
    assert foreign_reasons(nccl_log.parse(fqdn_path), same_job) == ()  # hosts compared by first label
    moved = TraceFacts(frozenset({8}), 8, frozenset({"node000", "node001"}), frozenset({"2.21.5"}))
    assert foreign_reasons(other, moved) == (
        "its hosts (elsewhere) are none of the traces' (node000, node001)",
    )
    unstated = TraceFacts()  # the traces state nothing: no check applies
    assert foreign_reasons(other, unstated) == ()


@requires_shared
def test_cli_warns_of_a_real_log_of_another_job_and_exits_partial() -> None:
    """dp8_straggler's traces say NCCL 2.17.1; a real nccl-tests log says 2.10.3 (and a world of 16)."""
    log = REAL_NCCL_LOGS / "NVIDIA_nccl-tests_133.log"
    assert "NCCL version 2.10.3" in log.read_text(encoding="utf-8")
    samples = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceview",
            "summary",
            str(samples),
            "--nccl-log",
            str(log),
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 4
    warned = [line for line in done.stderr.splitlines() if "another job" in line]
    assert len(warned) == 1
    assert str(log) in warned[0]
    assert "its NCCL version 2.10.3 is not the traces' (2.17.1)" in warned[0]
    assert json.loads(done.stdout)["nccl"]["foreign"][0]["path"] == str(log)
