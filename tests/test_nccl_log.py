"""NCCL_DEBUG log parser: every real log, facts read by eye from each, and a round trip of every format."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from rich.console import Console
from traceview.parsers import nccl_log
from traceview.reports.text.nccl import render_nccl

from tests.nccl_log_factory import COLL_FORMAT, TUNING_NEW, Writer, historical_log_lines
from tests.shared_data import requires_shared
from traceview.core.errors import InputError
from traceview.model.nccl_log import NcclLog, flag_degraded
from traceview.nccl.log_views import (
    collective_summary,
    communicator_summary,
    degraded_transports,
    hosts_by_rank,
    warning_counts,
)

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "nccl_logs"
LOGS = sorted(REAL.glob("*.log"))


def _parse(name: str) -> NcclLog:
    return nccl_log.parse(REAL / name)


@requires_shared
@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_every_real_log_parses(path: Path) -> None:
    log = nccl_log.parse(path)
    with path.open(encoding="utf-8") as handle:
        physical_lines = sum(1 for _ in handle)
    assert log.lines_total == physical_lines
    assert 0 < log.records <= physical_lines + 1  # + 1: one line of NCCL_147 holds two records
    out = io.StringIO()
    render_nccl(log, Console(file=out, width=120))
    assert path.name in out.getvalue()


@requires_shared
def test_enough_real_logs() -> None:
    assert len(LOGS) == 24


# Facts read by eye from each file (the first line is the "# source:" comment, so it is always skipped).
# comms: Init lines (distinct comm pointers); colls: COLL lines; warns: NCCL WARN + "x.cc:N -> r" + watchdog.
FACTS: dict[str, dict[str, Any]] = {
    "NVIDIA_nccl-tests_133.log": {
        "version": "2.10.3+cuda11.0",
        "comms": 0,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 2,
        "trees": 4 * 2,
        "rings": 1,
    },
    "NVIDIA_nccl-tests_252.log": {
        "version": None,
        "comms": 6,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl-tests_311.log": {
        "version": None,
        "comms": 2,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_1066.log": {
        "version": "2.12.12+cuda11.7",
        "comms": 0,
        "colls": 0,
        "warns": 2,
        "transports": set(),
        "skipped": 1 + 2,
        "trees": 2,
        "rings": 2,
    },
    "NVIDIA_nccl_1193.log": {
        "version": None,
        "comms": 0,
        "colls": 6,
        "warns": 3,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_1238.log": {
        "version": None,
        "comms": 0,
        "colls": 4,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_1267.log": {
        "version": "2.19.3+cuda12.3",
        "comms": 1,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 2,
        "rings": 3,
    },
    "NVIDIA_nccl_1412.log": {
        "version": None,
        "comms": 5,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_147.log": {
        "version": None,
        "comms": 0,
        "colls": 6,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_1595.log": {
        "version": None,
        "comms": 0,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
        "tuning": 4,
    },
    "NVIDIA_nccl_1814.log": {
        "version": None,
        "comms": 4,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_226.log": {
        "version": None,
        "comms": 1,
        "colls": 0,
        "warns": 0,
        "transports": {"NET/Socket"},
        "skipped": 1,
        "trees": 4,
        "degraded": 11,
    },
    "NVIDIA_nccl_257.log": {
        "version": "2.4.8+cuda10.0",
        "comms": 0,
        "colls": 0,
        "warns": 1,
        "transports": set(),
        "skipped": 1 + 1 + 3 + 4 + 1,
    },
    "NVIDIA_nccl_262.log": {
        "version": "2.4.8+cuda9.0",
        "comms": 0,
        "colls": 0,
        "warns": 1,
        "transports": set(),
        "skipped": 1 + 18,
    },
    "NVIDIA_nccl_300.log": {
        "version": "2.5.6+cuda10.2",
        "comms": 0,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_302.log": {
        "version": None,
        "comms": 0,
        "colls": 0,
        "warns": 0,
        "transports": {"P2P"},
        "skipped": 1,
        "trees": 4 * 2,
    },
    # 392's "# source:" comment quotes a record start (" [0] NCCL INFO"), so it reads as a record: 0 skipped
    "NVIDIA_nccl_392.log": {
        "version": "2.5.7+cuda10.0",
        "comms": 0,
        "colls": 0,
        "warns": 0,
        "transports": {"NET/IB", "P2P", "SHM"},
        "skipped": 0,
        "rings": 2,
        "degraded": 1,
        "trees": 2 * 2,
    },
    "NVIDIA_nccl_629.log": {
        "version": None,
        "comms": 8,
        "colls": 0,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_740.log": {
        "version": None,
        "comms": 0,
        "colls": 6,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
        "joined": 6,
    },
    "NVIDIA_nccl_783.log": {
        "version": None,
        "comms": 0,
        "colls": 4,
        "warns": 0,
        "transports": set(),
        "skipped": 1,
    },
    "NVIDIA_nccl_963.log": {
        "version": "2.14.3+cuda11.7",
        "comms": 0,
        "colls": 0,
        "warns": 5 + 5,
        "transports": set(),
        "skipped": 1 + 2 + 5,
    },
    # Recorded for this project (NCCL 2.28.9, one rank): one communicator; "opCount" lines counted by grep;
    # the Trees line is cut by NCCL's line buffer inside channel 47's entry, so 47 complete trees; 64 "Channel
    # NN/64" ring lines; every line is NCCL's.
    "h200_nccl_2.28.9_ddp1.log": {
        "version": "2.28.9+cuda13.0",
        "comms": 1,
        "colls": 121,
        "warns": 0,
        "transports": set(),
        "skipped": 0,
        "trees": 47,
        "rings": 64,
    },
    "h200_nccl_2.28.9_fsdp1.log": {
        "version": "2.28.9+cuda13.0",
        "comms": 1,
        "colls": 1,
        "warns": 0,
        "transports": set(),
        "skipped": 0,
        "trees": 47,
        "rings": 64,
    },
    "tinygrad_open-gpu-kernel-modules_22.log": {
        "version": None,
        "comms": 0,
        "colls": 0,
        "warns": 0,
        "transports": {"P2P"},
        "skipped": 1,
    },
}


@requires_shared
@pytest.mark.parametrize("name", sorted(FACTS))
def test_facts_read_by_eye(name: str) -> None:
    facts = FACTS[name]
    log = _parse(name)
    assert log.version == facts["version"]
    assert log.communicators.height == facts["comms"]
    assert log.collectives.height == facts["colls"]
    assert log.warnings.height == facts["warns"]
    assert set(log.transports["kind"].to_list()) == facts["transports"]
    assert log.lines_skipped == facts["skipped"]
    assert log.trees.height == facts.get("trees", 0)
    assert log.rings.height == facts.get("rings", 0)
    assert log.tuning.height == facts.get("tuning", 0)
    assert log.lines_joined == facts.get("joined", 0)
    assert degraded_transports(log).height == facts.get("degraded", 0)


@requires_shared
def test_ray_coll_lines_and_watchdog() -> None:
    log = _parse("NVIDIA_nccl_1193.log")
    colls = log.collectives
    assert colls["opcount"].to_list() == [0x139D, 0x139D, 0x139E, 0x139E, 0x13A0, 0x13A1]
    assert colls["bytes"].to_list() == [
        7382228 * 4,
        7382228 * 4,
        7066572 * 4,
        7066572 * 4,
        554400 * 4,
        335 * 4,
    ]
    assert colls["dtype"].to_list() == ["float32"] * 5 + ["int32"]
    assert set(colls["nranks"].to_list()) == {128}
    assert colls["pid"].to_list() == [615, 22754, 619, 22754, 19799, 19799]
    assert colls["cuda_dev"].to_list() == [2, 5, 3, 5, 3, 3]
    watchdog = log.warnings
    assert watchdog["kind"].to_list() == ["watchdog"] * 3
    assert watchdog["rank"].to_list() == [21, 27, 43]
    assert watchdog["pid"].to_list() == [22754, 19799, 619]


@requires_shared
def test_interleaved_records_on_one_line() -> None:
    log = _parse("NVIDIA_nccl_147.log")
    colls = log.collectives
    # line 2 holds a bare prefix of 32619 [2] then a whole record of 32629 [7]; line 7's bare body is 32619's.
    assert colls["pid"].to_list() == [32629, 32625, 32615, 32617, 32619, 32617]
    assert colls["cuda_dev"].to_list() == [7, 5, 0, 1, 2, 1]
    assert colls["opcount"].to_list() == [0, 0, 0, 0, 1, 1]
    assert colls["dtype"].to_list() == ["int64"] * 2 + ["float16"] + ["int64"] + ["float16"] * 2
    assert colls["bytes"].to_list() == [53 * 8, 53 * 8, 25503912 * 2, 53 * 8, 25503912 * 2, 25503912 * 2]
    assert colls["comm"][4] == "0x7f584405a260"
    assert log.records_unrecognised == 1  # "Launch mode Parallel"


@requires_shared
def test_wrapped_lines_are_joined() -> None:
    colls = _parse("NVIDIA_nccl_740.log").collectives
    assert colls["stream"].to_list()[:2] == ["0x55558997f520", "0x55558997f7b0"]
    assert colls["root"].to_list() == [3, 3, 3, 4, 4, 4]
    assert colls["bytes"].to_list() == [16384] * 6  # datatype 0 = int8
    assert colls["line"].to_list() == [2, 4, 6, 8, 10, 12]


@requires_shared
def test_stripped_prefixes_and_markdown_quotes() -> None:
    sends = _parse("NVIDIA_nccl_783.log").collectives
    assert sends["op"].to_list() == ["Send"] * 4
    assert sends["opcount"].to_list() == [1, 2, 3, 4]
    assert sends["bytes"].to_list() == [1572864 * 4] * 4
    assert sends["host"].null_count() == 4
    quoted = _parse("NVIDIA_nccl_1238.log").collectives
    assert quoted["bytes"].to_list() == [33554432 * 4] * 4
    assert quoted["host"].to_list() == ["ip-172-31-54-74"] * 4


@requires_shared
def test_init_generations_in_real_logs() -> None:
    starts = _parse("NVIDIA_nccl-tests_252.log").communicators
    assert sorted(starts["rank"].to_list()) == [0, 1, 4, 5, 6, 7]
    assert set(starts["init_state"].to_list()) == {"START"}
    assert set(starts["init_format"].to_list()) == {"2.21+"}
    assert set(starts["comm_id"].to_list()) == {"0x996ee6f117cb8e1e"}
    old = _parse("NVIDIA_nccl_226.log").communicators.row(0, named=True)
    assert (old["rank"], old["nranks"], old["nvml_dev"], old["init_format"]) == (17, 64, 0, "2.4")
    mid = _parse("NVIDIA_nccl_629.log").communicators
    assert sorted(mid["rank"].to_list()) == [2, 4, 5, 8, 9, 12, 14, 15]
    assert set(mid["init_format"].to_list()) == {"2.5-2.15"}
    assert mid.filter(pl.col("rank") == 15)["bus_id"].to_list() == ["e7000"]


@requires_shared
def test_init_timings_and_channel_counts() -> None:
    timings = _parse("NVIDIA_nccl_1412.log").init_timings
    assert timings["rank"].to_list() == [2, 6, 0]
    assert timings["total_s"].to_list() == [1.08] * 3
    newer = _parse("NVIDIA_nccl-tests_311.log").init_timings
    assert newer["func"].to_list() == ["ncclCommInitRank"] * 2
    counts = _parse("NVIDIA_nccl_1814.log").channel_counts
    assert counts.select("coll", "collnet", "nvls", "p2p", "p2p_per_peer").rows() == [(16, 0, 16, 16, 1)] * 2
    # a channel-count line belongs to the comm whose Init line the same thread prints next
    assert counts["comm"].to_list() == ["0x55f01c18e490", "0x560dfc7a10e0"]


@requires_shared
def test_trees_of_each_generation() -> None:
    new = _parse("NVIDIA_nccl-tests_133.log").trees.filter(pl.col("rank") == 12)
    assert new.select("channel", "up", "down0", "down1").rows() == [(0, 4, 13, -1), (1, -1, 13, 4)]
    dual = _parse("NVIDIA_nccl_302.log").trees.filter(pl.col("channel") == 3)
    assert dual.select("tree", "up", "down0", "down1", "down2").rows() == [
        (0, 154, 153, 146, 162),
        (1, 154, 153, 146, 162),
    ]
    old = _parse("NVIDIA_nccl_226.log").trees
    assert old.select("rank", "up", "down0").rows()[0] == (25, 26, -1)


@requires_shared
def test_network_and_settings() -> None:
    log = _parse("NVIDIA_nccl_1066.log")
    ib = log.network.filter(pl.col("source") == "NET/IB")
    assert ib["device"].to_list() == ["mlx5_0", "mlx5_1", "mlx5_2"] * 2
    assert ib["link"].to_list() == ["IB", "IB", "RoCE"] * 2
    assert log.network.filter(pl.col("source") == "selected")["device"].to_list() == ["IB", "IB"]
    assert _parse("NVIDIA_nccl_392.log").settings == {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3"}
    sockets = _parse("NVIDIA_nccl_300.log").network.filter(pl.col("source") == "NET/Socket")
    assert sockets["address"].to_list() == ["127.0.0.1"] * 3
    assert sorted(_parse("NVIDIA_nccl_300.log").processes["pid"].unique().to_list()) == [
        10158,
        10159,
        10160,
        10161,
    ]


@requires_shared
def test_tuning_old_format() -> None:
    tuning = _parse("NVIDIA_nccl_1595.log").tuning
    assert tuning.select("bytes", "algo", "proto").rows() == [(805306368, "RING", "SIMPLE")] * 4
    assert tuning["time_us"].to_list() == [3970.683594] * 4


@requires_shared
def test_summaries_and_hosts_by_rank() -> None:
    log = _parse("NVIDIA_nccl-tests_252.log")
    summary = communicator_summary(log).row(0, named=True)
    assert (summary["nranks"], summary["ranks_seen"], summary["hosts"]) == (8, 6, 2)
    assert hosts_by_rank(log).rows() == [
        (0, "kolyoz1"),
        (1, "kolyoz1"),
        (4, "kolyoz2"),
        (5, "kolyoz2"),
        (6, "kolyoz2"),
        (7, "kolyoz2"),
    ]
    tiny = communicator_summary(_parse("NVIDIA_nccl_1267.log")).row(0, named=True)
    assert (tiny["nranks"], tiny["channels"]) == (1, 3)


def test_shm_is_degraded_when_p2p_is_disabled() -> None:
    shm_only = pl.DataFrame({"host": ["a", "a"], "kind": ["SHM", "NET/IB"]})
    assert flag_degraded(shm_only, {})["degraded"].to_list() == [False, False]
    assert flag_degraded(shm_only, {"NCCL_P2P_DISABLE": "1"})["degraded"].to_list() == [True, False]


def test_missing_and_foreign_files_raise(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        nccl_log.parse(tmp_path / "absent.log")
    other = tmp_path / "train.log"
    other.write_text("epoch 1 loss 0.5\nepoch 2 loss 0.4\n")
    with pytest.raises(InputError, match="no NCCL_DEBUG records in 2 lines"):
        nccl_log.parse(other)


# ---- round trip: one synthetic log in every historical format, with foreign prefixes and interleaving ----


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> NcclLog:
    path = tmp_path_factory.mktemp("nccl") / "synthetic.log.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(historical_log_lines()) + "\n")
    return nccl_log.parse(path)


def test_round_trip_counts(synthetic: NcclLog) -> None:
    assert synthetic.lines_total == len(historical_log_lines())
    assert synthetic.lines_skipped == 2  # "Epoch 1 loss 0.3" and the blank line
    assert synthetic.lines_joined == 1
    assert synthetic.version == "2.21.5+cuda12.4"
    assert synthetic.settings == {"NCCL_P2P_DISABLE": "1"}


def test_round_trip_communicators(synthetic: NcclLog) -> None:
    comms = synthetic.communicators.sort("comm")
    assert comms["comm"].to_list() == ["0x1000", "0x2000", "0x3000", "0x4000"]
    assert comms["host"].to_list() == ["node-a", "node-b", "node-c.example.com", "node_d"]
    assert comms["rank"].to_list() == [1, 2, 3, 5]
    assert comms["nranks"].to_list() == [4, 4, 8, 8]
    assert comms["cuda_dev"].to_list() == [0, 1, 2, 3]
    assert comms["nvml_dev"].to_list() == [0, None, 2, 3]
    assert comms["bus_id"].to_list() == [None, "1b000", "3e000", "4f000"]
    assert comms["comm_id"].to_list() == [None, None, "0xabc", "0xabc"]
    assert comms["init_format"].to_list() == ["2.4", "2.5-2.15", "2.16+", "2.21+"]
    assert comms["init_func"].to_list() == [None, None, None, "ncclCommInitRankConfig"]
    assert comms.select("n_nodes", "local_ranks", "local_rank").row(3) == (2, 4, 1)
    assert comms["init_state"].to_list() == ["COMPLETE"] * 4


def test_round_trip_topology(synthetic: NcclLog) -> None:
    links = synthetic.transports
    assert links["kind"].to_list() == ["NET/Socket", "P2P", "NET/IB", "SHM"]
    assert links.select("channel", "from_rank", "to_rank").rows() == [
        (0, 1, 2),
        (1, 2, 3),
        (2, 0, 3),
        (1, 3, 4),
    ]
    assert links["direction"].to_list() == ["send", None, "receive", None]
    assert links["gdr"].to_list() == [False, False, True, False]
    assert links["degraded"].to_list() == [True, False, False, True]
    assert links["comm"].to_list() == ["0x1000", "0x2000", "0x3000", "0x3000"]
    rings = synthetic.rings
    assert rings["ranks"].to_list() == [[0, 1, 2, 3], [0, 3, 2, 1]]
    assert rings["n_channels"].to_list() == [None, 2]
    trees = synthetic.trees.select("comm", "channel", "tree", "rank", "up", "down0", "down1").rows()
    assert trees == [
        ("0x1000", 0, 0, 1, 3, 2, -1),
        ("0x2000", 0, 0, 2, 0, 4, -1),
        ("0x2000", 0, 1, 2, 0, 4, -1),
        ("0x3000", 0, 0, 3, 2, -1, -1),
        ("0x3000", 1, 0, 3, -1, 5, 6),
    ]
    counts = synthetic.channel_counts.row(0, named=True)
    assert (counts["coll"], counts["collnet"], counts["nvls"], counts["p2p"], counts["comm"]) == (
        24,
        2,
        16,
        32,
        "0x4000",
    )


def test_round_trip_collectives(synthetic: NcclLog) -> None:
    colls = synthetic.collectives
    assert colls["op"].to_list() == ["AllReduce", "ReduceScatter", "Broadcast", "Send"]
    assert colls["opcount"].to_list() == [0x1A2B, 0x1A2C, 0x5, 0x1A2D]
    assert colls["dtype"].to_list() == ["bfloat16", "float8e4m3", "float64", "int64"]
    assert colls["bytes"].to_list() == [1000 * 2, 7 * 1, 64 * 8, 3 * 8]
    assert colls["root"].to_list() == [0, 0, 2, 1]
    assert colls["rank"].to_list() == [5, 5, 2, 5]
    assert colls["host"].to_list() == ["node_d", "node_d", "node-b", "node_d"]
    assert colls["stream"].to_list() == ["0x99", "0x99", "0x77", "0x98"]


def test_round_trip_tuning_warnings_and_process_groups(synthetic: NcclLog) -> None:
    tuning = synthetic.tuning.select("op", "bytes", "algo", "proto", "channel_lo", "channel_hi", "time_us")
    assert tuning.rows() == [
        ("AllReduce", 1048576, "RING", "LL128", 0, 15, None),
        (None, 4096, "TREE", "LL", None, None, 12.5),
    ]
    warns = synthetic.warnings
    assert warns["kind"].to_list() == ["timeout", "watchdog", "error"]
    assert warns["rank"].to_list() == [None, 5, None]
    assert warns["pid"].to_list() == [100, 400, 400]
    assert warns["text"][2] == "transport/net.cc:870 -> 2 (system error)"
    pg = synthetic.pg_comms.row(0, named=True)
    assert (pg["rank"], pg["comm"], pg["cuda_dev"]) == (5, "0x4000", 3)


# ---- bounded memory: rows kept up to a cap, totals over every record ----

FLOAT32, BFLOAT16 = 7, 9  # ncclDataType_t codes: 4 and 2 bytes per element
WRITERS = (Writer("node-a", 10, 11, 0), Writer("node-b", 20, 21, 1))
N_CALLS, CALL_CAP = 50, 7
N_TUNING, TUNING_CAP = 12, 5
N_WARNS, WARN_CAP = 9, 4


def _calls() -> list[tuple[Writer, str, int, int, int]]:
    """(writer, op, datatype, count, opCount) of every COLL line of the capped log, in order."""
    return [
        (
            WRITERS[i % 2],
            "AllGather" if i % 3 == 0 else "AllReduce",
            BFLOAT16 if i % 5 == 0 else FLOAT32,
            2048 if i % 4 == 0 else 1000,
            i,
        )
        for i in range(N_CALLS)
    ]


def _capped_log_lines() -> list[str]:
    lines = []
    for i, (w, op, datatype, count, opcount) in enumerate(_calls()):
        comm = f"0x{0xA000 + w.pid:x}"
        line = w.info(COLL_FORMAT, op, opcount, "0x1", "0x2", count, datatype, 0, 0, comm, 2, "0x9")
        lines.append(("[1,0]<stdout>:" + line) if i % 7 == 0 else line)  # some take the general path
        if i < N_TUNING:
            lines.append(w.info(TUNING_NEW, op, 4096 * (1 + i % 2), "RING", "LL", 0, 3))
        if i < N_WARNS:
            lines.append(w.prefix("WARN") + f"Call to connect returned Connection timed out, retry {i}")
    return lines


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> NcclLog:
    path = tmp_path_factory.mktemp("capped") / "capped.log"
    path.write_text("\n".join(_capped_log_lines()) + "\n", encoding="utf-8")
    return nccl_log.parse(path, max_call_rows=CALL_CAP, max_tuning_rows=TUNING_CAP, max_warning_rows=WARN_CAP)


def test_cap_keeps_the_first_calls_as_rows(capped: NcclLog) -> None:
    assert (capped.collective_calls_seen, capped.collective_rows_kept) == (N_CALLS, CALL_CAP)
    assert capped.collectives["opcount"].to_list() == list(range(CALL_CAP))
    assert (capped.tuning_lines_seen, capped.tuning.height) == (N_TUNING, TUNING_CAP)
    assert (capped.warnings_seen, capped.warnings.height) == (N_WARNS, WARN_CAP)
    assert capped.records == N_CALLS + N_TUNING + N_WARNS
    per_writer = dict(
        zip(capped.processes["pid"].to_list(), capped.processes["records"].to_list(), strict=True)
    )
    assert per_writer == {10: 25 + 6 + 5, 20: 25 + 6 + 4}  # even i on node-a, odd i on node-b


def test_totals_count_every_call(capped: NcclLog) -> None:
    sizes = {FLOAT32: 4, BFLOAT16: 2}
    names = {FLOAT32: "float32", BFLOAT16: "bfloat16"}
    expected: dict[tuple[str, str], list[int]] = {}
    per_rank_count = {
        "AllGather",
        "ReduceScatter",
    }  # their count is one rank's share (the API's send/recvcount)
    for _, op, datatype, count, _ in _calls():  # plain Python over what was written; every line has nranks=2
        entry = expected.setdefault((op, names[datatype]), [0, 0])
        entry[0] += 1
        entry[1] += count * sizes[datatype] * (2 if op in per_rank_count else 1)  # S, nccl-tests convention
    summary = collective_summary(capped)
    got = {(r["op"], r["dtype"]): [r["calls"], r["bytes"]] for r in summary.iter_rows(named=True)}
    assert got == expected
    assert sum(calls for calls, _ in expected.values()) == N_CALLS
    assert capped.call_totals["calls"].sum() == N_CALLS
    assert set(summary["processes"].to_list()) == {2}


def test_totals_count_every_tuning_choice_and_warning(capped: NcclLog) -> None:
    choices = capped.tuning_totals.group_by("bytes").agg(pl.col("choices").sum()).sort("bytes")
    assert choices.rows() == [(4096, N_TUNING // 2), (8192, N_TUNING // 2)]
    assert warning_counts(capped).rows() == [
        ("timeout", N_WARNS, "Call to connect returned Connection timed out, retry 0")
    ]
    out = io.StringIO()
    render_nccl(capped, Console(file=out, width=200))
    text = out.getvalue()
    assert f"COLL lines: {CALL_CAP} of {N_CALLS} kept as rows" in text
    assert f"Collectives ({N_CALLS} COLL lines)" in text


def test_uncapped_parse_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "all.log"
    path.write_text("\n".join(_capped_log_lines()) + "\n", encoding="utf-8")
    log = nccl_log.parse(path)
    assert (log.collective_rows_kept, log.tuning_rows_kept, log.warning_rows_kept) == (
        N_CALLS,
        N_TUNING,
        N_WARNS,
    )
    assert log.collectives["opcount"].to_list() == list(range(N_CALLS))
    # the fast path (whole COLL lines) and the general path (foreign prefix) read the same fields
    assert log.collectives["host"].to_list() == [WRITERS[i % 2].host for i in range(N_CALLS)]
    assert log.collectives["bytes"].to_list() == [
        count * (2 if datatype == BFLOAT16 else 4) for _, _, datatype, count, _ in _calls()
    ]
