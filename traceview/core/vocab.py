"""Normalisation tables: every spelling a trace or a kernel name uses, mapped to one canonical value
(docs/metrics.md, "Collectives").

Each table is data: a canonical value and the spellings that mean it, looked up after lower-casing and
trimming. A spelling missing from a table normalises to null (unknown), never to a guess. The `*_expr`
functions turn a table into one polars expression (`replace_strict` over a column), vectorised over frames.

- collectives: collective-call names (`record_param_comms` `Collective name`, `c10d::allreduce_`,
  `nccl:all_reduce`, `gloo:barrier`, ...) and the collective field of NCCL kernel names (`AllReduce`,
  `SendRecv`, RCCL's `AllToAllPivot`). Canonical values: `CANONICAL_COLLECTIVES`. `Gather` and `Scatter` are
  kept as themselves (NCCL runs them as send/recv, PyTorch names them apart); `coalesced` and `wait` are not
  collectives and normalise to null.
- dtypes: PyTorch scalar-type names (`Float`, `BFloat16`), C++ spellings from `Input type` (`c10::Half`,
  `unsigned char`), NCCL kernel-name spellings (`float`, `__nv_bfloat16`, `f32`, `bf16`), to torch's names
  (`float32`) and the element size in bytes.
- algorithm, protocol, reduction op: the spellings of NCCL kernel names of every generation and of NCCL_DEBUG
  logs (`Ring`, `RING`, `CollNetDirect`, `Simple`, `sum`, `MinMax`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import polars as pl

CANONICAL_COLLECTIVES: tuple[str, ...] = (
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "Broadcast",
    "Reduce",
    "AllToAll",
    "SendRecv",
    "Send",
    "Recv",
    "Barrier",
    "Gather",
    "Scatter",
)

COLLECTIVE_CALL_PREFIXES: tuple[str, ...] = (
    "c10d::",
    "nccl:",
    "gloo:",
    "hccl:",
    "mpi:",
    "ucc:",
    "xccl:",
    "rccl:",
)
"""Backend prefixes of collective-call op names (`c10d::allreduce_`, `nccl:all_reduce`), stripped first."""

COLLECTIVE_SPELLINGS: Mapping[str, tuple[str, ...]] = {
    "AllReduce": (
        "allreduce",
        "all_reduce",
        "allreduce_coalesced",
        "all_reduce_coalesced",
        "allreducewithbias",
    ),
    "AllGather": (
        "allgather",
        "all_gather",
        "allgather_base",
        "all_gather_base",
        "all_gather_into_tensor",
        "allgather_into_tensor",
        "allgather_into_tensor_coalesced",
        "all_gather_into_tensor_coalesced",
        "allgather_coalesced",
        "all_gather_coalesced",
        "allgatherv",
        "all_gather_v",
    ),
    "ReduceScatter": (
        "reducescatter",
        "reduce_scatter",
        "reduce_scatter_base",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "reduce_scatter_coalesced",
        "reducescatterv",
        "reduce_scatter_v",
    ),
    "AllToAll": (
        "alltoall",
        "all_to_all",
        "alltoall_base",
        "all_to_all_single",
        "all_to_allv",
        "alltoallv",
        "alltoallpivot",
        "alltoallgda",
        "alltoallvgda",
    ),
    "Broadcast": ("broadcast",),
    "Reduce": ("reduce",),
    "SendRecv": ("sendrecv", "send_recv", "batch_isend_irecv"),
    "Send": ("send", "isend"),
    "Recv": ("recv", "irecv", "recv_any_source"),
    "Barrier": ("barrier", "monitored_barrier"),
    "Gather": ("gather",),
    "Scatter": ("scatter",),
}
"""Canonical collective -> its spellings (lower case, without backend prefix or leading/trailing `_`)."""

COLLECTIVE_ALIASES: Mapping[str, str] = {
    spelling: canonical for canonical, spellings in COLLECTIVE_SPELLINGS.items() for spelling in spellings
}
"""Collective spelling (lower case, backend prefix and leading/trailing `_` removed) -> canonical value."""

DTYPE_SPELLINGS: Mapping[str, tuple[int, tuple[str, ...]]] = {
    "float32": (4, ("float", "float32", "f32", "fp32")),
    "float16": (2, ("half", "__half", "float16", "f16", "fp16")),
    "bfloat16": (2, ("bfloat16", "__nv_bfloat16", "hip_bfloat16", "rccl_bfloat16", "bf16")),
    "float64": (8, ("double", "float64", "f64", "fp64")),
    "int8": (1, ("char", "signed char", "int8_t", "int8", "i8")),
    "uint8": (1, ("byte", "unsigned char", "uint8_t", "uint8", "u8")),
    "int16": (2, ("short", "int16_t", "int16", "i16")),
    "uint16": (2, ("uint16_t", "uint16", "u16", "unsigned short")),
    "int32": (4, ("int", "int32_t", "int32", "i32")),
    "uint32": (4, ("uint32_t", "uint32", "u32", "unsigned int")),
    "int64": (8, ("long", "long int", "long long", "int64_t", "int64", "i64")),
    "uint64": (8, ("uint64_t", "uint64", "u64", "unsigned long")),
    "bool": (1, ("bool",)),
    "float8_e4m3fn": (1, ("float8_e4m3fn", "fp8_e4m3", "f8e4m3", "__nv_fp8_e4m3")),
    "float8_e5m2": (1, ("float8_e5m2", "fp8_e5m2", "f8e5m2", "__nv_fp8_e5m2")),
    # RCCL's rccl_float8/rccl_bfloat8 are the fnuz formats on MI300 (its main fp8 target).
    "float8_e4m3fnuz": (1, ("float8_e4m3fnuz", "rccl_float8")),
    "float8_e5m2fnuz": (1, ("float8_e5m2fnuz", "rccl_bfloat8")),
    "complex32": (4, ("complexhalf", "complex32", "complex<half>", "complex<c10::half>")),
    "complex64": (8, ("complexfloat", "complex64", "complex<float>")),
    "complex128": (16, ("complexdouble", "complex128", "complex<double>")),
}
"""Canonical dtype -> (element size in bytes, spellings in lower case without `c10::`/`torch.`)."""

DTYPE_ALIASES: Mapping[str, str] = {
    spelling: canonical for canonical, (_, spellings) in DTYPE_SPELLINGS.items() for spelling in spellings
}
"""Dtype spelling (lower case, `c10::`/`torch.` prefix removed) -> canonical dtype name (torch's)."""

DTYPE_SIZES: Mapping[str, int] = {canonical: size for canonical, (size, _) in DTYPE_SPELLINGS.items()}
"""Canonical dtype name -> element size in bytes."""

ALGORITHM_SPELLINGS: Mapping[str, tuple[str, ...]] = {
    "RING": ("ring",),
    "TREE": ("tree",),
    "NVLS": ("nvls",),
    "NVLS_TREE": ("nvls_tree", "nvlstree"),
    "COLLNET_DIRECT": ("collnet_direct", "collnetdirect"),
    # NCCL < 2.12 had one CollNet algorithm (the chain over the collTree); 2.12 kept it as COLLNET_CHAIN.
    "COLLNET_CHAIN": ("collnet_chain", "collnetchain", "collnet"),
    "PAT": ("pat",),
}
"""Canonical NCCL algorithm -> its spellings in kernel names and NCCL_DEBUG logs (lower case)."""
ALGORITHM_ALIASES: Mapping[str, str] = {
    spelling: canonical for canonical, spellings in ALGORITHM_SPELLINGS.items() for spelling in spellings
}
"""Algorithm spelling (lower case) -> canonical NCCL algorithm."""

PROTOCOL_ALIASES: Mapping[str, str] = {"ll": "LL", "ll128": "LL128", "simple": "SIMPLE"}
"""Protocol spelling (lower case) -> canonical NCCL protocol."""

REDUCE_OP_ALIASES: Mapping[str, str] = {
    "sum": "Sum",
    "prod": "Prod",
    "min": "Min",
    "max": "Max",
    "minmax": "MinMax",  # NCCL >= 2.19 and RCCL build one kernel for both Min and Max
    "avg": "Avg",
    "premulsum": "PreMulSum",
    "sumpostdiv": "SumPostDiv",
}
"""Reduction-op spelling (lower case) -> canonical op. NCCL <= 2.7's `copy` (Broadcast, AllGather) is no
reduction and normalises to null."""


def _literals(table: Mapping[str, str] | Mapping[str, int]) -> tuple[pl.Expr, pl.Expr]:
    """`table`'s keys and values as the two literals `replace_strict` reads (built once: expressions are
    values, and building them from a mapping on every call costs more than the lookup's query)."""
    return pl.lit(list(table)), pl.lit(list(table.values()))


_COLLECTIVES = _literals(COLLECTIVE_ALIASES)
_DTYPES = _literals(DTYPE_ALIASES)
_DTYPE_SIZES = _literals(DTYPE_SIZES)
_ALGORITHMS = _literals(ALGORITHM_ALIASES)
_PROTOCOLS = _literals(PROTOCOL_ALIASES)
_REDUCE_OPS = _literals(REDUCE_OP_ALIASES)
_CALL_PREFIX = "^(?:" + "|".join(re.escape(prefix) for prefix in COLLECTIVE_CALL_PREFIXES) + ")"


def _lookup(col: pl.Expr, table: tuple[pl.Expr, pl.Expr]) -> pl.Expr:
    """Look `col` (already cleaned to a table key) up in `table` (`_literals`); a missing key gives null."""
    return col.replace_strict(*table, default=None, return_dtype=pl.Utf8)


def _clean(col: pl.Expr) -> pl.Expr:
    """Lower-case and trim a string column: the key form of every table."""
    return col.cast(pl.Utf8).str.strip_chars().str.to_lowercase()


def canonical_collective_expr(col: pl.Expr) -> pl.Expr:
    """Canonical collective (`AllReduce`, ...) of a column of collective-call names or kernel-name fields.

    Lower-cases, strips a backend prefix (`c10d::`, `nccl:`, `gloo:`, ...) and leading/trailing `_`
    (`c10d::_allgather_base_` -> `allgather_base`), then looks the rest up in `COLLECTIVE_ALIASES`.
    """
    key = _clean(col).str.replace(_CALL_PREFIX, "").str.strip_chars("_")
    return _lookup(key, _COLLECTIVES)


def canonical_dtype_expr(col: pl.Expr) -> pl.Expr:
    """Canonical dtype name (`float32`, `bfloat16`, ...) of a column of dtype spellings; null when unknown."""
    key = _clean(col).str.replace(r"^(?:c10::|torch\.)", "")
    return _lookup(key, _DTYPES)


def dtype_size_expr(col: pl.Expr) -> pl.Expr:
    """Element size in bytes (Int64) of a column of dtype spellings; null when the dtype is unknown."""
    return canonical_dtype_expr(col).replace_strict(*_DTYPE_SIZES, default=None, return_dtype=pl.Int64)


def canonical_algorithm_expr(col: pl.Expr) -> pl.Expr:
    """Canonical NCCL algorithm (`RING`, `NVLS_TREE`, ...) of a column of spellings; null when unknown."""
    return _lookup(_clean(col), _ALGORITHMS)


def canonical_protocol_expr(col: pl.Expr) -> pl.Expr:
    """Canonical NCCL protocol (`LL`, `LL128`, `SIMPLE`) of a column of spellings; null when unknown."""
    return _lookup(_clean(col), _PROTOCOLS)


def canonical_reduce_op_expr(col: pl.Expr) -> pl.Expr:
    """Canonical reduction op (`Sum`, `MinMax`, ...) of a column of spellings; null when unknown or `copy`."""
    return _lookup(_clean(col), _REDUCE_OPS)


_BACKEND_PREFIXES = tuple(prefix for prefix in COLLECTIVE_CALL_PREFIXES if prefix != "c10d::")
CALL_FAMILIES: tuple[tuple[str, str], ...] = (
    ("c10d", r"^c10d::"),
    ("rpc", r"^record_param_comms$"),
    ("backend", "^(?:" + "|".join(re.escape(prefix) for prefix in _BACKEND_PREFIXES) + ")"),
)
"""Host ops that are collective calls, outermost first, as (family, name regex). The call reported for a
kernel (`call_name`, `call_start_us`) is the outermost one found."""

CPU_ONLY_CALL = r"^(?:gloo|mpi):"
"""Backend annotations of collectives that move their data on the host (gloo, MPI), with no kernel: each is a
row, `on_device=False`, and its time is communication (docs/metrics.md section 4). An `nccl:*` annotation only
enqueues device work: its kernels are the communication."""

DEVICE_BACKENDS = ("nccl", "rccl", "hccl", "xccl", "ucc", "mccl")
"""Backends whose collectives run on a device: their host annotation (`nccl:all_reduce`) only enqueues work.
"""
DEVICE_CALL = "^(?:" + "|".join(DEVICE_BACKENDS) + "):"
"""Backend annotations of collectives that run on a device."""
