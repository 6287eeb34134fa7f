"""`alltoall_splits`: the split sizes of gloo's `c10d::alltoall_base_` rows, read from their `Concrete Inputs`
wherever their comm args gave none, whether the names come as a list or as a polars column."""

from __future__ import annotations

import msgspec
import polars as pl
import pytest
from traceview.parsers.kineto._schema import Args
from traceview.parsers.kineto._splits import ALLTOALL_BASE, alltoall_splits

CONCRETE = msgspec.Raw(b'["", "", "", "[2, 3]", "[4, 1]", ""]')
"""(output, input, group, output_split_sizes, input_split_sizes, ...)"""


def _args(names: list[str]) -> list[Args]:
    return [Args(concrete_inputs=CONCRETE) if name == ALLTOALL_BASE else Args() for name in names]


@pytest.mark.parametrize("as_column", [False, True])
def test_only_the_alltoall_rows_take_their_concrete_inputs(as_column: bool) -> None:
    names = ["aten::mm", ALLTOALL_BASE, "aten::add", ALLTOALL_BASE]
    data = {"name": pl.Series(names) if as_column else names}
    found = alltoall_splits(data, _args(names))
    assert found == {
        "in_split": [None, "[4, 1]", None, "[4, 1]"],
        "out_split": [None, "[2, 3]", None, "[2, 3]"],
    }


def test_a_split_from_the_comm_args_is_kept() -> None:
    names = [ALLTOALL_BASE, ALLTOALL_BASE]
    data = {"name": pl.Series(names), "in_split": ["[7, 7]", None]}
    found = alltoall_splits(data, _args(names))
    assert found["in_split"] == ["[7, 7]", "[4, 1]"]
    assert found["out_split"] == ["[2, 3]", "[2, 3]"]


def test_no_alltoall_row_leaves_every_split_null() -> None:
    names = ["aten::mm"] * 300
    found = alltoall_splits({"name": pl.Series(names)}, _args(names))
    assert found == {"in_split": [None] * 300, "out_split": [None] * 300}
