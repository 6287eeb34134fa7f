"""Normalisation tables: collective names, dtypes, algorithms, protocols, reduction ops.

Expected values are written by hand (PyTorch's and NCCL's spellings, element sizes from the type widths). The
real spellings are gathered by a plain scan of the Kineto JSON (msgspec), so a new spelling without an
expectation fails.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Sequence
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tests.shared_data import requires_shared
from traceview.core.vocab import (
    ALGORITHM_ALIASES,
    ALGORITHM_SPELLINGS,
    CANONICAL_COLLECTIVES,
    COLLECTIVE_ALIASES,
    COLLECTIVE_SPELLINGS,
    DTYPE_ALIASES,
    DTYPE_SIZES,
    DTYPE_SPELLINGS,
    canonical_algorithm_expr,
    canonical_collective_expr,
    canonical_dtype_expr,
    canonical_protocol_expr,
    canonical_reduce_op_expr,
    dtype_size_expr,
)

REAL_KINETO = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"

COLLECTIVE_EXPECTED: dict[str | None, str | None] = {
    "allreduce": "AllReduce",
    "all_reduce": "AllReduce",
    "allreduce_coalesced": "AllReduce",
    "_allgather_base": "AllGather",
    "allgather": "AllGather",
    "all_gather": "AllGather",
    "all_gather_into_tensor": "AllGather",
    "allgather_into_tensor_coalesced": "AllGather",
    "allgather_coalesced": "AllGather",
    "_reduce_scatter_base": "ReduceScatter",
    "reduce_scatter": "ReduceScatter",
    "reduce_scatter_tensor": "ReduceScatter",
    "reduce_scatter_tensor_coalesced": "ReduceScatter",
    "all_to_all": "AllToAll",
    "alltoall": "AllToAll",
    "alltoall_base": "AllToAll",
    "all_to_allv": "AllToAll",
    "send": "Send",
    "recv": "Recv",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "barrier": "Barrier",
    "gather": "Gather",
    "scatter": "Scatter",
    "c10d::allreduce_": "AllReduce",
    "c10d::_allgather_base_": "AllGather",
    "c10d::alltoall_base_": "AllToAll",
    "c10d::recv_any_source_": "Recv",
    "c10d::monitored_barrier_": "Barrier",
    "nccl:all_reduce": "AllReduce",
    "nccl:all_to_all": "AllToAll",
    "gloo:all_reduce": "AllReduce",
    "NCCL:ALL_REDUCE": "AllReduce",
    "  allreduce  ": "AllReduce",
    # kernel-name fields
    "AllReduce": "AllReduce",
    "ReduceScatter": "ReduceScatter",
    "SendRecv": "SendRecv",
    "AllToAllPivot": "AllToAll",
    # not collectives, or unknown
    "coalesced": None,
    "wait": None,
    "Generic": None,
    "aten::add": None,
    "": None,
    None: None,
}

DTYPE_EXPECTED: dict[str | None, tuple[str, int] | None] = {
    "Float": ("float32", 4),
    "float": ("float32", 4),
    "f32": ("float32", 4),
    "c10::Half": ("float16", 2),
    "Half": ("float16", 2),
    "half": ("float16", 2),
    "__half": ("float16", 2),
    "f16": ("float16", 2),
    "BFloat16": ("bfloat16", 2),
    "c10::BFloat16": ("bfloat16", 2),
    "__nv_bfloat16": ("bfloat16", 2),
    "bf16": ("bfloat16", 2),
    "torch.bfloat16": ("bfloat16", 2),
    "Double": ("float64", 8),
    "f64": ("float64", 8),
    "Int": ("int32", 4),
    "i32": ("int32", 4),
    "u32": ("uint32", 4),
    "Long": ("int64", 8),
    "long int": ("int64", 8),
    "i64": ("int64", 8),
    "u64": ("uint64", 8),
    "Short": ("int16", 2),
    "Byte": ("uint8", 1),
    "unsigned char": ("uint8", 1),
    "uint8_t": ("uint8", 1),
    "u8": ("uint8", 1),
    "Char": ("int8", 1),
    "signed char": ("int8", 1),
    "int8_t": ("int8", 1),
    "i8": ("int8", 1),
    "Bool": ("bool", 1),
    "fp8_e4m3": ("float8_e4m3fn", 1),
    "Float8_e4m3fn": ("float8_e4m3fn", 1),
    "fp8_e5m2": ("float8_e5m2", 1),
    "Float8_e5m2": ("float8_e5m2", 1),
    "ComplexFloat": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
    " Float ": ("float32", 4),
    "Scalar": None,
    "TensorList": None,
    "": None,
    None: None,
}


class _Args(msgspec.Struct):
    collective_name: object = msgspec.field(name="Collective name", default=None)
    dtype: object = None
    input_type: object = msgspec.field(name="Input type", default=None)


class _Event(msgspec.Struct):
    name: object = None
    args: _Args | None = None


class _Document(msgspec.Struct):
    traceEvents: list[_Event] = []  # noqa: N815 (the JSON key)


def _events(path: Path) -> list[_Event]:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    if raw.lstrip()[:1] == b"[":
        return msgspec.json.decode(raw, type=list[_Event])
    return msgspec.json.decode(raw, type=_Document).traceEvents


_COMM_OP = re.compile(r"^(?:record_param_comms$|c10d::|nccl:|gloo:|hccl:)")


def _comm_events() -> list[_Event]:
    return [
        event
        for path in sorted(REAL_KINETO.rglob("*.json*"))
        for event in _events(path)
        if isinstance(event.name, str) and _COMM_OP.match(event.name)
    ]


@pytest.fixture(scope="module")
def real_spellings() -> dict[str, set[str]]:
    """Distinct spellings in the real traces: op names, `Collective name`, `dtype`, `Input type` items."""
    if not REAL_KINETO.is_dir():
        pytest.skip(f"{REAL_KINETO} not present")
    found: dict[str, set[str]] = {"op": set(), "collective": set(), "dtype": set(), "input_type": set()}
    for event in _comm_events():
        assert isinstance(event.name, str)
        if event.name != "record_param_comms":
            found["op"].add(event.name)
        args = event.args or _Args()
        for key, value in (("collective", args.collective_name), ("dtype", args.dtype)):
            if isinstance(value, str):
                found[key].add(value)
        if isinstance(args.input_type, list):
            found["input_type"].update(item for item in args.input_type if isinstance(item, str))
    return found


def _apply(expr: pl.Expr, values: Sequence[str | None]) -> list[object]:
    return pl.DataFrame({"v": values}, schema={"v": pl.Utf8}).select(expr.alias("out"))["out"].to_list()


def test_collective_names_normalise_as_expected() -> None:
    values = list(COLLECTIVE_EXPECTED)
    assert _apply(canonical_collective_expr(pl.col("v")), values) == list(COLLECTIVE_EXPECTED.values())


def test_dtype_names_normalise_with_their_sizes() -> None:
    values = list(DTYPE_EXPECTED)
    expected = list(DTYPE_EXPECTED.values())
    assert _apply(canonical_dtype_expr(pl.col("v")), values) == [e[0] if e else None for e in expected]
    assert _apply(dtype_size_expr(pl.col("v")), values) == [e[1] if e else None for e in expected]


def test_size_expr_is_int64() -> None:
    frame = pl.DataFrame({"v": ["Float"]}).select(dtype_size_expr(pl.col("v")))
    assert frame.schema["v"] == pl.Int64()


def test_algorithm_protocol_and_reduce_op_spellings() -> None:
    algorithms: list[str | None] = ["Ring", "RING", "Tree", "NVLS", "NVLSTree", "NVLS_TREE", "CollNetDirect"]
    algorithms += ["COLLNET_CHAIN", "CollNet", "PAT", "AGxLL_R", None]
    assert _apply(canonical_algorithm_expr(pl.col("v")), algorithms) == [
        "RING",
        "RING",
        "TREE",
        "NVLS",
        "NVLS_TREE",
        "NVLS_TREE",
        "COLLNET_DIRECT",
        "COLLNET_CHAIN",
        "COLLNET_CHAIN",
        "PAT",
        None,
        None,
    ]
    protocols = ["LL", "LL128", "Simple", "SIMPLE", "ll64", None]
    assert _apply(canonical_protocol_expr(pl.col("v")), protocols) == [
        "LL",
        "LL128",
        "SIMPLE",
        "SIMPLE",
        None,
        None,
    ]
    ops = ["sum", "Sum", "prod", "min", "max", "MinMax", "avg", "PreMulSum", "SumPostDiv", "copy", None]
    assert _apply(canonical_reduce_op_expr(pl.col("v")), ops) == [
        "Sum",
        "Sum",
        "Prod",
        "Min",
        "Max",
        "MinMax",
        "Avg",
        "PreMulSum",
        "SumPostDiv",
        None,
        None,
    ]


def test_no_spelling_is_listed_twice() -> None:
    assert sum(len(spellings) for spellings in COLLECTIVE_SPELLINGS.values()) == len(COLLECTIVE_ALIASES)
    assert sum(len(spellings) for _, spellings in DTYPE_SPELLINGS.values()) == len(DTYPE_ALIASES)
    assert sum(len(spellings) for spellings in ALGORITHM_SPELLINGS.values()) == len(ALGORITHM_ALIASES)


def test_tables_are_closed_and_keyed_in_lower_case() -> None:
    assert set(COLLECTIVE_ALIASES.values()) == set(CANONICAL_COLLECTIVES)
    assert set(DTYPE_ALIASES.values()) == set(DTYPE_SIZES)
    for table in (COLLECTIVE_ALIASES, DTYPE_ALIASES, ALGORITHM_ALIASES):
        assert all(key == key.lower().strip() for key in table)


def test_every_canonical_value_normalises_to_itself() -> None:
    assert _apply(canonical_collective_expr(pl.col("v")), list(CANONICAL_COLLECTIVES)) == list(
        CANONICAL_COLLECTIVES
    )
    assert _apply(canonical_dtype_expr(pl.col("v")), list(DTYPE_SIZES)) == list(DTYPE_SIZES)
    canonical_algorithms = list(ALGORITHM_SPELLINGS)
    assert _apply(canonical_algorithm_expr(pl.col("v")), canonical_algorithms) == canonical_algorithms


REAL_OP_EXPECTED = {
    "c10d::_allgather_base_": "AllGather",
    "c10d::_reduce_scatter_base_": "ReduceScatter",
    "c10d::allgather_": "AllGather",
    "c10d::allreduce_": "AllReduce",
    "c10d::alltoall_base_": "AllToAll",
    "c10d::barrier": "Barrier",
    "c10d::broadcast_": "Broadcast",
    "gloo:all_reduce": "AllReduce",
    "gloo:barrier": "Barrier",
    "hccl:all_reduce": "AllReduce",
    "hccl:all_to_all": "AllToAll",
    "hccl:allgather": "AllGather",
    "nccl:_all_gather_base": "AllGather",
    "nccl:_reduce_scatter_base": "ReduceScatter",
    "nccl:all_reduce": "AllReduce",
    "nccl:all_to_all": "AllToAll",
    "nccl:broadcast": "Broadcast",
}
REAL_COLLECTIVE_NAME_EXPECTED = {"allreduce": "AllReduce", "broadcast": "Broadcast", "wait": None}
REAL_DTYPE_EXPECTED = {"Float": 4, "Long": 8, "Byte": 1}
REAL_INPUT_TYPE_EXPECTED = {
    "float": 4,
    "long": 8,
    "int": 4,
    "unsigned char": 1,
    "signed char": 1,
    "Scalar": None,
    "TensorList": None,
    "ScalarList": None,
    "": None,
}


@requires_shared
def test_real_collective_op_names(real_spellings: dict[str, set[str]]) -> None:
    assert real_spellings["op"] == set(REAL_OP_EXPECTED), "a real op name without an expectation"
    names = sorted(REAL_OP_EXPECTED)
    assert _apply(canonical_collective_expr(pl.col("v")), list(names)) == [REAL_OP_EXPECTED[n] for n in names]


@requires_shared
def test_real_collective_name_args(real_spellings: dict[str, set[str]]) -> None:
    assert real_spellings["collective"] == set(REAL_COLLECTIVE_NAME_EXPECTED)
    names = sorted(REAL_COLLECTIVE_NAME_EXPECTED)
    expected = [REAL_COLLECTIVE_NAME_EXPECTED[n] for n in names]
    assert _apply(canonical_collective_expr(pl.col("v")), list(names)) == expected


@requires_shared
def test_real_dtype_args_and_input_types(real_spellings: dict[str, set[str]]) -> None:
    assert real_spellings["dtype"] == set(REAL_DTYPE_EXPECTED)
    assert real_spellings["input_type"] == set(REAL_INPUT_TYPE_EXPECTED)
    table = REAL_DTYPE_EXPECTED | REAL_INPUT_TYPE_EXPECTED
    names = sorted(table)
    assert _apply(dtype_size_expr(pl.col("v")), list(names)) == [table[n] for n in names]
