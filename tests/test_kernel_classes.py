"""The kernel-class table and the kernel keys: every row has example names with where they come from, every
example lands in the class written here by hand, and every row is the first to match one of its examples.

Provenance: `real:<folder>` names are in `../shared/data/real/kineto/<folder>` (read by a plain scan of the
JSON in `test_every_real_example_is_in_its_trace`); the others are names published by the library's own
sources or profiles (repository and file named beside them).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from tests.shared_data import REAL_KINETO, requires_shared
from traceview.events.kernel_classes import (
    CLASSES,
    COMMUNICATION,
    COMPUTE_CLASSES,
    COMPUTE_RULES,
    MEMORY_RULES,
    OTHER,
    kernel_classes_of,
)
from traceview.events.kernel_keys import kernel_keys

# name -> (class, provenance)
EXAMPLES: dict[str, tuple[str, str]] = {
    # Inductor's Triton kernels
    "triton_poi_fused_add_cos_sin_0": ("elementwise", "real:hta_triton"),
    "triton_per_fused_native_layer_norm_0": (
        "normalization",
        "pytorch/pytorch torch/_inductor codegen names",
    ),
    "triton_red_fused_argmax_1": ("reduction", "pytorch/pytorch Inductor (max-autotune profiles)"),
    "triton_per_fused_sum_3": ("reduction", "pytorch/pytorch Inductor persistent reduction"),
    "triton_tem_fused_flex_attention_0": ("attention", "pytorch/pytorch flex_attention template"),
    "triton_tem_fused_convolution_2": ("convolution", "pytorch/pytorch Inductor conv template"),
    "triton_tem_fused_mm_0": ("gemm", "pytorch/pytorch Inductor mm template"),
    # attention
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true>"
    "(Flash_fwd_params)": ("attention", "pytorch/pytorch aten/src/ATen/native/transformers/cuda/flash_attn"),
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8>, true>"
    "(Flash_bwd_params)": (
        "attention",
        "Dao-AILab/flash-attention csrc/flash_attn/src/flash_bwd_launch_template.h",
    ),
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
    "CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, 128, "
    "cutlass::bfloat16_t, "
    "float, cutlass::arch::Sm90> > > >(int)": ("attention", "Dao-AILab/flash-attention hopper/ (FA3)"),
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
    "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)": (
        "attention",
        "pytorch/pytorch mem_eff_attention kernels",
    ),
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0": (
        "attention",
        "real:h200_pt211_nccl_fsdp1",
    ),
    "void ck_tile::kentry<ck_tile::gfx942_t, 2, "
    "ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync>>": (
        "attention",
        "ROCm/composable_kernel example/ck_tile/01_fmha",
    ),
    "void xformers::cutlass_attention_forward_sm80_bf16(int)": ("attention", "facebookresearch/xformers"),
    # normalization
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, "
    "float const*, float const*, float const*, float*, float*, float*)": (
        "normalization",
        "real:h200_pt211_nccl_fsdp1",
    ),
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)": (
        "normalization",
        "real:kineto_pt19_resnet50_profiler_api",
    ),
    "MIOpenBatchNormFwdTrainSpatial": (
        "normalization",
        "ROCm/MIOpen src/kernels/MIOpenBatchNormFwdTrainSpatial.cl",
    ),
    "native_layer_norm-dtype_Float": ("normalization", "real:hta_mtia_single_rank"),
    # convolution
    "volta_scudnn_128x64_relu_interior_nn_v1": ("convolution", "real:kineto_pt19_resnet50_profiler_api"),
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_stage5_"
    "warpsize2x2x1_g1_"
    "tensor16x8x8_execute_kernel_cudnn_infer": ("convolution", "real:hta_nccl_data"),
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true, true>(int, int, int)": (
        "convolution",
        "real:kineto_pt19_resnet50_profiler_api",
    ),
    "void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*)": (
        "convolution",
        "real:hta_ns_resolution",
    ),
    "igemm_fwd_gtcx_nhwc_fp32_bx0_bt128x128x8": ("convolution", "ROCm/MIOpen iGEMM (igemm_fwd_gtcx)"),
    "naive_conv_fwd_nchw_fp32": (
        "convolution",
        "ROCm/MIOpen src/kernels/gpu_reference_kernel/naive_conv.cpp",
    ),
    "cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)": (
        "convolution",
        "real:kineto_pt19_resnet50_profiler_api",
    ),
    # embedding and indexing
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, int, unsigned int, 1, 1, -2, true>"
    "(at::cuda::detail::TensorInfo<float, unsigned int>)": ("embedding", "real:hta_trace_diff_control"),
    "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>"
    "(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)": (
        "embedding",
        "real:hta_trace_diff_control",
    ),
    "split_eb_bwd_rowwise_adagrad-dtype_Half": ("embedding", "real:hta_mtia_single_rank"),
    "aten::index.Tensor_out-dtype_Double-extraKey_2": ("embedding", "real:hta_mtia_single_rank"),
    # optimizer
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, "
    "float, float, adamMode_t, float, int, int>(int, int volatile*)": (
        "optimizer",
        "real:hta_trace_diff_test",
    ),
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>>": (
        "optimizer",
        "real:h200_pt211_nccl_fsdp1",
    ),
    # gemm
    "volta_sgemm_128x64_nn": ("gemm", "real:hta_df_index_resolver"),
    "ampere_sgemm_32x128_tn": ("gemm", "real:hta_trace_diff_control"),
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": ("gemm", "real:h200_pt211_nccl_fsdp1"),
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
    "kernel"
    "__5x_cublas": ("gemm", "cuBLAS 12 on H100 (nsys profiles)"),
    "sm100_xmma_gemm_bf16f16_bf16f16_bf16f32_tn_n_tilesize256x128x64_stage4_warpsize2x2x1": (
        "gemm",
        "cuBLAS on B200 (published profiles)",
    ),
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1>"
    "(cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1::Params)": ("gemm", "real:hta_16rank_job_rank0"),
    "void splitKreduce_kernel<float, float, float>(cublasSplitKParams<float>, float const*, float const*)": (
        "gemm",
        "real:kineto_pt19_resnet50_profiler_api",
    ),
    "void gemv2N_kernel<int, int, float, float, float, float, 128, 1, 4, 4, 1, false>(int)": (
        "gemm",
        "real:hta_gpu_user_annotation",
    ),
    "void "
    "ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>>": (
        "gemm",
        "ROCm/composable_kernel include/ck/tensor_operation/gpu/grid/gridwise_gemm_xdl_cshuffle_v3.hpp",
    ),
    "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1": (
        "gemm",
        "real:hta_amd_mi250",
    ),
    "fc-dtype_Float": ("gemm", "real:hta_mtia_single_rank"),
    "batch_matmul-dtype_Float": ("gemm", "real:hta_mtia_single_rank"),
    # reduction
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, "
    "float, 4>)": ("reduction", "real:hta_amd_mi250"),
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*, float "
    "const*, "
    "int)": ("reduction", "real:h200_pt211_nccl_fsdp1"),
    "void cub::DeviceScanKernel<cub::AgentScanPolicy<128, 15, int>>(int)": (
        "reduction",
        "real:hta_16rank_job_rank0",
    ),
    "reduce_sum-dtype_Float": ("reduction", "real:hta_mtia_single_rank"),
    "cumsum-dtype_Int": ("reduction", "real:hta_mtia_single_rank"),
    # elementwise
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)": (
        "elementwise",
        "real:hta_amd_mi250",
    ),
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(float*)": (
        "elementwise",
        "real:hta_16rank_job_rank0",
    ),
    "add-dtype_Float": ("elementwise", "real:hta_mtia_single_rank"),
    "aten::mul.out-dtype_Float": ("elementwise", "real:hta_mtia_single_rank"),
    "sigmoid_backward-dtype_Float": ("elementwise", "real:hta_mtia_single_rank"),
    # other
    "triton__0d1d2d3d": (OTHER, "real:hta_16rank_job_rank0"),
    "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800>(int*)": (
        OTHER,
        "real:hta_trace_diff_control",
    ),
    "dma_request": (OTHER, "real:hta_mtia_single_rank"),
}
"""Compute kernel names and the class each is in, decided by hand from what the kernel does."""

MEMORY_EXAMPLES: dict[tuple[str, str], str] = {
    ("Memcpy HtoD (Pageable -> Device)", "memcpy"): "memcpy_htod",
    ("Memcpy HtoD (Host -> Device)", "memcpy"): "memcpy_htod",
    ("Memcpy DtoH (Device -> Pinned)", "memcpy"): "memcpy_dtoh",
    ("Memcpy DtoD (Device -> Device)", "memcpy"): "memcpy_dtod",
    ("Memcpy PtoP (Device -> Device)", "memcpy"): "memcpy_ptop",
    ("CopyHostToDevice", "memcpy"): "memcpy_htod",
    ("Memcpy Unknown", "memcpy"): "memcpy",
    ("Memset (Device)", "memset"): "memset",
}
"""(name, kind) of memory operations (Kineto's names; roctracer's `Copy*`) and their class."""


def _classes(rows: list[tuple[str, str, bool]]) -> dict[tuple[str, str], str]:
    frame = pl.DataFrame(rows, schema=["name", "kind", "is_comm"], orient="row")
    classed = kernel_classes_of(frame)
    return {(r["name"], r["kind"]): r["kernel_class"] for r in classed.iter_rows(named=True)}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_compute_kernel_is_in_its_class(name: str) -> None:
    assert _classes([(name, "kernel", False)])[(name, "kernel")] == EXAMPLES[name][0]


@pytest.mark.parametrize(("key", "expected"), list(MEMORY_EXAMPLES.items()))
def test_memory_operation_is_classed_by_direction(key: tuple[str, str], expected: str) -> None:
    assert _classes([(*key, False)])[key] == expected


def test_communication_comes_from_the_grammar_whatever_the_name_says() -> None:
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    assert _classes([(name, "kernel", True)])[(name, "kernel")] == COMMUNICATION
    assert (
        _classes([("volta_sgemm_128x64_nn", "kernel", True)])[("volta_sgemm_128x64_nn", "kernel")]
        == COMMUNICATION
    )


def _first_rule(name: str) -> int:
    frame = pl.DataFrame({"name": [name]})
    hits = [
        i
        for i, rule in enumerate(COMPUTE_RULES)
        if frame.select(pl.col("name").str.contains(rule.regex)).item()
    ]
    return hits[0] if hits else -1


def test_every_row_has_an_example_that_reaches_it_first() -> None:
    reached = {_first_rule(name) for name in EXAMPLES}
    missing = [f"{i}: {rule.source}" for i, rule in enumerate(COMPUTE_RULES) if i not in reached]
    assert not missing, missing
    memory = set(MEMORY_EXAMPLES.values())
    assert {rule.kernel_class for rule in MEMORY_RULES} <= memory


def test_every_class_of_the_table_is_a_known_class() -> None:
    assert {rule.kernel_class for rule in COMPUTE_RULES} <= set(COMPUTE_CLASSES)
    assert {rule.kernel_class for rule in MEMORY_RULES} <= set(CLASSES)
    assert {cls for cls, _ in EXAMPLES.values()} <= set(COMPUTE_CLASSES)


def _real_kernel_names(folder: str) -> set[str]:
    names: set[str] = set()
    for path in (REAL_KINETO / folder).iterdir():
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
            document = json.load(handle)
        events = document.get("traceEvents", []) if isinstance(document, dict) else document
        names |= {e["name"] for e in events if isinstance(e, dict) and "name" in e}
    return names


@requires_shared
def test_every_real_example_is_in_its_trace() -> None:
    by_folder: dict[str, list[str]] = {}
    for name, (_, source) in EXAMPLES.items():
        if source.startswith("real:"):
            by_folder.setdefault(source.removeprefix("real:"), []).append(name)
    for folder, names in by_folder.items():
        present = _real_kernel_names(folder)
        for name in names:
            assert any(p == name or p.startswith(name.split("(")[0].split("<")[0]) for p in present), (
                folder,
                name,
            )


def test_each_name_kind_is_classed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceview.events import kernel_classes

    monkeypatch.setattr(kernel_classes, "_CLASSED", {})
    calls: list[int] = []
    original = kernel_classes.class_expr

    def counted() -> pl.Expr:
        calls.append(1)
        return original()

    monkeypatch.setattr(kernel_classes, "class_expr", counted)
    rows = [("volta_sgemm_128x64_nn", "kernel", False), ("relu-dtype_Float", "kernel", False)]
    kernel_classes_of(pl.DataFrame(rows, schema=["name", "kind", "is_comm"], orient="row"))
    kernel_classes_of(pl.DataFrame(rows[:1], schema=["name", "kind", "is_comm"], orient="row"))
    assert len(calls) == 1


KEYS: dict[str, str] = {
    "volta_sgemm_128x64_nn": "volta_sgemm_#_nn",
    "volta_sgemm_64x64_nn": "volta_sgemm_#_nn",
    "ampere_sgemm_32x32_sliced1x4_nt": "ampere_sgemm_#_sliced#_nt",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": "nvjet_sm90_tst_#_#_#_h_bz_coopA_NNT",
    "triton_poi_fused_add_cos_sin_0": "triton_poi_fused_add_cos_sin",
    "triton_poi_fused_add_cos_sin_12": "triton_poi_fused_add_cos_sin",
    "triton__0d1d2d3d": "triton_",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1>"
    "(cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1::Params)": (
        "cutlass::Kernel[cutlass_#_tensorop_s1688gemm_#_#_tn_align#]"
    ),
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)": (
        "at::native::vectorized_elementwise_kernel[CUDAFunctor_add]"
    ),
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >"
    "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)": (
        "at::native::vectorized_elementwise_kernel[CUDAFunctor_add]"
    ),
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, "
    "float, 4>)": "at::native::reduce_kernel[MeanOps]",
    "void "
    "at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2> >(int)": "at::native::unrolled_elementwise_kernel[direct_copy_kernel_cuda]",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "ncclKernel_AllReduce_RING_LL_Sum_float",
    "Memcpy DtoD (Device -> Device)": "Memcpy DtoD (Device -> Device)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1": (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize#_warpgroupsize#"
    ),
}
"""Kernel names and their keys, written by hand from the folding rules (docs/metrics.md)."""


@pytest.mark.parametrize("name", list(KEYS))
def test_kernel_key_folds_what_varies(name: str) -> None:
    assert kernel_keys(pl.Series([name])).item(0, "key") == KEYS[name]


def test_autotune_variants_and_generated_suffixes_pair_across_runs() -> None:
    keys = kernel_keys(pl.Series(list(KEYS)))
    grouped = keys.group_by("key").agg(pl.len())
    assert grouped.filter(pl.col("key") == "volta_sgemm_#_nn").item(0, "len") == 2
    assert grouped.filter(pl.col("key") == "triton_poi_fused_add_cos_sin").item(0, "len") == 2


def test_the_table_file_is_data(tmp_path: Path) -> None:
    """Rows are data: each has a class, a source and a valid regex (polars syntax)."""
    for rule in (*COMPUTE_RULES, *MEMORY_RULES):
        assert rule.kernel_class
        assert rule.source
        pl.Series([""]).str.contains(rule.regex)  # raises on an invalid pattern
