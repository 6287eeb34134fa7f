"""Kernel classes as data (docs/metrics.md, "Kernels and operators"): every device event gets one class.

A communication kernel (the kernel-name grammar, `traceview.events.kernel_table`) is `communication`; a memory
operation is classed by its direction (`MEMORY_RULES`, on the name Kineto writes: `Memcpy HtoD (Pageable ->
Device)`); every other kernel by the first row of `COMPUTE_RULES` whose regex (Rust/polars syntax, searched in
the name) matches, else `other`. Order matters: rows that name a library's attention or convolution kernels
come before the GEMM rows, whose broad words (`gemm`, `cutlass`, `xmma`) those kernels also contain.

Where the names come from (each row has example names in `tests/test_kernel_classes.py`, with provenance): the
real traces the tests read (cuBLAS `volta_sgemm_*`/`ampere_sgemm_*`/`nvjet_sm90_*`, CUTLASS, cuDNN's
`scudnn`/`xmma` convolutions and its SDPA engine, Triton, hipBLASLt/Tensile `Cijk_*` on ROCm, MTIA's
`<op>-dtype_<T>` kernels, FBGEMM's embeddings), FlashAttention 2 and 3 (`flash_fwd_kernel`,
`flash::FlashAttnFwdSm90`), PyTorch's memory-efficient attention (`fmha_cutlassF/B`), Composable Kernel
(`ck_tile::FmhaFwdKernel`, `ck::kernel_gemm_xdl_cshuffle_v3`), MIOpen (`naive_conv_*`, `igemm_fwd_gtcx_*`,
`MIOpenBatchNorm*`), Inductor's Triton kernels (`triton_poi_`, `triton_red_`, `triton_per_`, `triton_tem_`).

A name is classed once per process (`kernel_classes_of`): a run's ranks share their few hundred names.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceview.core.records import record


@record
class KernelClassRule:
    """One row: the class a kernel name is in when `regex` (Rust/polars syntax) is found in it; `source` says
    whose kernels the row names."""

    kernel_class: str
    source: str
    regex: str


COMMUNICATION = "communication"
OTHER = "other"
OVERLAP = "overlap"
"""The term of the class breakdown for time when kernels of two or more compute classes run at once."""

COMPUTE_CLASSES: tuple[str, ...] = (
    "gemm",
    "attention",
    "convolution",
    "normalization",
    "elementwise",
    "reduction",
    "embedding",
    "optimizer",
    OTHER,
)
"""The classes of compute kernels (their times add up to T_comp with the `overlap` term), in display order."""
MEMORY_CLASSES: tuple[str, ...] = (
    "memcpy_htod",
    "memcpy_dtoh",
    "memcpy_dtod",
    "memcpy_ptop",
    "memcpy",
    "memset",
)
"""Memory operations by direction (`memcpy`: a copy whose direction the name does not say)."""
CLASSES: tuple[str, ...] = (*COMPUTE_CLASSES, COMMUNICATION, *MEMORY_CLASSES)
"""Every class, in display order."""

MEMORY_RULES: tuple[KernelClassRule, ...] = (
    KernelClassRule("memcpy_htod", "Kineto memcpy, host to device", r"^Memcpy HtoD|^CopyHostToDevice"),
    KernelClassRule("memcpy_dtoh", "Kineto memcpy, device to host", r"^Memcpy DtoH|^CopyDeviceToHost"),
    KernelClassRule("memcpy_dtod", "Kineto memcpy, device to device", r"^Memcpy DtoD|^CopyDeviceToDevice"),
    KernelClassRule("memcpy_ptop", "Kineto memcpy, peer to peer", r"^Memcpy PtoP|^CopyPeerToPeer"),
    KernelClassRule("memset", "Kineto memset", r"^Memset|^FillBuffer"),
)
"""Memory operations (Kineto's `gpu_memcpy`/`gpu_memset`, roctracer's `Copy*`/`FillBuffer`); an unmatched one
is `memcpy`."""

_MTIA_OPS = (
    r"add|sub|mul|div|divide|neg|abs|sqrt|rsqrt|reciprocal|exp|log2?|sigmoid|tanh|relu|gelu|silu|clip|clamp"
    r"|where|gt|ge|lt|le|eq|ne|pow|nan_to_num|cat|copy|fill|customized_fba_mul_const"
)

COMPUTE_RULES: tuple[KernelClassRule, ...] = (
    # Inductor's prefixes say what a Triton kernel is, whatever ops its name lists
    KernelClassRule("elementwise", "Triton pointwise (Inductor triton_poi_)", r"^triton_poi_"),
    KernelClassRule(
        "normalization",
        "Triton normalization (Inductor)",
        r"^triton_(?:red|per)_\w*(?:layer|rms|batch|group)_norm",
    ),
    KernelClassRule(
        "reduction", "Triton reductions (Inductor triton_red_, triton_per_)", r"^triton_(?:red|per)_"
    ),
    KernelClassRule("attention", "Triton flex attention template", r"^triton_tem_\w*flex_attention"),
    KernelClassRule("convolution", "Triton convolution template", r"^triton_tem_\w*convolution"),
    KernelClassRule("gemm", "Triton matmul templates (Inductor triton_tem_)", r"^triton_tem_"),
    # attention before GEMM and convolution: its kernels also say gemm, wgmma, cutlass, cudnn
    KernelClassRule("attention", "FlashAttention 2 (flash_fwd_kernel, flash_bwd_*)", r"flash_(?:fwd|bwd)_"),
    KernelClassRule("attention", "FlashAttention 3 (flash::FlashAttn*Sm90)", r"FlashAttn(?:Fwd|Bwd)"),
    KernelClassRule("attention", "PyTorch memory-efficient attention", r"fmha_cutlass[FB]|AttentionKernel"),
    KernelClassRule("attention", "cuDNN SDPA engine", r"(?i)cudnn\w*sdpa|cudnn::fusion::"),
    KernelClassRule("attention", "Composable Kernel FMHA (ROCm)", r"(?i)ck_tile::Fmha|fmha_(?:fwd|bwd)"),
    KernelClassRule("attention", "attention by name", r"(?i)flash_?attn|attention|mha_(?:fwd|bwd)|sdpa"),
    # normalization before convolution: cuDNN's batch norm is `cudnn::bn_*`
    KernelClassRule(
        "normalization",
        "PyTorch, cuDNN, apex, MIOpen normalization",
        r"(?i)layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|RowwiseMoments|GammaBetaBackward"
        r"|ComputeInternalGradients|cudnn::bn_|cuApplyLayerNorm|cuComputePartGradGammaBeta"
        r"|cuComputeGradInput",
    ),
    # convolution before GEMM: implicit-GEMM convolutions say gemm
    KernelClassRule(
        "convolution",
        "cuDNN and MIOpen convolution engines",
        r"(?i)scudnn|conv(?:[^e]|$)|winograd|(?:fprop|dgrad|wgrad)_(?:implicit|optimized)|implicit_gemm"
        r"|wgrad_alg|dgrad_engine|dgrad2d|igemm_(?:fwd|bwd|wrw)",
    ),
    KernelClassRule("convolution", "cuDNN's other kernels (convolution helpers)", r"(?i)cudnn|cask_"),
    # FBGEMM's embedding backward carries its optimizer (rowwise adagrad): embedding before optimizer
    KernelClassRule(
        "embedding",
        "PyTorch embedding and indexing, FBGEMM table-batched embeddings",
        r"(?i)embedding|split_eb_|indexSelect|index_select|compute_grad_weight|sum_and_scatter"
        r"|krn_partial|partial_segment|bounds_check_indices|permute_pooled_embs|gather|scatter|indexFunc"
        r"|^(?:aten::)?index(?:_add|_copy)?[._-]",
    ),
    KernelClassRule(
        "optimizer",
        "foreach (multi_tensor_apply) and fused optimizers",
        r"(?i)multi_tensor_apply|adam|sgd|lamb(?:[^d]|$)|adagrad|rmsprop|_lion|optimizer|fused_optim",
    ),
    KernelClassRule(
        "gemm",
        "cuBLAS/cuBLASLt (sgemm, xmma, nvjet, gemv, split-K, epilogue), CUTLASS, MAGMA, Composable Kernel",
        r"(?i)gemm|gemv|matmul|cublas|cutlass|xmma|wgmma|nvjet|splitKreduce|epilogue::impl|^void scal_kernel",
    ),
    KernelClassRule("gemm", "Tensile/hipBLASLt (ROCm)", r"^Cijk_|(?i)hipblaslt|tensile"),
    KernelClassRule("gemm", "MTIA fully connected and batched matmul", r"^(?:fc|batch_matmul|matmul)-dtype_"),
    KernelClassRule(
        "reduction",
        "PyTorch reductions, softmax, losses, pooling, cub reduce and scan",
        r"(?i)reduce_kernel|reduction|softmax|nll_loss|ClassNLLCriterion|max_pool|avg_pool|adaptive_\w*pool"
        r"|Device(?:Segmented)?Reduce|DeviceScan",
    ),
    KernelClassRule(
        "reduction",
        "MTIA reductions",
        r"^(?:aten::)?(?:reduce_\w+|mean(?:\.\w+)?|sum(?:\.\w+)?|cumsum|\w+_dim_m(?:ax|in)"
        r"|vector_norm\w*)-dtype_",
    ),
    KernelClassRule(
        "elementwise",
        "PyTorch TensorIterator kernels, cat and copies",
        r"(?i)elementwise|CatArray|chunk_cat|copy_kernel|FillFunctor|where_kernel|pointwise",
    ),
    KernelClassRule("elementwise", "MTIA elementwise", rf"^(?:aten::)?(?:{_MTIA_OPS})(?:[._]\w+)*-dtype_"),
)
"""Compute kernels: the first matching row gives the class; none matching is `other`."""

CLASS_OF_SCHEMA = {"name": pl.Utf8, "kind": pl.Utf8, "is_comm": pl.Boolean, "kernel_class": pl.Utf8}
_CLASSED: dict[tuple[str, str, bool], str] = {}
CLASSED_CACHE_NAMES = 65_536
"""Classed (name, kind, communication) triples a process keeps; past it the cache starts afresh."""


def _first_rule(rules: Sequence[KernelClassRule], fallback: str) -> pl.Expr:
    found: pl.Expr = pl.lit(fallback)
    for rule in reversed(rules):
        found = (
            pl.when(pl.col("name").str.contains(rule.regex)).then(pl.lit(rule.kernel_class)).otherwise(found)
        )
    return found


def class_expr() -> pl.Expr:
    """The class of each row of a frame with `name`, `kind` (kernel | memcpy | memset) and `is_comm`."""
    return (
        pl.when(pl.col("kind") == "memset")
        .then(pl.lit("memset"))
        .when(pl.col("kind") == "memcpy")
        .then(_first_rule(MEMORY_RULES, "memcpy"))
        .when(pl.col("is_comm"))
        .then(pl.lit(COMMUNICATION))
        .otherwise(_first_rule(COMPUTE_RULES, OTHER))
    )


def kernel_classes_of(names: pl.DataFrame) -> pl.DataFrame:
    """`names` (distinct rows of `name`, `kind`, `is_comm`) with `kernel_class`, each triple classed once per
    process (the triples not yet seen together, by one query)."""
    comm = [flag is True for flag in names.get_column("is_comm").to_list()]
    columns = (names.get_column("name").to_list(), names.get_column("kind").to_list(), comm)
    keys = list(zip(*columns, strict=True))
    missing = [key for key in dict.fromkeys(keys) if key not in _CLASSED]
    if len(_CLASSED) + len(missing) > CLASSED_CACHE_NAMES:
        _CLASSED.clear()
        missing = list(dict.fromkeys(keys))
    if missing:
        frame = pl.DataFrame(missing, schema=list(CLASS_OF_SCHEMA)[:3], orient="row")
        _CLASSED.update(zip(missing, frame.select(class_expr()).to_series().to_list(), strict=True))
    found = dict(zip(CLASS_OF_SCHEMA, (*columns, [_CLASSED[key] for key in keys]), strict=True))
    return pl.DataFrame(found, schema=CLASS_OF_SCHEMA)


def with_kernel_class(events: pl.DataFrame) -> pl.DataFrame:
    """Classified device events (`traceview.events.classify.classify_gpu`: `event_class` compute | comm |
    memory) with `kernel_class`; a compute event is always in a compute class, so the classes of compute
    events cover T_comp."""
    is_comm = (pl.col("event_class") == "comm").alias("is_comm")
    distinct = events.select("name", "kind", is_comm).unique()
    classed = kernel_classes_of(distinct)
    return (
        events.with_columns(is_comm).join(classed, on=["name", "kind", "is_comm"], how="left").drop("is_comm")
    )
