"""Collectives priced by the algorithm the NCCL log names (docs/metrics.md, "Predicted gamma", Links): the
tree all-reduce and recursive halving-doubling of the alpha-beta model, priced by hand next to the model's
value; the log's TUNING lines read into the model's algorithms; NICs per node stated on the command line or in
run.json reaching the hierarchical pricing."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from traceview.parsers import nccl_log

from tests.nccl_log_factory import TUNING_NEW, TUNING_OLD, D, Writer
from tests.test_prediction import calls, inputs
from traceview.core import algorithms as al
from traceview.nccl.join_tables import algorithm_mix
from traceview.options.run import build_options
from traceview.options.user import UserOptions
from traceview.prediction.algorithms import logged_algorithms
from traceview.prediction.pricing import price

EIGHT = "[0, 1, 2, 3, 4, 5, 6, 7]"
SIXTEEN = "[" + ", ".join(str(r) for r in range(16)) + "]"


def test_a_tree_all_reduce_by_hand() -> None:
    # 8 ranks in a node (tests/test_prediction.py's links: 100 GB/s, 1 us inside a node); 64 KiB, bucket
    # 16 KiB - 256 KiB. Seed 004 section 3.2: 2 log2(8) alpha + 2 log2(8) S / B = 6 us + 6 x 65536 / 100e9 s
    size = 65536
    logged = (("allreduce", 1 << 14, "tree"),)
    frame = price(calls([("AllReduce", size, 8, EIGHT, 1.0)]), inputs(logged_algorithms=logged))
    row = frame.row(0, named=True)
    by_hand_us = (2 * 3 * 1e-6 + 2 * 3 * size / 100e9) * 1e6
    assert by_hand_us == pytest.approx(9.93216)
    assert row["model_algorithm"] == "tree"
    assert row["t_pred_us"] == pytest.approx(by_hand_us)
    assert row["t_lat_us"] == pytest.approx(6.0)
    ring_us = (2 * 7 * 1e-6 + 2 * 7 / 8 * size / 100e9) * 1e6  # the ring it replaces: 14 latency steps
    ring = price(calls([("AllReduce", size, 8, EIGHT, 1.0)]), inputs())
    assert ring["t_pred_us"][0] == pytest.approx(ring_us)
    assert al.algorithm_time_s("AllReduce", "tree", 8, size, 1e-6, 100e9) == pytest.approx(by_hand_us / 1e6)


def test_recursive_halving_doubling_by_hand_on_a_group_across_nodes() -> None:
    # 16 ranks on two nodes, the NIC (10 GB/s, 5 us): 2 ceil(log2 16) alpha + 2 (15/16) S / B, instead of
    # the hierarchical collective; an AllGather is priced on NCCL's byte count of one shard (S / n)
    size = 1 << 20
    logged = (("allreduce", 1 << 18, "halving_doubling"), ("allgather", 1 << 14, "halving_doubling"))
    frame = price(
        calls([("AllReduce", size, 16, SIXTEEN, 1.0), ("AllGather", size, 16, SIXTEEN, 1.0)]),
        inputs(logged_algorithms=logged),
    )
    all_reduce, all_gather = frame.row(0, named=True), frame.row(1, named=True)
    assert all_reduce["model_algorithm"] == "halving_doubling"
    assert all_reduce["t_pred_us"] == pytest.approx((2 * 4 * 5e-6 + 2 * 15 / 16 * size / 10e9) * 1e6)
    assert all_gather["model_algorithm"] == "halving_doubling"  # its shard, 64 KiB, is in the logged bucket
    assert all_gather["t_pred_us"] == pytest.approx((4 * 5e-6 + 15 / 16 * size / 10e9) * 1e6)


def test_ring_choices_other_sizes_and_host_calls_keep_the_model() -> None:
    logged = (("allreduce", 1 << 14, "tree"), ("allreduce", 1 << 26, "ring"))
    big = price(calls([("AllReduce", 1 << 27, 16, SIXTEEN, 1.0)]), inputs(logged_algorithms=logged))
    assert big["model_algorithm"][0] == "hierarchical"  # a logged ring across nodes: the hierarchical rings
    other = price(calls([("AllReduce", 1 << 20, 8, EIGHT, 1.0)]), inputs(logged_algorithms=logged))
    assert other["model_algorithm"][0] == "ring"  # no choice logged at 1 MiB
    host = calls([("AllReduce", 65536, 8, EIGHT, 1.0)]).with_columns(comm_kind=pl.lit("host"))
    assert price(host, inputs(logged_algorithms=logged))["model_algorithm"][0] == "ring"


def test_the_logs_tuning_lines_become_the_models_algorithms(tmp_path: Path) -> None:
    old = Writer("node-e", 500, 501, 0)
    lines = [
        D.info(TUNING_NEW, "AllReduce", 65536, "TREE", "LL", 0, 1),
        D.info(TUNING_NEW, "AllReduce", 65536, "TREE", "LL", 0, 1),
        D.info(TUNING_NEW, "AllReduce", 65536, "RING", "LL", 0, 1),  # outvoted: TREE twice in this bucket
        D.info(TUNING_NEW, "AllGather", 4096, "PAT", "SIMPLE", 0, 1),
        D.info(TUNING_NEW, "AllReduce", 1 << 28, "NVLS", "SIMPLE", 0, 1),  # not a model algorithm
        old.info(TUNING_OLD, 2048, 0, 0, 12.5),  # NCCL before 2.23: no collective, code 0 = TREE
    ]
    log = tmp_path / "nccl.log"
    log.write_text("\n".join(lines) + "\n")
    found = logged_algorithms(algorithm_mix([nccl_log.parse(log)]))
    assert found == (
        ("allgather", 1 << 10, "halving_doubling"),
        ("allreduce", 1 << 14, "tree"),
        ("any", 1 << 10, "tree"),
    )
    # a call of a collective the line names no choice for takes the one of a line naming none
    broadcast = price(calls([("Broadcast", 2048, 8, EIGHT, 1.0)]), inputs(logged_algorithms=found))
    assert broadcast["model_algorithm"][0] == "ring"  # the model has no tree broadcast: priced as before


def test_nics_per_node_from_the_command_line_and_run_json(tmp_path: Path) -> None:
    stated = build_options(tmp_path, UserOptions(nics_per_node=2)).model
    assert (stated.nics_per_node, stated.source_of("nics_per_node")) == (2, "command line")
    (tmp_path / "run.json").write_text(
        json.dumps({"schema_version": "1.0", "kind": "traceview-run", "hardware": {"nics_per_node": 4}})
    )
    from_file = build_options(tmp_path, UserOptions()).model
    assert (from_file.nics_per_node, from_file.source_of("nics_per_node")) == (4, "manifest")
    # 16 ranks on 2 nodes of 8, 1 GB, 4 NICs a node: 2 [(7/8) S / 100e9 + (1/2) S / (4 x 10e9)] + latency
    size = 1e9
    frame = price(calls([("AllReduce", int(size), 16, SIXTEEN, 1.0)]), inputs(nics_per_node=4))
    by_hand_s = 2 * (7 * 1e-6 + 5e-6) + 2 * (7 / 8 * size / 100e9 + 1 / 2 * size / (4 * 10e9))
    assert frame["t_pred_us"][0] == pytest.approx(by_hand_s * 1e6)
