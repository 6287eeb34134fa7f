"""`batch_splits`: a batch of ranks' all-to-all calls placed in their step windows with their split sizes, the
k-th `c10d::alltoall_base_` op's splits and tensor bytes given to the k-th call of a rank whose calls carry
none and count as many as its ops; each rank's rows what it alone gives."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.crossrank_factory import windows
from traceview.model.stacking import by_rank
from traceview.moe.splits import SPLIT_SCHEMA, batch_splits

CALL_SCHEMA = {
    "rank": pl.Int64,
    "start_us": pl.Float64,
    "dur_us": pl.Float64,
    "group": pl.Utf8,
    "pg_ranks": pl.Utf8,
    "in_split": pl.Utf8,
    "out_split": pl.Utf8,
    "in_bytes": pl.Int64,
    "out_bytes": pl.Int64,
}
OP_SCHEMA = {
    "rank": pl.Int64,
    "name": pl.Utf8,
    "start_us": pl.Float64,
    "in_split": pl.Utf8,
    "out_split": pl.Utf8,
    "input_dims": pl.Utf8,
    "input_types": pl.Utf8,
}
OP = "c10d::alltoall_base_"
DIMS = "[[6, 8], [4, 8], []]"  # output 6 x 8, input 4 x 8 float: 192 and 128 bytes
TYPES = '["float", "float", ""]'


def _calls() -> pl.DataFrame:
    return pl.DataFrame(
        [
            (
                0,
                30.0,
                5.0,
                "ep",
                "[0, 1]",
                None,
                None,
                1000,
                1000,
            ),  # rank 0: two calls, two ops, out of order
            (0, 10.0, 5.0, "ep", "[0, 1]", None, None, 1000, 1000),
            (1, 12.0, 5.0, "ep", "[0, 1]", None, None, 1000, 1000),  # rank 1: two calls, one op
            (1, 32.0, 5.0, "ep", "[0, 1]", None, None, 1000, 1000),
            (2, 14.0, 5.0, "ep", "[2, 3]", "[3, 1]", "[2, 2]", 64, 64),  # rank 2: its own splits kept
            (2, 150.0, 5.0, "ep", "[2, 3]", "[3, 1]", "[2, 2]", 64, 64),  # after its last window: dropped
        ],
        schema=CALL_SCHEMA,
        orient="row",
    )


def _ops() -> pl.DataFrame:
    return pl.DataFrame(
        [
            (0, OP, 29.0, "[1, 3]", "[2, 4]", DIMS, TYPES),
            (0, "aten::mm", 9.0, None, None, "[[2, 2]]", '["float"]'),
            (0, OP, 9.5, "[3, 1]", "[4, 2]", DIMS, TYPES),
            (1, OP, 11.0, "[2, 2]", "[2, 2]", DIMS, TYPES),
            (2, OP, 13.0, "[9, 9]", "[9, 9]", DIMS, TYPES),
        ],
        schema=OP_SCHEMA,
        orient="row",
    )


def _windows() -> pl.DataFrame:
    return windows([0, 1, 2], [(0, 0.0, 50.0), (1, 50.0, 100.0)])


def test_the_kth_op_gives_the_kth_call_its_splits_where_counts_agree() -> None:
    found = batch_splits(_calls(), _ops(), _windows())
    assert found.schema == pl.Schema(SPLIT_SCHEMA)
    rows = found.select("rank", "start_us", "in_split", "out_split", "in_bytes", "out_bytes").rows()
    assert rows == [
        (0, 10.0, "[3, 1]", "[4, 2]", 4 * 8 * 4, 6 * 8 * 4),  # the first op (9.5 us) to the first call
        (0, 30.0, "[1, 3]", "[2, 4]", 4 * 8 * 4, 6 * 8 * 4),
        (1, 12.0, None, None, 1000, 1000),  # one op for two calls: nothing taken
        (1, 32.0, None, None, 1000, 1000),
        (2, 14.0, "[3, 1]", "[2, 2]", 64, 64),  # splits of its own: the op's left alone
    ]
    assert found.get_column("step").to_list() == [0, 0, 0, 0, 0]


def test_each_rank_of_a_batch_gets_what_it_alone_gives() -> None:
    calls, ops, steps = _calls(), _ops(), _windows()
    together = by_rank(batch_splits(calls, ops, steps), [2, 0, 1])
    for rank, found in zip([2, 0, 1], together, strict=True):
        alone = batch_splits(*(frame.filter(pl.col("rank") == rank) for frame in (calls, ops, steps)))
        assert_frame_equal(found, alone)


def test_no_calls_or_no_windows_give_no_rows() -> None:
    assert batch_splits(None, _ops(), _windows()).schema == pl.Schema(SPLIT_SCHEMA)
    assert batch_splits(_calls(), _ops(), _windows().clear()).height == 0
