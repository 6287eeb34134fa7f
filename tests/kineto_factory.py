"""A small factory of Kineto trace documents for tests: events in the PyTorch 2.x schema, written plain or
gzip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

Event = dict[str, Any]


def kernel(
    name: str, ts: float, dur: float, correlation: int | None = None, stream: int = 7, **args: Any
) -> Event:
    """A GPU kernel; extra keyword args become event args (use the trace's own key names via `args=`)."""
    event_args: dict[str, Any] = {"device": 0, "stream": stream, **args.pop("args", {})}
    if correlation is not None:
        event_args["correlation"] = correlation
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": event_args,
    }


def memcpy(ts: float, dur: float, correlation: int | None = None, stream: int = 7) -> Event:
    """A device memory copy."""
    event = kernel("Memcpy HtoD (Pageable -> Device)", ts, dur, correlation, stream)
    event["cat"] = "gpu_memcpy"
    return event


def cuda_sync(name: str, ts: float, dur: float, correlation: int, stream: int = 7, **waits: int) -> Event:
    """A CUDA sync event as the profiler writes it with `enable_cuda_sync_events` (`Stream Sync`, `Event
    Sync`, `Context Sync` with stream -1, `Stream Wait Event`); `waits` are its `wait_on_stream`,
    `wait_on_cuda_event_record_corr_id` and `wait_on_cuda_event_id` arguments."""
    args = {"cuda_sync_kind": name, "stream": stream, "correlation": correlation, "device": 0, **waits}
    return {
        "ph": "X",
        "cat": "cuda_sync",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {**args, "context": 1},
    }


def launch(
    ts: float, correlation: int, dur: float = 2.0, tid: int = 1, name: str = "cudaLaunchKernel"
) -> Event:
    """The runtime call that launched device work `correlation`."""
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": correlation},
    }


def cpu_op(
    name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", args: dict[str, Any] | None = None
) -> Event:
    """A host operator or annotation."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args or {},
    }


def step(number: int, ts: float, dur: float, on_gpu: bool = False) -> Event:
    """A `ProfilerStep#N` annotation on the CPU (default) or the GPU."""
    if on_gpu:
        return {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": f"ProfilerStep#{number}",
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": dur,
        }
    return cpu_op(f"ProfilerStep#{number}", ts, dur, cat="user_annotation")


def document(
    events: list[Event], rank: int | None = 0, world_size: int = 1, base_ns: int | None = None, **top: Any
) -> dict[str, Any]:
    """A whole trace document."""
    info: dict[str, Any] = {"backend": "nccl", "world_size": world_size}
    if rank is not None:
        info["rank"] = rank
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
        "distributedInfo": info,
        **top,
        "traceEvents": events,
    }
    if base_ns is not None:
        doc["baseTimeNanoseconds"] = base_ns
    return doc


def write(doc: Any, path: Path, compress: bool | None = None) -> Path:
    """Write `doc` as JSON; gzip when `compress` or the name ends in .gz."""
    data = json.dumps(doc, indent=1).encode()
    if compress if compress is not None else path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path
