"""The communication-kernel name grammar: every generation, every real name, user patterns, non-comm kernels.

Expected fields are written by hand from the NCCL naming conventions, never copied from the decoder's output.
The real names are gathered by a plain scan of the Kineto JSON (msgspec, independent of traceview's parser).
"""

from __future__ import annotations

import dataclasses
import gzip
import re
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tests.shared_data import requires_shared
from traceview.errors import UsageError
from traceview.kernel_names import (
    DECODED_SCHEMA,
    DEFAULT_PATTERNS,
    FIELDS,
    KernelPattern,
    decode_kernel_names,
    is_comm_kernel_expr,
    user_patterns,
    with_kernel_fields,
)

REAL_KINETO = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "kineto"

# (library, collective, algorithm, protocol, reduce_op, dtype)
Fields = tuple[str, str | None, str | None, str | None, str | None, str | None]

REAL_EXPECTED: dict[str, Fields] = {
    "ncclKernel_AllReduce": ("nccl", "AllReduce", None, None, None, None),
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": (
        "nccl", "AllReduce", "RING", "LL", "Sum", "float32"
    ),
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "AllReduce", "RING", "LL", "Sum", "float32"
    ),
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "Broadcast", "RING", "LL", "Sum", "int8"
    ),
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)": (
        "nccl", "SendRecv", "RING", "SIMPLE", "Sum", "int8"
    ),
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "SendRecv", "RING", "SIMPLE", "Sum", "int8"
    ),
}  # fmt: skip
"""Every distinct communication-kernel name of the real traces, decoded by hand."""

GENERATION_EXPECTED: dict[str, Fields] = {
    # NCCL <= 2.7: nccl<Coll><Algo><Proto>Kernel_<op>_<type>; no protocol suffix in the name: unknown
    "ncclAllReduceRingLLKernel_sum_f32": ("nccl", "AllReduce", "RING", "LL", "Sum", "float32"),
    "ncclAllReduceRingLLKernel_sum_f32(ncclColl)": ("nccl", "AllReduce", "RING", "LL", "Sum", "float32"),
    "ncclAllReduceTreeLL128Kernel_sum_f16": ("nccl", "AllReduce", "TREE", "LL128", "Sum", "float16"),
    "ncclAllReduceCollNetLLKernel_max_u64": ("nccl", "AllReduce", "COLLNET_CHAIN", "LL", "Max", "uint64"),
    "ncclReduceScatterRingLLKernel_prod_f64": ("nccl", "ReduceScatter", "RING", "LL", "Prod", "float64"),
    "ncclReduceRingLLKernel_min_i32": ("nccl", "Reduce", "RING", "LL", "Min", "int32"),
    "ncclAllGatherRingLLKernel_copy_i8": ("nccl", "AllGather", "RING", "LL", None, "int8"),
    "ncclBroadcastRingLLKernel_copy_i8": ("nccl", "Broadcast", "RING", "LL", None, "int8"),
    "ncclSendRecvKernel_copy_i8": ("nccl", "SendRecv", None, None, None, "int8"),
    "ncclAllReduceLLKernel_sum_f32": ("nccl", "AllReduce", None, "LL", "Sum", "float32"),
    # NCCL 2.8-2.18: ncclKernel_<Coll>_<ALGO>_<PROTO>_<Op>_<ctype>
    "ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)": (
        "nccl", "AllReduce", "RING", "LL", "Sum", "float16"
    ),
    "ncclKernel_AllReduce_TREE_LL_Sum___nv_bfloat16(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "AllReduce", "TREE", "LL", "Sum", "bfloat16"
    ),
    "ncclKernel_AllReduce_COLLNET_LL_Sum_double(ncclWorkElem)": (
        "nccl", "AllReduce", "COLLNET_CHAIN", "LL", "Sum", "float64"
    ),
    "ncclKernel_AllReduce_COLLNET_DIRECT_LL_PreMulSum_float": (
        "nccl", "AllReduce", "COLLNET_DIRECT", "LL", "PreMulSum", "float32"
    ),
    "ncclKernel_AllReduce_NVLS_TREE_LL_SumPostDiv_uint64_t": (
        "nccl", "AllReduce", "NVLS_TREE", "LL", "SumPostDiv", "uint64"
    ),
    "ncclKernel_ReduceScatter_NVLS_LL_Max_int64_t": ("nccl", "ReduceScatter", "NVLS", "LL", "Max", "int64"),
    "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "AllGather", "RING", "LL", "Sum", "int8"
    ),
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)": (
        "nccl", "Broadcast", "RING", "LL", "Sum", "int8"
    ),
    "ncclKernel_Reduce_RING_LL_Prod_uint32_t": ("nccl", "Reduce", "RING", "LL", "Prod", "uint32"),
    "ncclKernel_AllToAllPivot_RING_SIMPLE_Sum_int8_t": ("nccl", "AllToAll", "RING", "SIMPLE", "Sum", "int8"),
    "ncclKernel_SendRecv_RING": ("nccl", "SendRecv", "RING", None, None, None),
    # NCCL >= 2.19: ncclDevKernel_<Coll>[_<Op>_<ty>]_<ALGO>_<PROTO>
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "AllReduce", "RING", "LL", "Sum", "float32"
    ),
    "ncclDevKernel_AllReduce_Sum_bf16_TREE_LL(ncclDevKernelArgsStorage<4096ul>)": (
        "nccl", "AllReduce", "TREE", "LL", "Sum", "bfloat16"
    ),
    "ncclDevKernel_AllReduce_Sum_f16_NVLS_SIMPLE": ("nccl", "AllReduce", "NVLS", "SIMPLE", "Sum", "float16"),
    "ncclDevKernel_AllReduce_MinMax_u8_NVLS_TREE_SIMPLE": (
        "nccl", "AllReduce", "NVLS_TREE", "SIMPLE", "MinMax", "uint8"
    ),
    "ncclDevKernel_AllReduce_Sum_f64_COLLNET_DIRECT_SIMPLE": (
        "nccl", "AllReduce", "COLLNET_DIRECT", "SIMPLE", "Sum", "float64"
    ),
    "ncclDevKernel_AllReduce_PreMulSum_f8e4m3_COLLNET_CHAIN_SIMPLE": (
        "nccl", "AllReduce", "COLLNET_CHAIN", "SIMPLE", "PreMulSum", "float8_e4m3fn"
    ),
    "ncclDevKernel_AllReduce_SumPostDiv_i64_TREE_LL128": (
        "nccl", "AllReduce", "TREE", "LL128", "SumPostDiv", "int64"
    ),
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "AllGather", "RING", "LL", None, None
    ),
    "ncclDevKernel_AllGather_PAT_SIMPLE": ("nccl", "AllGather", "PAT", "SIMPLE", None, None),
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL": (
        "nccl", "ReduceScatter", "RING", "LL", "Sum", "bfloat16"
    ),
    "ncclDevKernel_ReduceScatter_Sum_f8e5m2_PAT_SIMPLE": (
        "nccl", "ReduceScatter", "PAT", "SIMPLE", "Sum", "float8_e5m2"
    ),
    "ncclDevKernel_Reduce_Sum_i32_RING_LL": ("nccl", "Reduce", "RING", "LL", "Sum", "int32"),
    "ncclDevKernel_Broadcast_RING_LL": ("nccl", "Broadcast", "RING", "LL", None, None),
    "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)": (
        "nccl", "SendRecv", None, None, None, None
    ),
    "ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)": ("nccl", None, None, None, None, None),
    "ncclDevKernel_Generic": ("nccl", None, None, None, None, None),
    # RCCL: every launch is the generic kernel, one per unroll factor
    "ncclDevKernel_Generic_1": ("rccl", None, None, None, None, None),
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)": ("rccl", None, None, None, None, None),
    # NCCL >= 2.27 symmetric-memory kernels: the symmetric algorithm is outside the algorithm list
    "ncclSymDevKernel_AllReduce_AGxLL_R_sum_bf16(ncclSymDevArgs)": (
        "nccl", "AllReduce", None, None, "Sum", "bfloat16"
    ),
    "ncclSymDevKernel_AllGather_LL(ncclSymDevArgs)": ("nccl", "AllGather", None, None, None, None),
    "ncclSymkDevKernel_ReduceScatter_RailA2A_LsaLD_avg_f8e4m3": (
        "nccl", "ReduceScatter", None, None, "Avg", "float8_e4m3fn"
    ),
    # MSCCL (in RCCL and msccl): op, type, protocol; the collective is the user's algorithm
    "mscclKernel_Sum_float_LL128_false(ncclDevComm*, mscclAlgo*, mscclWork*)": (
        "msccl", None, None, "LL128", "Sum", "float32"
    ),
    "mscclKernel_MinMax_hip_bfloat16_Simple(ncclDevComm*, mscclAlgo*, mscclWork*)": (
        "msccl", None, None, "SIMPLE", "MinMax", "bfloat16"
    ),
    # communication kernels no grammar row knows: still communication, every field null
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL_SOMETHING_NEW": ("nccl", None, None, None, None, None),
    "ncclKernel_AllReduce_RING_LL_Sum_float_extra stuff": ("nccl", None, None, None, None, None),
    "ncclSomeFutureKernel_v2": ("nccl", None, None, None, None, None),
    "rcclGenericKernel": ("rccl", None, None, None, None, None),
    "rccl_allreduce_clique_kernel": ("rccl", None, None, None, None, None),
    "mscclKernelNew": ("msccl", None, None, None, None, None),
}  # fmt: skip
"""Every naming generation, written by hand (the convention of each is in the comment above its rows)."""

NOT_COMM = (
    "volta_sgemm_128x64_nn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "triton_poi_fused_add_cos_sin_0",
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
    "Cijk_Ailk_Bjlk_SB_MT64x16x16_MI16x16x1_SN",
    "Memcpy DtoD (Device -> Device)",
    "nccl:all_reduce",  # a CPU-side annotation name, not a kernel
    "c10d::allreduce_",
    "record_param_comms",
    "",
)


class _Event(msgspec.Struct):
    name: object = None
    cat: object = None


class _Document(msgspec.Struct):
    traceEvents: list[_Event] = []  # noqa: N815 (the JSON key)


def _events(path: Path) -> list[_Event]:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    if raw.lstrip()[:1] == b"[":
        return msgspec.json.decode(raw, type=list[_Event])
    return msgspec.json.decode(raw, type=_Document).traceEvents


def _real_kernel_names() -> tuple[list[str], list[str]]:
    """Distinct names of GPU kernel events (`cat` kernel/Kernel) in the real traces: (nccl/rccl, others)."""
    names: set[str] = set()
    for path in sorted(REAL_KINETO.rglob("*.json*")):
        names.update(
            event.name
            for event in _events(path)
            if isinstance(event.name, str) and event.cat in ("kernel", "Kernel")
        )
    comm = sorted(name for name in names if re.search("nccl|rccl", name, re.IGNORECASE))
    return comm, sorted(names.difference(comm))


REAL_COMM_NAMES, REAL_OTHER_KERNEL_NAMES = _real_kernel_names() if REAL_KINETO.is_dir() else ([], [])
needs_real = requires_shared


def _decoded(name: str, extra: tuple[KernelPattern, ...] = ()) -> dict[str, object]:
    frame = decode_kernel_names(pl.Series([name]), extra)
    assert frame.height == 1
    return frame.row(0, named=True)


def _as_row(name: str, fields: Fields) -> dict[str, object]:
    library, collective, algorithm, protocol, reduce_op, dtype = fields
    return {
        "name": name,
        "is_comm": True,
        "comm_library": library,
        "kernel_collective": collective,
        "algorithm": algorithm,
        "protocol": protocol,
        "reduce_op": reduce_op,
        "kernel_dtype": dtype,
    }


@needs_real
def test_real_traces_hold_nccl_kernels() -> None:
    assert len(REAL_COMM_NAMES) >= 6
    assert len(REAL_OTHER_KERNEL_NAMES) > 100  # the scan reached the GEMM, Triton, ROCm kernels


@requires_shared
@pytest.mark.parametrize("name", REAL_COMM_NAMES)
def test_real_comm_kernel_name_is_decoded_as_expected(name: str) -> None:
    assert name in REAL_EXPECTED, f"new real communication-kernel name without an expectation: {name!r}"
    assert _decoded(name) == _as_row(name, REAL_EXPECTED[name])


@needs_real
def test_every_expected_real_name_is_still_in_the_traces() -> None:
    assert set(REAL_EXPECTED) == set(REAL_COMM_NAMES)


@needs_real
def test_real_kernels_without_nccl_in_the_name_are_not_comm() -> None:
    decoded = decode_kernel_names(pl.Series(REAL_OTHER_KERNEL_NAMES))
    assert decoded.height == len(REAL_OTHER_KERNEL_NAMES)
    assert decoded.filter(pl.col("is_comm"))["name"].to_list() == []


@pytest.mark.parametrize(("name", "fields"), list(GENERATION_EXPECTED.items()))
def test_generation_name_is_decoded_as_expected(name: str, fields: Fields) -> None:
    assert _decoded(name) == _as_row(name, fields)


@pytest.mark.parametrize("name", NOT_COMM)
def test_non_comm_kernel_is_not_comm_and_has_null_fields(name: str) -> None:
    assert _decoded(name) == dict.fromkeys(DECODED_SCHEMA) | {"name": name, "is_comm": False}


def test_decode_gives_one_row_per_distinct_name_in_first_seen_order() -> None:
    names = pl.Series(["volta_sgemm_128x64_nn", "ncclKernel_AllReduce", None, "volta_sgemm_128x64_nn"] * 3)
    decoded = decode_kernel_names(names)
    assert decoded.schema == pl.Schema(DECODED_SCHEMA)
    assert decoded["name"].to_list() == ["volta_sgemm_128x64_nn", "ncclKernel_AllReduce"]
    assert decoded["is_comm"].to_list() == [False, True]


def test_decode_of_no_names_is_an_empty_frame_with_the_schema() -> None:
    decoded = decode_kernel_names(pl.Series("kernel", [], dtype=pl.Utf8))
    assert decoded.height == 0
    assert decoded.schema == pl.Schema(DECODED_SCHEMA)


def test_decode_of_many_names_matches_one_at_a_time() -> None:
    names = [*GENERATION_EXPECTED, *REAL_EXPECTED, *NOT_COMM]
    decoded = decode_kernel_names(pl.Series(names * 4))
    assert decoded.rows(named=True) == [_decoded(name) for name in names]


def test_is_comm_expr_marks_exactly_the_comm_names() -> None:
    names = [*GENERATION_EXPECTED, *REAL_EXPECTED, *NOT_COMM, *REAL_OTHER_KERNEL_NAMES]
    expected = [name in GENERATION_EXPECTED or name in REAL_EXPECTED for name in names]
    frame = pl.DataFrame({"kernel": names})
    assert frame.select(is_comm_kernel_expr(name="kernel"))["kernel"].to_list() == expected
    assert frame.select(is_comm_kernel_expr(name=pl.col("kernel")))["kernel"].to_list() == expected


def test_with_kernel_fields_keeps_every_row_in_order() -> None:
    frame = pl.DataFrame({"name": ["ncclKernel_AllReduce", "volta_sgemm_128x64_nn"] * 2, "dur": [1, 2, 3, 4]})
    joined = with_kernel_fields(frame)
    assert joined["dur"].to_list() == [1, 2, 3, 4]
    assert joined["is_comm"].to_list() == [True, False, True, False]
    assert joined["kernel_collective"].to_list() == ["AllReduce", None, "AllReduce", None]


def test_user_pattern_adds_a_library_with_normalised_fields() -> None:
    regex = r"^deep_ep::(?P<collective>alltoall)_(?P<dtype>bf16)_kernel"
    patterns = user_patterns([f"deepep={regex}"])
    assert patterns == (KernelPattern("deepep", "user", regex),)
    expected = _as_row("deep_ep::alltoall_bf16_kernel", ("deepep", "AllToAll", None, None, None, "bfloat16"))
    assert _decoded("deep_ep::alltoall_bf16_kernel", patterns) == expected
    assert _decoded("deep_ep::alltoall_bf16_kernel")["is_comm"] is False
    is_comm = pl.DataFrame({"name": ["deep_ep::alltoall_bf16_kernel"]}).select(is_comm_kernel_expr(patterns))
    assert is_comm["name"].to_list() == [True]


def test_user_pattern_without_library_or_groups_marks_comm_with_null_fields() -> None:
    patterns = user_patterns(["my_allreduce"])
    assert patterns[0].library == "user"
    assert _decoded("void my_allreduce<float>(float*)", patterns) == _as_row(
        "void my_allreduce<float>(float*)", ("user", None, None, None, None, None)
    )


def test_user_patterns_come_before_the_defaults() -> None:
    patterns = user_patterns([r"mine=^ncclKernel_(?P<collective>AllReduce)"])
    decoded = _decoded("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", patterns)
    assert decoded["comm_library"] == "mine"
    assert (decoded["kernel_collective"], decoded["algorithm"]) == ("AllReduce", None)


def test_user_pattern_regex_may_contain_equals_after_the_library() -> None:
    assert user_patterns(["lib=a=b"]) == (KernelPattern("lib", "user", "a=b"),)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("lib=", "empty"),
        ("^mine_(?P<coll>x)", "unknown group(s) coll"),
        ("^mine_(unclosed", "not a valid regular expression"),
        (r"(?P<dtype>a)|(?P<dtype>b)", "not a valid regular expression"),
    ],
)
def test_bad_user_pattern_is_a_one_line_usage_error(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)) as raised:
        user_patterns([spec])
    assert "\n" not in str(raised.value)
    assert "--comm-pattern" in str(raised.value)


def test_default_patterns_are_valid_and_use_only_known_groups() -> None:
    for pattern in DEFAULT_PATTERNS:
        assert set(pattern.groups) <= set(FIELDS), pattern
        pl.Series(["x"]).str.contains(pattern.regex)
        assert "(?P<" not in pattern.bare_regex
    assert [pattern.generation for pattern in DEFAULT_PATTERNS[-3:]] == [
        "unrecognised NCCL",
        "unrecognised RCCL",
        "unrecognised MSCCL",
    ]


def test_kernel_pattern_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_PATTERNS[0].library = "other"  # type: ignore[misc]
