"""The kernel-name grammar as data: one `KernelPattern` row per naming generation of every communication
library.

`traceview.events.kernel_names` applies the rows (first match wins) and documents the fields; this module only
holds them (the row type and the regex fragments the rows share are in `traceview.events._kernel_grammar`, the
rows of the expert-parallel libraries, MSCCL++ and the inference engines in
`traceview.events._kernel_rows_engines`). A row is a regex (Rust/polars syntax) searched in the kernel name,
the library it marks, and optionally the collective the name implies when it carries no `collective` group
(DeepEP's dispatch is an all-to-all). A row with `is_comm=False` says a name is compute although a later row
would take it for communication.

Order: definite rows of every library, then the catch-all rows of NCCL/RCCL/MSCCL (communication, fields
unknown), then the `suspected` rows: names that look like communication (`allreduce`, `all_gather`,
`alltoall`, `nvshmem`, `multimem`, ...) and that no definite row knows. They are classified as communication
with null fields and listed (`traceview.collectives.tables.suspected_comm_kernels`), never silently counted as
compute; the user overrides them with `--compute-pattern`.

Where the names come from (every row has example names in `tests/test_kernel_names.py`, with provenance):
NCCL's generated device sources (`src/device/generate.py`, `src/device/symmetric/`), RCCL, PyTorch's symmetric
memory (`CUDASymmetricMemoryOps.cu`, `intra_node_comm`), DeepEP (`csrc/kernels/intranode.cu`, `internode.cu`,
`internode_ll.cu`), NVSHMEM's on-stream collectives, vLLM/SGLang's and TensorRT-LLM/FlashInfer's custom
all-reduce, and Transformer Engine's userbuffers.
"""

from __future__ import annotations

from traceview.events._kernel_grammar import END, NS, START, TEMPLATE_OR_ARGS, KernelPattern
from traceview.events._kernel_rows_engines import EP_PATTERNS, INFERENCE_ENGINE_PATTERNS, MSCCLPP_PATTERNS

_ALGOS = "NVLS_TREE|NVLS|RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|PAT"
_PROTOS = "LL128|LL|SIMPLE"

_RCCL_COLLS = (
    "AlltoAllGda|AlltoAllvGda|AllToAllGda|AllToAllvGda|AlltoAllPivot|AllToAllPivot|AllReduceWithBias"
)

NCCL_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern("nccl", "NCCL >= 2.19 generic", START + r"ncclDevKernel_Generic" + END),
    KernelPattern(
        "rccl",
        "RCCL specialized (algorithm and protocol before the reduction and type)",
        START + r"ncclDevKernel_(?P<collective>[A-Za-z]+)"
        rf"_(?P<algorithm>{_ALGOS})_(?P<protocol>{_PROTOS})"
        r"(?:_(?P<reduce_op>[A-Za-z]+)_(?P<dtype>[a-z][a-z0-9]*))?\w*_Specialized" + END,
    ),
    KernelPattern(
        "rccl",
        "RCCL-only collectives (GDA and pivot all-to-all, all-reduce with bias)",
        START + rf"ncclDevKernel_(?P<collective>{_RCCL_COLLS})\w*" + END,
    ),
    KernelPattern("rccl", "RCCL generic (unroll)", START + r"ncclDevKernel_Generic_[0-9]+" + END),
    KernelPattern("rccl", "RCCL colltrace generic", START + r"ncclDevKernelDebug_Generic(?:_[0-9]+)?" + END),
    KernelPattern(
        "nccl",
        "NCCL >= 2.19",
        START + r"ncclDevKernel_(?P<collective>[A-Za-z]+)"
        r"(?:_(?P<reduce_op>[A-Za-z]+)_(?P<dtype>[a-z][a-z0-9]*))?"
        rf"(?:_(?P<specialization>(?:{_ALGOS})_(?:{_PROTOS})))?" + END,
    ),  # since 2.19 the (algorithm, protocol) of a name is the kernel it was compiled for, not what ran
    KernelPattern(
        "nccl",
        "NCCL >= 2.27 symmetric",
        START + r"ncclSymk?DevKernel_(?P<collective>[A-Za-z]+)(?:_[A-Za-z0-9]+)*?"
        r"(?:_(?P<reduce_op>sum|prod|minmax|min|max|avg|premulsum|sumpostdiv)_(?P<dtype>[a-z][a-z0-9]*))?"
        + END,
    ),
    KernelPattern(
        "nccl",
        "NCCL 2.8-2.18",
        START + r"ncclKernel_(?P<collective>[A-Za-z]+)"
        rf"(?:_(?P<algorithm>{_ALGOS}))?(?:_(?P<protocol>{_PROTOS}))?"
        r"(?:_(?P<reduce_op>[A-Za-z]+)_(?P<dtype>\w+))?" + END,
    ),
    KernelPattern(
        "nccl",
        "NCCL <= 2.7",
        START + r"nccl(?P<collective>AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll)"
        r"(?P<algorithm>Ring|Tree|CollNet)?(?P<protocol>LL128|LL)?"
        r"Kernel_(?P<reduce_op>[a-z]+)_(?P<dtype>[a-z][a-z0-9]*)" + END,
    ),
    KernelPattern(
        "nccl",
        "NCCLX ctran",
        START + r"ncclKernel(?:Device)?(?P<collective>AllReduce|AllGather|ReduceScatter|AllToAllv|AllToAll"
        r"|Broadcast|SendRecv|Send|Recv)\w*" + TEMPLATE_OR_ARGS,
    ),
    KernelPattern(
        "msccl",
        "MSCCL",
        START + r"mscclKernel_(?P<reduce_op>[A-Za-z]+)_(?P<dtype>\w+?)_(?P<protocol>LL128|LL|Simple|SIMPLE)"
        r"(?:_\w+)?" + END,
    ),
)
"""NCCL, RCCL and MSCCL naming generations (see `traceview.events.kernel_names` for the conventions)."""

_SYMM_MEM = (
    START + NS + r"_?(?:multimem_(?:one_shot_)?|one_shot_|two_shot_)"
    r"(?P<collective>all_reduce|all_gather|reduce_scatter)_kernel(?:_inplace)?" + TEMPLATE_OR_ARGS
)  # CUDA kernels of torch.ops.symm_mem, and the Triton ones of its examples (`_multimem_all_gather_kernel`)
_DEEPEP_NS = (
    r"(?i:deep_ep|dpsk::ep)::(?:\w+::)?(?i:intranode|internode|internode_ll\w*|low_latency|elastic)::"
)
"""DeepEP's kernel namespaces (`deep_ep::` upstream, `dpsk::ep::` in DeepSeek's own builds; intranode,
internode, internode_ll and its versions, elastic), any case."""
_DEEPEP_A2A = (
    START
    + _DEEPEP_NS
    + r"(?i:(?:cached_)?notify(?:_dispatch|_combine)?|dispatch|combine)(?i:_ll|_pcie)?"
    + TEMPLATE_OR_ARGS
)  # dispatch, combine and their notify / cached_notify rounds (token counts exchanged all-to-all)
_DEEPEP_SYNC = START + _DEEPEP_NS + r"(?i:barrier|clean_low_latency_buffer|clean\w*)" + TEMPLATE_OR_ARGS
_NVSHMEM = r"(?:nvshmemi?_|nvshmemx_|rocshmem_)?"

_SYMM_EXT = r"c10d::(?:nvshmem|rocshmem|nccl)_extension::"
"""PyTorch symmetric memory's device-library extensions (`c10d/symm_mem/*_extension.cu`)."""

OTHER_LIBRARY_PATTERNS: tuple[KernelPattern, ...] = (
    *EP_PATTERNS,
    *MSCCLPP_PATTERNS,
    KernelPattern("symm_mem", "PyTorch symmetric memory", _SYMM_MEM),
    KernelPattern(
        "symm_mem",
        "PyTorch symmetric memory all-to-all-v (NVSHMEM/rocSHMEM extension: splits exchange, data exchange)",
        START + _SYMM_EXT + r"(?:allToAllV|exchangeSplitAndOffset)\w*" + TEMPLATE_OR_ARGS,
        collective="AllToAll",
    ),
    KernelPattern("symm_mem", "PyTorch symmetric memory extension (other)", START + _SYMM_EXT + r"\w+"),
    KernelPattern(
        "symm_mem",
        "PyTorch IntraNodeComm",
        START + r"c10d::intra_node_comm::(?:oneShot|twoShot|hybridCube)AllReduceKernel" + TEMPLATE_OR_ARGS,
        collective="AllReduce",
    ),
    KernelPattern(
        "deepep",
        "DeepEP layout (local counting, no communication)",
        START + r"(?i:deep_ep|dpsk::ep)::(?:\w+::)*(?i:get_dispatch_layout)" + TEMPLATE_OR_ARGS,
        is_comm=False,
    ),
    KernelPattern(
        "deepep", "DeepEP dispatch/combine/notify/cached_notify", _DEEPEP_A2A, collective="AllToAll"
    ),
    KernelPattern(
        "deepep", "DeepEP barrier/clean (all ranks synchronise)", _DEEPEP_SYNC, collective="Barrier"
    ),
    KernelPattern(
        "custom_ar",
        "vLLM/SGLang/aiter custom all-reduce",
        START + NS + r"cross_device_reduce_\w*" + TEMPLATE_OR_ARGS,
        collective="AllReduce",
    ),
    KernelPattern(
        "custom_ar",
        "TensorRT-LLM/FlashInfer custom all-reduce",
        START
        + NS
        + r"(?:(?:one|two)[Ss]hotAll[Rr]educeKernel|allreduce_fusion_kernel_(?:one|two)shot\w*)"
        + TEMPLATE_OR_ARGS,
        collective="AllReduce",
    ),
    *INFERENCE_ENGINE_PATTERNS,
    KernelPattern(
        "userbuffers",
        "Transformer Engine userbuffers all-gather",
        START + NS + r"userbuffers_\w*_ag(?:_\w*)?" + TEMPLATE_OR_ARGS,
        collective="AllGather",
    ),
    KernelPattern(
        "userbuffers",
        "Transformer Engine userbuffers reduce-scatter",
        START + NS + r"userbuffers_\w*_rs(?:_\w*)?" + TEMPLATE_OR_ARGS,
        collective="ReduceScatter",
    ),
    KernelPattern(
        "userbuffers",
        "Transformer Engine userbuffers send/recv",
        START + NS + r"kuserbuffers_(?:push|pull)(?:send|recv)\w*" + TEMPLATE_OR_ARGS,
        collective="SendRecv",
    ),
    KernelPattern(
        "userbuffers",
        "Transformer Engine userbuffers all-reduce (sum in place, no _ag/_rs)",
        START + NS + r"userbuffers_\w*_sum_inplace_gpu_(?:mc|rr|rw)" + TEMPLATE_OR_ARGS,
        collective="AllReduce",
    ),
    KernelPattern(
        "userbuffers",
        "Transformer Engine userbuffers (other)",
        START + NS + r"k?userbuffers_\w+" + TEMPLATE_OR_ARGS,
    ),
    KernelPattern(
        "nvshmem",
        "NVSHMEM on-stream all-to-all",
        r"(?i)" + START + _NVSHMEM + r"alltoall\w*_on_stream_kernel",
        collective="AllToAll",
    ),
    KernelPattern(
        "nvshmem",
        "NVSHMEM on-stream barrier",
        r"(?i)" + START + _NVSHMEM + r"(?:barrier|sync)(?:_all)?_on_stream_kernel",
        collective="Barrier",
    ),
    KernelPattern(
        "nvshmem",
        "NVSHMEM on-stream broadcast",
        r"(?i)" + START + _NVSHMEM + r"(?:broadcast|bcast)\w*_on_stream_kernel",
        collective="Broadcast",
    ),
    KernelPattern(
        "nvshmem",
        "NVSHMEM on-stream fcollect",
        r"(?i)" + START + _NVSHMEM + r"fcollect\w*_on_stream_kernel",
        collective="AllGather",
    ),
    KernelPattern(
        "nvshmem",
        "NVSHMEM on-stream reduce-scatter",
        r"(?i)" + START + _NVSHMEM + r"reducescatter\w*_on_stream_kernel",
        collective="ReduceScatter",
    ),
    KernelPattern(
        "nvshmem",
        "NVSHMEM on-stream reduction (to all PEs)",
        r"(?i)" + START + _NVSHMEM + r"(?:\w*reduce\w*|rdxn)_on_stream_kernel",
        collective="AllReduce",
    ),
    KernelPattern("nvshmem", "NVSHMEM other", r"(?i)" + START + NS + r"(?:nvshmem|rocshmem)\w*"),
)
"""Libraries other than NCCL whose kernels do communication (fields: the collective the name says)."""

CATCH_ALL_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern("nccl", "unrecognised NCCL", r"(?i)" + START + r"nccl\w*kernel"),
    KernelPattern("rccl", "unrecognised RCCL", r"(?i)" + START + r"rccl"),
    KernelPattern("msccl", "unrecognised MSCCL", r"(?i)" + START + r"msccl\w*kernel"),
)
"""Names of a known library that no generation row decodes: communication, every field null."""

HOST_COLLECTIVE_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern(
        "fsdp", "FSDP2 host op (copy-in/out, chunk-cat: compute)", r"^(?i:fsdp)::\w+$", is_comm=False
    ),
    KernelPattern("gloo", "gloo op (host timeline)", r"^(?P<collective>gloo:\w+)$"),
    KernelPattern("mpi", "MPI op (host timeline)", r"^(?P<collective>mpi:\w+)$"),
    KernelPattern("c10d", "record_param_comms (host timeline)", r"^record_param_comms:(?P<collective>\w+)$"),
    KernelPattern("c10d", "c10d collective op (host timeline)", r"^(?P<collective>c10d::\w+)$"),
)
"""Host collective ops, which are the communication rows of a rank analysed on its host timeline (FSDP2's
`fsdp::all_gather_copy_in` and its kin copy tensors: compute, although their names say all_gather)
(`traceview.events.host_timeline`; a `record_param_comms` row is named after its collective there, since
the bare name also marks GPU-side annotations); they never name a device kernel."""
HOST_LIBRARIES = ("gloo", "mpi", "c10d")
"""Libraries of `HOST_COLLECTIVE_PATTERNS`: their rows run on a host, not a device."""

COMM_LIBRARIES: tuple[str, ...] = (
    "nccl",
    "nccl_ep",
    "rccl",
    "deepep",
    "symm_mem",
    "userbuffers",
    "custom_ar",
    "mscclpp",
    "nvshmem",
    "msccl",
)
"""The `comm_library` ids of device communication kernels, agreed across analyses (the dimensions and MoE
sections key on them): NCCL, NCCL EP, RCCL, DeepEP (v1, legacy, elastic), PyTorch symmetric memory (and its
IntraNodeComm), Transformer Engine userbuffers, custom all-reduce (vLLM, SGLang, aiter, TensorRT-LLM,
FlashInfer), MSCCL++, NVSHMEM, and the older MSCCL (RCCL's `mscclKernel_*`, a library of its own)."""

SUSPECTED_LIBRARY = "suspected"
SUSPECT_WORDS: tuple[str, ...] = (
    r"all_?reduce",
    r"all_?gather",
    r"reduce_?scatter",
    r"all_?to_?all",
    r"all2all",
    r"a2a",
    r"send_?recv",
    r"p2p",
    r"ep::\w*(?:dispatch|combine)",
    r"(?:dispatch|combine)_(?:ll|low_latency)",
    r"low_latency_(?:dispatch|combine)",
)
"""Words (any case) that mark a name as looking like communication where they start a word: after the start,
a non-letter or `::` (`small_gather` is not `all_gather`)."""

SUSPECT_CAMEL_WORDS: tuple[str, ...] = (
    "All[Rr]educe",
    "All[Gg]ather",
    "Reduce[Ss]catter",
    "All[Tt]o[Aa]ll",
    "Send[Rr]ecv",
)
"""CamelCase words, matched case-sensitively anywhere (`oneShotAllReduce`)."""

SUSPECT_ANYWHERE: tuple[str, ...] = ("nvshmem", "rocshmem", "multimem", "mscclpp")
"""Words (any case) that mark a name as looking like communication wherever they stand."""

_SUSPECT_REGEX = (
    r"(?:^|[^A-Za-z])(?i:" + "|".join(SUSPECT_WORDS) + ")"
    "|(?:" + "|".join(SUSPECT_CAMEL_WORDS) + ")"
    "|(?i:" + "|".join(SUSPECT_ANYWHERE) + ")"
)

SUSPECTED_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern(SUSPECTED_LIBRARY, "suspected communication", _SUSPECT_REGEX),
)
"""Last row: a name that looks like communication and that no definite row knows."""

DEFAULT_PATTERNS: tuple[KernelPattern, ...] = (
    *NCCL_PATTERNS,
    *OTHER_LIBRARY_PATTERNS,
    *HOST_COLLECTIVE_PATTERNS,
    *CATCH_ALL_PATTERNS,
    *SUSPECTED_PATTERNS,
)
"""The grammar: specific generations first, catch-all rows (communication, fields unknown), then suspects."""
