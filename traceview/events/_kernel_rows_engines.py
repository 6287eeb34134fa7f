"""Kernel-name rows of the expert-parallel libraries (NCCL EP, DeepEP's elastic kernels), MSCCL++ and the
inference engines' own collectives (TensorRT-LLM, FlashInfer, aiter); `traceview.events.kernel_table` places
them in the grammar's order."""

from __future__ import annotations

from traceview.events._kernel_grammar import NS, START, TEMPLATE_OR_ARGS, KernelPattern

_DEEPEP_ELASTIC = START + r"(?i:deep_ep|dpsk::ep)::elastic::"
"""DeepEP's JIT-compiled ("elastic", 2026) kernels: `deep_ep::elastic::<name>_impl<...>`."""
_NCCL_EP = START + r"nccl_ep::"
_MSCCLPP_SUFFIX = r"(?:AllPairs?|Fullmesh\d*|Nvls\w*|Packet|RsAg\w*|Pipeline\w*|ZeroCopy)"
"""The algorithm words MSCCL++'s native collective kernels append to their collective (`allreduceNvls`,
`allgatherFullmesh2`, `allreduceRsAgZeroCopy`)."""

EP_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern(
        "nccl_ep",
        "NCCL EP low-latency dispatch/combine",
        _NCCL_EP + r"internode_ll::(?:dispatch|combine)" + TEMPLATE_OR_ARGS,
        collective="AllToAll",
    ),
    KernelPattern(
        "nccl_ep",
        "NCCL EP low-latency buffer clean (all ranks synchronise)",
        _NCCL_EP + r"internode_ll::clean\w*" + TEMPLATE_OR_ARGS,
        collective="Barrier",
    ),
    KernelPattern(
        "nccl_ep",
        "NCCL EP high-throughput JIT dispatch/combine",
        START + r"nccl_ep_jit_ht_(?:dispatch|combine)_kernel" + TEMPLATE_OR_ARGS,
        collective="AllToAll",
    ),
    KernelPattern(
        "nccl_ep",
        "NCCL EP local preparation (routing maps, scans: compute)",
        START + r"(?:nccl_ep::hybridep::\w+|nccl_ep_jit_ht_scan_kernel)" + TEMPLATE_OR_ARGS,
        is_comm=False,
    ),
    KernelPattern(
        "deepep",
        "DeepEP elastic dispatch/combine",
        _DEEPEP_ELASTIC + r"(?:hybrid_)?(?:dispatch|combine)_impl" + TEMPLATE_OR_ARGS,
        collective="AllToAll",
    ),
    KernelPattern(
        "deepep", "DeepEP elastic barrier", _DEEPEP_ELASTIC + r"barrier_impl" + TEMPLATE_OR_ARGS, "Barrier"
    ),
    KernelPattern(
        "deepep",
        "DeepEP elastic pipeline send",
        _DEEPEP_ELASTIC + r"pp_send_impl" + TEMPLATE_OR_ARGS,
        "Send",
    ),
    KernelPattern(
        "deepep",
        "DeepEP elastic pipeline recv",
        _DEEPEP_ELASTIC + r"pp_recv_impl" + TEMPLATE_OR_ARGS,
        "Recv",
    ),
    KernelPattern(
        "deepep",
        "DeepEP elastic local epilogues (copy, reduce: compute)",
        _DEEPEP_ELASTIC + r"(?:dispatch_copy|combine_reduce)_epilogue_impl" + TEMPLATE_OR_ARGS,
        is_comm=False,
    ),
    KernelPattern(
        "deepep", "DeepEP elastic engram fetch (one-sided reads)", _DEEPEP_ELASTIC + r"engram_\w+_impl"
    ),
    KernelPattern(
        "deepep",
        "DeepEP low-latency mask buffer (local: compute)",
        START + r"(?i:deep_ep|dpsk::ep)::(?:\w+::)*(?:query|update|clean)_mask_buffer" + TEMPLATE_OR_ARGS,
        is_comm=False,
    ),
)
"""Expert-parallel libraries: NCCL EP (NCCL's contributed library) and DeepEP's generations."""

MSCCLPP_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern(
        "mscclpp",
        "MSCCL++ native collectives",
        START
        + NS
        + r"(?P<collective>allreduce|allgather|reducescatter|alltoall)"
        + rf"(?:{_MSCCLPP_SUFFIX}|[0-9]+)"
        + TEMPLATE_OR_ARGS,
    ),
    KernelPattern(
        "mscclpp",
        "MSCCL++ capability probe (compute)",
        START + NS + r"fp8NvlsSupportProbeKernel" + TEMPLATE_OR_ARGS,
        is_comm=False,
    ),
    KernelPattern(
        "mscclpp", "MSCCL++ executor", START + r"mscclpp::(?:\w+::)*executionKernel" + TEMPLATE_OR_ARGS
    ),
)
"""MSCCL++ (microsoft/mscclpp): native collectives (`mscclpp::collective::allreduceNvls`), the kernels of its
NCCL-API shim (`allreduce7`, `allgather6`) and the executor of its JSON plans (collective unknown)."""

_ENGINE_NS = r"(?:flashinfer|tensorrt_llm|vllm|sglang|aiter)::(?:\w+::)*"
_AITER = START + r"aiter::(?:\w+::)*"
INFERENCE_ENGINE_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern(
        "custom_ar",
        "aiter local kernels beside its collectives (rmsnorm loads: compute)",
        _AITER + r"local_device_load_\w+" + TEMPLATE_OR_ARGS,
        is_comm=False,
    ),
    KernelPattern(
        "custom_ar",
        "aiter custom all-reduce (fused, quick reduce, gfx1250)",
        _AITER + r"(?:\w*allreduce\w*|ar_gfx\w+|ar_ll_gfx\w+|cross_device_reduce_\w*)" + TEMPLATE_OR_ARGS,
        collective="AllReduce",
    ),
    KernelPattern(
        "custom_ar",
        "aiter custom all-gather",
        _AITER + r"(?:allgather_\w+|ag_gfx\w+)" + TEMPLATE_OR_ARGS,
        collective="AllGather",
    ),
    KernelPattern(
        "custom_ar",
        "aiter custom reduce-scatter",
        _AITER + r"(?:reduce_scatter_\w+|rs_gfx\w+)" + TEMPLATE_OR_ARGS,
        collective="ReduceScatter",
    ),
    KernelPattern(
        "custom_ar",
        "aiter peer benchmarks and synchronisation (collective unknown)",
        _AITER + r"(?:p2p_bandwidth_test_kernel|\w+_sync_latency)" + TEMPLATE_OR_ARGS,
    ),
    KernelPattern(
        "custom_ar",
        "TensorRT-LLM/FlashInfer local kernels in communication namespaces (norms, indices: compute)",
        START
        + _ENGINE_NS
        + r"(?:computeSendRecv\w*|inplaceSendRecv\w*|lamport_initialize_kernel|rms_norm_kernel"
        r"|rms_pre_post_norm_kernel|rmsNormLamport|moeLocalGatherDevice|moeA2ASanitizeExpertIdsKernel"
        r"|computeCountAndIndiceDevice|computeCumsumDevice|memsetExpertIdsDevice|moveIndiceDevice)"
        + TEMPLATE_OR_ARGS,
        is_comm=False,
    ),
    KernelPattern(
        "custom_ar",
        "TensorRT-LLM/FlashInfer fused all-reduce (+norm), MNNVL, MoE finalize, PCIe IPC all-reduce",
        START
        + NS
        + r"(?:(?:lamport_style_)?one_shot_(?:prenorm_)?all_reduce_norm_kernel|oneshotAllreduceFusionKernel"
        r"|twoshotAllreduceKernel|moe(?:finalize|reduce)_allreduce_fusion_kernel\w*"
        r"|ipc_\w*rsag\w*_kernel|push_oneshot_param_kernel|ipc_tp2_remote_push_kernel)" + TEMPLATE_OR_ARGS,
        collective="AllReduce",
    ),
    KernelPattern(
        "custom_ar",
        "FlashInfer mixed communication (allreduce, allgather, reducescatter kernels)",
        START
        + r"flashinfer::mixed_comm::(?P<collective>allreduce|allgather|reducescatter)_kernel"
        + TEMPLATE_OR_ARGS,
    ),
    KernelPattern(
        "custom_ar",
        "FlashInfer mixed communication (fused: collective unknown)",
        START + r"flashinfer::mixed_comm::fused_\w+_kernel" + TEMPLATE_OR_ARGS,
    ),
    KernelPattern(
        "custom_ar",
        "TensorRT-LLM/FlashInfer all-to-all (MoE, Ulysses, Helix)",
        START + NS + r"(?:moeAllToAllKernel|ulysses_a2a_kernel|moeA2A(?:Prepare)?(?:Combine|Dispatch)Kernel"
        r"|helixAllToAllKernel|allToAllMetadataDevice)" + TEMPLATE_OR_ARGS,
        collective="AllToAll",
    ),
)
"""Inference engines' own collectives (TensorRT-LLM, FlashInfer; vLLM/SGLang/aiter below): `custom_ar`, the id
of every custom collective of an inference engine (its all-to-alls included)."""
