"""Hierarchical collectives across nodes (docs/metrics.md, "Predicted gamma", Links): a ring inside each node
on the scale-up link, then rail-aligned rings over the node's NICs; priced by hand next to the model."""

from __future__ import annotations

import polars as pl
import pytest

from tests.test_prediction import calls, inputs
from traceview.core import costmodel as cm
from traceview.prediction.pricing import price

SIXTEEN = "[" + ", ".join(str(r) for r in range(16)) + "]"


def test_a_1_79_gb_all_reduce_over_two_nodes_of_eight_by_hand() -> None:
    size = 1.79e9
    frame = price(calls([("AllReduce", int(size), 16, SIXTEEN, 127000.0)]), inputs())
    row = frame.row(0, named=True)
    # by hand, links of tests/test_prediction.py: inside 100 GB/s, 1 us; NIC 10 GB/s, 5 us; 8 NICs a node.
    # reduce-scatter + all-gather inside (2 x 7 steps, 2 x 7/8 S over 100 GB/s), then an all-reduce of the
    # node's S across 2 nodes on 8 rails (2 x 1 step of 5 us, 2 x 1/2 S over 8 x 10 GB/s)
    by_hand_s = 2 * (7 * 1e-6 + 1 * 5e-6) + 2 * (7 / 8 * size / 100e9 + 1 / 2 * size / (8 * 10e9))
    assert by_hand_s == pytest.approx(0.053724, rel=1e-4)
    assert row["model_algorithm"] == "hierarchical"
    assert row["t_pred_us"] == pytest.approx(by_hand_s * 1e6)
    assert row["t_lat_us"] == pytest.approx(24.0)
    flat_s = 2 * 15 * 5e-6 + 2 * 15 / 16 * size / 10e9  # the flat ring on the NIC: 6x slower
    assert flat_s / by_hand_s == pytest.approx(6.25, rel=1e-2)
    scalar = cm.hierarchical_time_s("AllReduce", size, 8, 2, (1e-6, 100e9), (5e-6, 10e9), 8)
    assert scalar == pytest.approx(by_hand_s)


def test_fewer_nics_than_gpus_share_the_rails() -> None:
    size = 1e9
    two = cm.hierarchical_time_s("AllReduce", size, 8, 2, (0.0, 100e9), (0.0, 10e9), 2)
    assert two == pytest.approx(2 * 7 / 8 * size / 100e9 + 2 * 1 / 2 * size / (2 * 10e9))
    frame = price(calls([("AllReduce", int(size), 16, SIXTEEN, 1.0)]), inputs(nics_per_node=2))
    assert frame["t_bw_us"][0] == pytest.approx(two * 1e6)


def test_one_rank_per_node_host_calls_and_other_collectives_stay_flat() -> None:
    one_per_node = price(calls([("AllReduce", 10**9, 2, "[0, 8]", 1.0)]), inputs()).row(0, named=True)
    assert one_per_node["model_algorithm"] == "ring"
    assert one_per_node["t_pred_us"] == pytest.approx(2 * 5.0 + 1e9 / 10e9 * 1e6)
    host = calls([("AllReduce", 10**9, 16, SIXTEEN, 1.0)]).with_columns(comm_kind=pl.lit("host"))
    assert price(host, inputs())["model_algorithm"][0] == "ring"
    all_to_all = price(calls([("AllToAll", 10**9, 16, SIXTEEN, 1.0)]), inputs())
    assert all_to_all["model_algorithm"][0] == "ring"
    with pytest.raises(cm.UsageError):
        cm.hierarchical_time_s("AllToAll", 1.0, 8, 2, (0.0, 1.0), (0.0, 1.0), 8)


def test_a_truncated_ranks_list_is_shaped_by_the_group_size() -> None:
    """PyTorch lists the first 30 ranks of a larger group ("[0, ..., 29, ...]"): ranks 0-29 fall on 4 nodes of
    8, yet the 64 ranks span 8 nodes of 8 (N = ceil(64 / 8)), not 4 of 16."""
    size = 1e9
    truncated = "[" + ", ".join(str(r) for r in range(30)) + ", ...]"
    frame = price(calls([("AllReduce", int(size), 64, truncated, 1.0)]), inputs())
    row = frame.row(0, named=True)
    eight_by_eight = 2 * (7 * 1e-6 + 7 * 5e-6) + 2 * (7 / 8 * size / 100e9 + 7 / 8 * size / (8 * 10e9))
    assert row["model_algorithm"] == "hierarchical"
    assert row["t_pred_us"] == pytest.approx(eight_by_eight * 1e6)
    on_one_node = "[" + ", ".join(str(r) for r in range(30)) + ", ...]"
    spans = price(calls([("AllReduce", int(size), 64, on_one_node, 1.0)]), inputs(ranks_per_node=32))
    assert spans["spans_nodes"][0]  # ranks 0-29 on one node of 32, but 64 ranks cannot be
