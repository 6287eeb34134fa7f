"""Which network an NCCL_DEBUG log says NCCL uses, S of its COLL lines, and its calls without init lines.

The network lines are the texts NCCL and RCCL print (net_ib.cc, net_socket.cc, net.cc / init.cc and the plugin
loader), as seen in public issue threads from 2.4 to 2.2x.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from traceview.parsers import nccl_log

from tests.nccl_log_factory import COLL_FORMAT, Writer
from tests.shared_data import REAL_NCCL_LOGS, requires_shared
from traceview.nccl.join import join_nccl
from traceview.prediction.inputs import ModelOptions, with_nccl_overrides

NO_IB = "NET/IB : No device found."
SOCKET = "NET/Socket : Using [0]eth0:10.0.0.1<0>"
IB = "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>"
NO_PLUGIN = "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"

# (lines of one process, the network it uses, the evidence that decides); None: the lines do not say.
CASES: tuple[tuple[tuple[str, ...], str | None, str | None], ...] = (
    ((NO_PLUGIN, NO_IB, SOCKET), "Socket", "NET/Socket : Using"),  # 2.4-2.11: no "Using network" line
    ((NO_IB,), "Socket", "NET/IB : No device found"),
    ((NO_PLUGIN, IB), "IB", "NET/IB : Using"),
    ((IB, "Using network IB"), "IB", "Using network"),
    ((NO_IB, SOCKET, "Using network Socket"), "Socket", "Using network"),
    (
        ("NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)", "Using network IBext_v8"),
        "IB",
        "Using network",
    ),
    (("NET/OFI Using aws-ofi-nccl 1.7.4-aws", "Using network AWS Libfabric"), "Plugin", "Using network"),
    (("NET/OFI Using aws-ofi-nccl 1.7.4-aws",), "Plugin", "NET/<plugin>"),
    (
        ("Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so", "P2P plugin IBext"),
        "IB",
        "P2P plugin",
    ),
    (("NCCL_NET set by environment to Socket", IB), "Socket", "NCCL_NET"),
    (("NCCL_IB_DISABLE set by environment to 1.",), "Socket", "NCCL_IB_DISABLE=1"),
    (("NCCL_IB_DISABLE set by environment to 0.", IB), "IB", "NET/IB : Using"),
    (("NET/Socket : GPU Direct RDMA Disabled for HCA 0 'lo'",), "Socket", "NET/Socket"),
    (
        (
            "NET/Socket : Using [0]eth0:10.0.4.51<0>",
            "Initialized NET plugin Socket",  # 2.24+
            "Assigned NET plugin Socket to comm",
        ),
        "Socket",
        "Assigned NET plugin",
    ),
    (
        ("NET/OFI Initializing aws-ofi-nccl 1.16.2", "Initialized NET plugin Libfabric"),
        "Plugin",
        "Initialized NET plugin",
    ),
    (
        ("Successfully loaded external network plugin /opt/rocm/lib/librccl-net.so",),
        "Plugin",
        "external network plugin",
    ),  # RCCL
    (("Using non-device net plugin version 0", "Using network Socket"), "Socket", "Using network"),
    ((NO_PLUGIN, "Bootstrap : Using eth0:10.0.0.1<0>"), None, None),
)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("case", range(len(CASES)))
def test_network_in_use(tmp_path: Path, case: int) -> None:
    lines, network, evidence = CASES[case]
    writer = Writer("node-a", 100, 101, 0)
    log = nccl_log.parse(_write(tmp_path / "net.log", [writer.info(line) for line in lines]))
    assert log.records_unrecognised == 0  # every line is a data row of the pattern table
    assert log.network_in_use == network
    assert log.networks["evidence"].to_list() == ([evidence] if evidence else [])


def test_network_per_process_and_mixed(tmp_path: Path) -> None:
    a, b = Writer("node-a", 100, 101, 0), Writer("node-b", 200, 201, 0)
    lines = [a.info(IB), b.info(NO_IB), b.info(SOCKET), a.info("Using network IB")]
    log = nccl_log.parse(_write(tmp_path / "mixed.log", lines))
    assert dict(zip(log.networks["host"], log.networks["network"], strict=True)) == {
        "node-a": "IB",
        "node-b": "Socket",
    }
    assert log.network_in_use == "IB, Socket"


def test_socket_settings_are_read(tmp_path: Path) -> None:
    writer = Writer("node-a", 100, 101, 0)
    lines = ["NCCL_SOCKET_IFNAME set by environment to eth0", "NCCL_IB_DISABLE set by environment to 1."]
    log = nccl_log.parse(_write(tmp_path / "env.log", [writer.info(line) for line in lines]))
    assert log.settings == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}


# (op, count, datatype code, element bytes, nranks) -> S by the nccl-tests convention: AllGather's count is
# the sendcount and ReduceScatter's the recvcount (one rank's share), every other op's count is the whole
# buffer.
CALLS = (
    ("AllGather", 1000, 7, 4, 8, 1000 * 4 * 8),
    ("ReduceScatter", 250, 9, 2, 4, 250 * 2 * 4),
    ("AllReduce", 1000, 7, 4, 8, 1000 * 4),
    ("Broadcast", 64, 0, 1, 8, 64),
    ("Send", 3, 4, 8, 2, 3 * 8),
)


def _coll_lines(writer: Writer) -> list[str]:
    return [
        writer.info(COLL_FORMAT, op, i, "0x1", "0x2", count, dtype, 0, 0, "0xabc", nranks, "0x9")
        for i, (op, count, dtype, _, nranks, _) in enumerate(CALLS)
    ]


def test_size_of_a_coll_call_follows_nccl_tests(tmp_path: Path) -> None:
    log = nccl_log.parse(_write(tmp_path / "coll.log", _coll_lines(Writer("h", 7, 7, 0))))
    assert log.collectives["size_bytes"].to_list() == [s for *_, s in CALLS]
    assert log.collectives["bytes"].to_list() == [c * e for _, c, _, e, _, _ in CALLS]  # what the line says


def test_calls_listed_without_init_lines(tmp_path: Path) -> None:
    """`traceview nccl LOG --json` on a log of COLL lines only: one communicator per (pointer, process)."""
    lines = _coll_lines(Writer("h", 7, 7, 0)) + _coll_lines(Writer("h", 8, 8, 1))
    path = _write(tmp_path / "coll_only.log", lines)
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "nccl", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)["calls"]
    assert {row["comm_key"] for row in calls} == {"comm 0xabc of h:7", "comm 0xabc of h:8"}
    per_op = {(row["comm_key"], row["op"]): row for row in calls}
    for op, *_, size in CALLS:
        row = per_op[("comm 0xabc of h:7", op)]
        assert (row["calls"], row["bytes"], row["max_size_bytes"]) == (1, size, size)


def test_rccl_version_and_settings(tmp_path: Path) -> None:
    """RCCL (ROCm) keeps NCCL's record prefix but names itself in its version line and some variables."""
    writer = Writer("mi300-a", 5, 5, 0)
    lines = ["RCCL version 2.18.3+hip6.1", "RCCL_MSCCL_ENABLE set by environment to 0", "Using network IB"]
    log = nccl_log.parse(_write(tmp_path / "rccl.log", [writer.info(line) for line in lines]))
    assert log.version == "2.18.3+hip6.1"
    assert (log.versions["major"][0], log.versions["minor"][0], log.versions["patch"][0]) == (2, 18, 3)
    assert log.settings == {"RCCL_MSCCL_ENABLE": "0"}
    assert log.network_in_use == "IB"


def test_no_ib_device_alone_makes_the_link_across_nodes_sockets(tmp_path: Path) -> None:
    log = nccl_log.parse(_write(tmp_path / "noib.log", [Writer("node-a", 1, 1, 0).info(NO_IB)]))
    join = join_nccl(None, [log])
    assert (join.inter_network, join.inter_network_evidence) == ("Socket", "NET/IB : No device found")
    socket = with_nccl_overrides(ModelOptions(), join).link_overrides
    assert [(o.scope, o.group, o.bandwidth_Bps) for o in socket] == [("inter", None, 10e9 / 8)]  # 10 GbE


@requires_shared
@pytest.mark.parametrize(
    ("name", "evidence"),
    [
        # "NET/IB : No device found." then "NET/Socket : Using [0]ens7:..." then "Using network Socket" (2.19)
        ("NVIDIA_nccl_1267.log", "Using network"),
        # 4 processes on one host: "NET/IB : No device found." then "NET/Socket : Using [0]lo:127.0.0.1<0>"
        ("NVIDIA_nccl_300.log", "NET/Socket : Using"),
    ],
)
def test_real_socket_fallbacks(name: str, evidence: str) -> None:
    path = REAL_NCCL_LOGS / name
    text = path.read_text(encoding="utf-8", errors="replace")
    assert "NET/IB : No device found" in text
    assert "NET/Socket : Using" in text
    log = nccl_log.parse(path)
    assert log.network_in_use == "Socket"
    writer = re.compile(r"([A-Za-z0-9_.\-]+):(\d+):\d+ +\[\d+\]")  # host:pid:tid [dev]
    processes = {writer.findall(line)[0] for line in text.splitlines() if "NET/Socket : Using" in line}
    assert set(log.networks["evidence"].to_list()) == {evidence}
    assert log.networks.height == len(processes)
    assert join_nccl(None, [log]).inter_network == "Socket"


@requires_shared
def test_real_socket_connections_without_network_lines() -> None:
    """NCCL 2.4 over AWS nodes prints no network line, only rings `... via NET/Socket/0`."""
    path = REAL_NCCL_LOGS / "NVIDIA_nccl_226.log"
    connections = sum("via NET/Socket" in line for line in path.read_text(encoding="utf-8").splitlines())
    join = join_nccl(None, [nccl_log.parse(path)])
    assert join.inter_network == "Socket"
    assert join.inter_network_evidence.startswith(f"{connections} connection line(s) `via NET/Socket`")


@requires_shared
def test_real_coll_lines_without_init_lines_are_listed() -> None:
    """The poster stripped the host:pid:tid prefix and kept only 4 Send COLL lines: no init line at all."""
    path = REAL_NCCL_LOGS / "NVIDIA_nccl_783.log"
    sends = [line for line in path.read_text(encoding="utf-8").splitlines() if "Send: opCount" in line]
    counts = [int(line.split(" count ")[1].split()[0]) for line in sends]
    assert all(" datatype 7 " in line for line in sends)  # float32: 4 bytes
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "nccl", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)["calls"]
    assert [(row["op"], row["calls"], row["bytes"]) for row in calls] == [
        ("Send", len(sends), sum(counts) * 4)
    ]
