"""Writes one rank's simulated timeline as a PyTorch 2.x Kineto trace (`torch.profiler`'s export schema).

The layout follows real PyTorch 2.x / NCCL 2.17 output (`hta_nccl_data` in the real-trace folder): a header
with `schemaVersion`, `deviceProperties` and `distributedInfo`, then `traceEvents`, then `traceName`,
`displayTimeUnit` and `baseTimeNanoseconds` last, with every `ts` in microseconds relative to it. Events are
encoded with msgspec and streamed a step at a time, so a long trace never sits in memory.

This module only formats: every time it receives is already decided (integer nanoseconds on the rank's own
clock, relative to `baseTimeNanoseconds`) by `tests.simulate.scenario`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import msgspec
from isal import igzip  # several times faster than the standard gzip, same format

Event = dict[str, Any]

COMPUTE_STREAM: Final = 7
COMM_STREAM: Final = 20
BASE_TIME_NS: Final = 1_700_000_000_000_000_000
TRUNCATE_RANKS: Final = 30  # PyTorch's kTruncatLength for "Process Group Ranks" / split sizes
_CBID_LAUNCH: Final = 211  # CUPTI callback id of cudaLaunchKernel
_CBID_SYNC: Final = 131  # cudaStreamSynchronize
_ENCODER: Final = msgspec.json.Encoder()

# By the simulator's collective kind: (Collective name PyTorch writes, its `nccl:*` annotation, NCCL kernel
# collective, whether the kernel reduces and so carries the dtype in its name).
COLLECTIVE_NAMES: Final[dict[str, tuple[str, str, str, bool]]] = {
    "AllReduce": ("allreduce", "nccl:all_reduce", "AllReduce", True),
    "AllGather": ("_allgather_base", "nccl:_all_gather_base", "AllGather", False),
    "ReduceScatter": ("_reduce_scatter_base", "nccl:_reduce_scatter_base", "ReduceScatter", True),
    "AllToAll": ("all_to_all", "nccl:all_to_all", "SendRecv", False),
    "Broadcast": ("broadcast", "nccl:broadcast", "Broadcast", False),
    "Send": ("send", "nccl:send", "SendRecv", False),
    "Recv": ("recv", "nccl:recv", "SendRecv", False),
}
# PyTorch dtype name -> (element bytes, NCCL <= 2.18 type name, NCCL >= 2.19 type name)
DTYPES: Final[dict[str, tuple[int, str, str]]] = {
    "Float": (4, "float", "f32"),
    "BFloat16": (2, "__nv_bfloat16", "bf16"),
    "Half": (2, "half", "f16"),
    "Double": (8, "double", "f64"),
    "Byte": (1, "uint8_t", "u8"),
}
# The launch-configuration args CUPTI adds to kernels (values as in the real NCCL 2.17 trace / a GEMM).
_COMM_KERNEL_ARGS: Final[Event] = {
    "registers per thread": 96,
    "shared memory": 87568,
    "blocks per SM": 0.074074,
    "warps per SM": 1.259259,
    "grid": (8, 1, 1),
    "block": (544, 1, 1),
    "est. achieved occupancy %": 0,
}
_COMPUTE_KERNEL_ARGS: Final[Event] = {
    "registers per thread": 128,
    "shared memory": 49152,
    "blocks per SM": 2.37037,
    "warps per SM": 18.962963,
    "grid": (256, 1, 1),
    "block": (256, 1, 1),
    "est. achieved occupancy %": 30,
}
_KERNEL_SIGNATURE: Final = "(ncclDevComm*, unsigned long, ncclWork*)"
_COMPUTE_KERNELS: Final = (
    ("aten::mm", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"),
    (
        "aten::mm",
        "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16",
    ),
    (
        "aten::add_",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "at::detail::Array<char*, 3>)",
    ),
)


def nccl_kernel_name(collective: str, dtype: str, nccl_version: str, protocol: str = "LL") -> str:
    """The NCCL kernel name a collective gets, in the grammar of `nccl_version` (2.19 renamed the kernels),
    with NCCL's `protocol` (LL, LL128, SIMPLE)."""
    _, _, kernel_coll, reduces = COLLECTIVE_NAMES[collective]
    _, old_type, new_type = DTYPES[dtype]
    major_minor = tuple(int(part) for part in nccl_version.split(".")[:2])
    if major_minor >= (2, 19):
        if kernel_coll == "SendRecv":
            return f"ncclDevKernel_SendRecv{_KERNEL_SIGNATURE}"
        middle = f"_Sum_{new_type}" if reduces else ""
        return f"ncclDevKernel_{kernel_coll}{middle}_RING_{protocol}{_KERNEL_SIGNATURE}"
    if kernel_coll == "SendRecv":
        return f"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t{_KERNEL_SIGNATURE}"
    type_name = old_type if reduces else "int8_t"
    return f"ncclKernel_{kernel_coll}_RING_{protocol}_Sum_{type_name}{_KERNEL_SIGNATURE}"


def ranks_string(ranks: tuple[int, ...]) -> str:
    """`Process Group Ranks` as PyTorch writes it: `"[0, 1]"`, truncated after 30 ranks with `", ..."`."""
    if len(ranks) > TRUNCATE_RANKS:
        return "[" + ", ".join(str(rank) for rank in ranks[:TRUNCATE_RANKS]) + ", ...]"
    return "[" + ", ".join(str(rank) for rank in ranks) + "]"


def _us(ns: int) -> float:
    return ns / 1000


@dataclass(frozen=True)
class RankHeader:
    """What the document header of one rank says: identity, devices and process groups."""

    rank: int
    world_size: int
    local_device: int
    devices_per_host: int
    device_name: str
    nccl_version: str
    pg_config: tuple[tuple[str, str, tuple[int, ...]], ...]  # (pg_name, pg_desc, ranks)
    pid: int
    hostname: str | None  # a top-level "hostname" key; real traces have none
    record_shapes: bool


@dataclass(frozen=True)
class CommCall:
    """One collective call as this rank recorded it (`record_param_comms` and its NCCL kernel)."""

    collective: str
    in_nelems: int
    out_nelems: int
    dtype: str
    pg_name: str
    pg_desc: str
    pg_ranks: tuple[int, ...]
    in_split: tuple[int, ...] = ()
    out_split: tuple[int, ...] = ()
    protocol: str = "LL"


def _device_properties(header: RankHeader) -> list[Event]:
    return [
        {
            "id": device,
            "name": header.device_name,
            "totalGlobalMem": 85_031_714_816,
            "computeMajor": 8,
            "computeMinor": 0,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536,
            "warpSize": 32,
            "sharedMemPerBlock": 49152,
            "numSms": 108,
            "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 166912,
            "sharedMemPerMultiprocessor": 167936,
        }
        for device in range(header.devices_per_host)
    ]


def _distributed_info(header: RankHeader) -> Event:
    configs = [
        {
            "pg_name": name,
            "pg_desc": desc,
            "backend_config": "cuda:nccl",
            "pg_size": len(ranks),
            "ranks": list(ranks),
        }
        for name, desc, ranks in header.pg_config
    ]
    return {
        "backend": "nccl",
        "rank": header.rank,
        "world_size": header.world_size,
        "pg_count": len(configs),
        "pg_config": configs,
        "nccl_version": header.nccl_version,
    }


def _metadata_events(header: RankHeader, start_ns: int) -> list[Event]:
    ts = _us(start_ns)
    events: list[Event] = []
    processes = [(header.pid, "CPU", header.pid)]
    processes += [(device, f"GPU {device}", 16_777_216 + device) for device in range(header.devices_per_host)]
    for pid, label, sort_index in processes:
        for name, args in (
            ("process_name", {"name": "python3.10"}),
            ("process_labels", {"labels": label}),
            ("process_sort_index", {"sort_index": sort_index}),
        ):
            events.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": 0, "args": args})
    threads = [(header.local_device, stream, f"stream {stream} ") for stream in (COMPUTE_STREAM, COMM_STREAM)]
    threads.append((header.pid, header.pid, f"thread {header.pid} (pt_main_thread)"))
    for pid, tid, label in threads:
        events.append(
            {"name": "thread_name", "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": {"name": label}}
        )
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "ts": ts,
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    return events


def _open(path: Path, compress: bool) -> tuple[IO[bytes], IO[bytes]]:
    """The stream to write and the file under it; gzip output has no name or time in its header, so a seed
    always gives the same bytes."""
    raw = path.open("wb")
    if not compress:
        return raw, raw
    stream: IO[bytes] = igzip.IGzipFile(filename="", mode="wb", compresslevel=1, fileobj=raw, mtime=0)  # type: ignore[no-untyped-call,assignment]
    return stream, raw


class RankWriter:
    """Streams one rank's trace file: `begin`, then events (buffered and encoded a step at a time), `close`.

    Times given to it are true integer nanoseconds relative to `baseTimeNanoseconds`; it adds the rank's
    clock offset and writes Kineto's microsecond floats. It numbers `External id` and `correlation` itself.
    """

    def __init__(self, path: Path, header: RankHeader, compress: bool, clock_offset_ns: int = 0) -> None:
        self.path = path
        self._clock_offset_ns = clock_offset_ns
        self._header = header
        self._stream, self._raw = _open(path, compress)
        self._pid = header.pid
        self._device = header.local_device
        self._external_id = 0
        self._correlation = 1000
        self._events: list[Event] = []
        self._written_any = False
        self._comm_static: dict[CommCall, tuple[Event, Event, str, str]] = {}

    def begin(self, start_ns: int) -> None:
        """Write the document header, open `traceEvents` and add the process/thread metadata events."""
        parts = [
            b'{\n  "schemaVersion": 1,\n  "deviceProperties": ',
            _ENCODER.encode(_device_properties(self._header)),
        ]
        if self._header.record_shapes:
            parts.append(b',\n  "record_shapes": 1')
        if self._header.hostname is not None:
            parts += [b',\n  "hostname": ', _ENCODER.encode(self._header.hostname)]
        parts += [b',\n  "distributedInfo": ', _ENCODER.encode(_distributed_info(self._header))]
        parts.append(b',\n  "traceEvents": [\n')
        self._stream.write(b"".join(parts))
        self._events.extend(_metadata_events(self._header, start_ns + self._clock_offset_ns))

    def _ts(self, ns: int) -> float:
        """A true time as this rank's clock writes it (us relative to baseTimeNanoseconds)."""
        return (ns + self._clock_offset_ns) / 1000

    def _launch(self, external_id: int, start_ns: int, end_ns: int, name: str, cbid: int) -> int:
        self._correlation += 1
        correlation = self._correlation
        self._events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": self._pid,
                "tid": self._pid,
                "ts": (start_ns + self._clock_offset_ns) / 1000,
                "dur": (end_ns - start_ns) / 1000,
                "args": {"External id": external_id, "cbid": cbid, "correlation": correlation},
            }
        )
        return correlation

    def _kernel(
        self, name: str, stream: int, span: tuple[int, int, int], ids: tuple[int, int], extra: Event | None
    ) -> None:
        """A GPU kernel (span = launch start, kernel start, kernel end; ids = External id, correlation) and
        its `ac2g` flow pair."""
        launch_ns, start_ns, end_ns = span
        external_id, correlation = ids
        args: Event = {
            "External id": external_id,
            "queued": 0,
            "device": self._device,
            "context": 1,
            "stream": stream,
            "correlation": correlation,
        }
        if extra:
            args.update(_COMM_KERNEL_ARGS)
            args.update(extra)
        else:
            args.update(_COMPUTE_KERNEL_ARGS)
        offset = self._clock_offset_ns
        ts = (start_ns + offset) / 1000
        self._events += [
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": self._device,
                "tid": stream,
                "ts": ts,
                "dur": (end_ns - start_ns) / 1000,
                "args": args,
            },
            {
                "ph": "s",
                "id": correlation,
                "pid": self._pid,
                "tid": self._pid,
                "ts": (launch_ns + offset) / 1000,
                "cat": "ac2g",
                "name": "ac2g",
            },
            {
                "ph": "f",
                "id": correlation,
                "pid": self._device,
                "tid": stream,
                "ts": ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            },
        ]

    def _cpu(self, cat: str, name: str, start_ns: int, end_ns: int, args: Event) -> None:
        self._events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self._pid,
                "tid": self._pid,
                "ts": (start_ns + self._clock_offset_ns) / 1000,
                "dur": (end_ns - start_ns) / 1000,
                "args": args,
            }
        )

    def compute_kernel(
        self, cpu: tuple[int, int, int, int], gpu: tuple[int, int], variant: int, flops: int | None
    ) -> None:
        """An aten op (cpu = op start, launch start, launch end, op end) launching a kernel (gpu: start,
        end)."""
        op_start, launch_start, launch_end, op_end = cpu
        op_name, kernel_name = _COMPUTE_KERNELS[variant % len(_COMPUTE_KERNELS)]
        self._external_id += 1
        args: Event = {"External id": self._external_id, "Record function id": self._external_id}
        if flops is not None and op_name == "aten::mm":
            args["flops"] = flops
        self._cpu("cpu_op", op_name, op_start, op_end, args)
        correlation = self._launch(
            self._external_id, launch_start, launch_end, "cudaLaunchKernel", _CBID_LAUNCH
        )
        span = (launch_start, gpu[0], gpu[1])
        self._kernel(kernel_name, COMPUTE_STREAM, span, (self._external_id, correlation), None)

    def comm_call(
        self, call: CommCall, seq: int | None, cpu: tuple[int, int, int, int], gpu: tuple[int, int]
    ) -> None:
        """`record_param_comms` (with its `nccl:*` annotation and launch) and the NCCL kernel it launches;
        `seq`, when not None, is written as `Seq`."""
        op_start, launch_start, launch_end, op_end = cpu
        self._external_id += 2
        call_id, annotation_id = self._external_id - 1, self._external_id
        static = self._comm_static.get(call)
        if static is None:
            static = self._comm_static[call] = _comm_static(call, self._header.nccl_version)
        comm_args, rank_args, kernel_name, annotation = static
        if seq is not None:
            comm_args = {**comm_args, "Seq": seq}
        op_args: Event = {"External id": call_id, "Record function id": call_id, **comm_args, **rank_args}
        self._cpu("cpu_op", "record_param_comms", op_start, op_end, op_args)
        annotation_args: Event = {"External id": annotation_id, "Record function id": annotation_id}
        annotation_start = op_start + (launch_start - op_start) // 2
        self._cpu("user_annotation", annotation, annotation_start, launch_end, annotation_args)
        correlation = self._launch(call_id, launch_start, launch_end, "cudaLaunchKernel", _CBID_LAUNCH)
        span = (launch_start, gpu[0], gpu[1])
        self._kernel(kernel_name, COMM_STREAM, span, (call_id, correlation), comm_args)

    def sync(self, start_ns: int, end_ns: int) -> None:
        """The host blocking on the GPU (`cudaStreamSynchronize`)."""
        self._external_id += 1
        self._launch(self._external_id, start_ns, end_ns, "cudaStreamSynchronize", _CBID_SYNC)

    def step(self, number: int, cpu: tuple[int, int], gpu: tuple[int, int] | None) -> None:
        """`ProfilerStep#N` on the CPU (`user_annotation`) and, when it ran kernels, on the GPU."""
        self._external_id += 1
        args: Event = {"External id": self._external_id, "Record function id": self._external_id}
        self._cpu("user_annotation", f"ProfilerStep#{number}", cpu[0], cpu[1], args)
        if gpu is not None:
            self._events.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": f"ProfilerStep#{number}",
                    "pid": self._device,
                    "tid": COMPUTE_STREAM,
                    "ts": self._ts(gpu[0]),
                    "dur": _us(gpu[1] - gpu[0]),
                    "args": {"External id": self._external_id},
                }
            )

    def flush(self) -> None:
        """Encode and write the buffered events."""
        if not self._events:
            return
        encoded = _ENCODER.encode(self._events)[1:-1]
        self._stream.write(b",\n" + encoded if self._written_any else encoded)
        self._written_any = True
        self._events.clear()

    def close(self, start_ns: int, end_ns: int) -> None:
        """Add the profiler's own span events, close `traceEvents`, write the footer and close the file."""
        self._events += [
            {
                "ph": "X",
                "cat": "Trace",
                "ts": self._ts(start_ns),
                "dur": _us(end_ns - start_ns),
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            },
            {
                "name": "process_sort_index",
                "ph": "M",
                "ts": self._ts(start_ns),
                "pid": "Spans",
                "tid": 0,
                "args": {"sort_index": 536870912},
            },
            {
                "name": "Iteration Start: PyTorch Profiler",
                "ph": "i",
                "s": "g",
                "pid": "Traces",
                "tid": "Trace PyTorch Profiler",
                "ts": self._ts(start_ns),
            },
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": self._ts(end_ns)},
        ]
        self.flush()
        footer = {"traceName": self.path.name, "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_TIME_NS}
        self._stream.write(b"\n  ],\n  " + _ENCODER.encode(footer)[1:] + b"\n")
        self._stream.close()
        self._raw.close()


def _comm_static(call: CommCall, nccl_version: str) -> tuple[Event, Event, str, str]:
    """What all calls of one kind write alike: comm args, op-only args, kernel and annotation names."""
    comm_args: Event = {
        "Collective name": COLLECTIVE_NAMES[call.collective][0],
        "In msg nelems": call.in_nelems,
        "Out msg nelems": call.out_nelems,
        "Group size": len(call.pg_ranks),
        "dtype": call.dtype,
        "In split size": "[" + ", ".join(map(str, call.in_split)) + "]",
        "Out split size": "[" + ", ".join(map(str, call.out_split)) + "]",
        "Process Group Name": call.pg_name,
        "Process Group Description": call.pg_desc,
        "Process Group Ranks": ranks_string(call.pg_ranks),
    }
    rank_args: Event = {"Global rank start": call.pg_ranks[0], "Global rank stride": _stride(call.pg_ranks)}
    kernel_name = nccl_kernel_name(call.collective, call.dtype, nccl_version, call.protocol)
    return comm_args, rank_args, kernel_name, COLLECTIVE_NAMES[call.collective][1]


def _stride(ranks: tuple[int, ...]) -> int:
    if len(ranks) < 2:
        return 1
    stride = ranks[1] - ranks[0]
    regular = all(later - earlier == stride for earlier, later in itertools.pairwise(ranks))
    return stride if regular else -1
