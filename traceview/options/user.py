"""What a user states for one analysis: `UserOptions`, the one definition of every shared option.

The command line makes one typed option of each field (`traceview.cli.base`: the flag, the help, the bounds
are the field's `Flag`), and the Python API takes the same fields as keyword arguments (`traceview.analyze`);
a value of the wrong kind or outside its bounds is a `UsageError` naming the option, whichever way it came.
`traceview.options.run.build_options` turns them, with the run's `run.json`, into the `RunOptions` the
analysis runs with.
"""

from __future__ import annotations

import math
from dataclasses import field, fields
from pathlib import Path
from typing import Any, Literal

from traceview.core.errors import UsageError
from traceview.core.records import record

MAX_WORKERS, MAX_RANKS_PER_HOST = 4096, 2**16
"""Upper bounds of the integer options: past them a value is a typo, refused as a usage error (exit 2)."""

Kind = Literal["text", "texts", "paths", "count", "number", "quantity", "choice"]


@record
class Flag:
    """How a field is written on the command line and checked: its flag, help, kind and bounds."""

    flag: str
    help: str
    kind: Kind
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


def _option(flag: str, help: str, kind: Kind, default: Any = None, **bounds: Any) -> Any:
    """A dataclass field carrying its `Flag`."""
    return field(default=default, metadata={"flag": Flag(flag, help, kind, **bounds)})


@record(kw_only=True)
class UserOptions:
    """Every option a user may state, each with the default a plain `traceview report RUN` uses."""

    comm_patterns: tuple[str, ...] = _option(
        "--comm-pattern",
        "Extra regex (or LIBRARY=REGEX) naming communication kernels; repeatable.",
        "texts",
        (),
    )
    compute_patterns: tuple[str, ...] = _option(
        "--compute-pattern",
        "Regex naming kernels that are compute, not communication; repeatable.",
        "texts",
        (),
    )
    nccl_logs: tuple[Path, ...] = _option(
        "--nccl-log",
        "An NCCL_DEBUG=INFO log (or a folder of logs) to join to the traces; repeatable (logs in the run "
        "folder are found too).",
        "paths",
        (),
    )
    inspector: tuple[str, ...] = _option(
        "--inspector",
        "NCCL Inspector JSON output to join to the traces: a file, a folder or a glob; repeatable.",
        "texts",
        (),
    )
    flight_recorder: tuple[Path, ...] = _option(
        "--flight-recorder",
        "A PyTorch Flight Recorder dump (or a folder of dumps) of the same job: adds the hang forensics; "
        "repeatable.",
        "paths",
        (),
    )
    run_root: str | None = _option(
        "--run-root",
        "A folder whose files a run.json may name besides those of its own folder (docs/run-manifest.md).",
        "text",
    )
    ranks_per_host: int | None = _option(
        "--ranks-per-host",
        "Ranks per host for clock alignment when traces name no host.",
        "count",
        low=1,
        high=MAX_RANKS_PER_HOST,
    )
    virtual_stages: int = _option(
        "--virtual-stages",
        "Model chunks per pipeline stage (V of the bubble theory).",
        "count",
        1,
        low=1,
        high=1024,
    )
    workers: int | None = _option(
        "--workers",
        "Processes that read and summarise ranks (default: the cores this process may use).",
        "count",
        low=1,
        high=MAX_WORKERS,
    )
    executor: str = _option(
        "--executor",
        "Where ranks are read: 'local' (a process pool) or 'ray' (pip install 'traceview[ray]').",
        "choice",
        "local",
        choices=("local", "ray"),
    )
    ray_address: str | None = _option(
        "--ray-address", "Ray cluster to run on (default: $RAY_ADDRESS, else a local Ray).", "text"
    )
    max_trace_bytes: int | None = _option(
        "--max-trace-bytes",
        "Refuse (skip, among several) a trace whose JSON text, after gunzip, passes this many bytes.",
        "count",
        low=1,
        high=2**50,
    )
    params: float | None = _option(
        "--params", "Model parameters P (default: gradient all-reduce elements per step).", "number"
    )
    local_batch: float | None = _option(
        "--local-batch", "Local batch b per worker: examples, or tokens for a transformer.", "number"
    )
    peak_flops: str | float | None = _option(
        "--peak-flops",
        "Peak dense FLOP/s per GPU, e.g. 312T or 312e12 (default: the hardware table).",
        "quantity",
    )
    efficiency: float | None = _option(
        "--efficiency", "Share of peak FLOP/s sustained: R = peak x efficiency (default 0.5).", "number"
    )
    bandwidth: str | float | None = _option(
        "--bandwidth", "B per GPU, one direction, bytes/s: INTRA[,INTER], e.g. 300G,25G.", "quantity"
    )
    host_bandwidth: str | float | None = _option(
        "--host-bandwidth",
        "B of collectives that run on the host (gloo, MPI) inside a host, bytes/s: loopback or shared "
        "memory, e.g. 5G (across hosts they use the NIC).",
        "quantity",
    )
    alpha: str | float | None = _option(
        "--alpha", "Link latency per step in microseconds: INTRA[,INTER], e.g. 1,5 (0 allowed).", "quantity"
    )
    nic: str | None = _option(
        "--nic", "NIC of groups spanning nodes, e.g. ib_ndr, roce_400 (default ib_hdr).", "text"
    )
    gpus_per_node: int | None = _option(
        "--gpus-per-node",
        "GPUs per node: which groups span nodes (default: what the run shows, else 8).",
        "count",
        low=1,
        high=MAX_RANKS_PER_HOST,
    )
    nics_per_node: int | None = _option(
        "--nics-per-node",
        "NICs per node carrying a collective across nodes in rail-aligned rings (default: one per GPU).",
        "count",
        low=1,
        high=MAX_RANKS_PER_HOST,
    )
    dtype: str | None = _option(
        "--dtype",
        "Compute dtype for the peak FLOP/s: fp32, tf32, bf16, fp16, fp8 (default: the gradients').",
        "text",
    )
    dims: str | None = _option(
        "--dims",
        "The parallelism layout, innermost axis first, e.g. 'tp=8,pp=4,dp=*' (default: read from the run).",
        "text",
    )
    shape: str | None = _option(
        "--shape",
        "The model's shape for the expected volumes, e.g. "
        "'hidden=4096,seq=2048,layers=32,micro_batches=8,top_k=2'.",
        "text",
    )
    links: str = _option(
        "--links",
        "B and alpha of the prediction: 'table' (the hardware table) or 'measured' (fitted on this run).",
        "choice",
        "table",
        choices=("table", "measured"),
    )
    levers: tuple[str, ...] = _option(
        "--lever",
        "A lever to replay (docs/metrics.md, 'Replay'): as_recorded, no_straggler, comm:xN, compute:xN, "
        "comm_model, perfect_overlap, host_free, ranks:K; repeatable (default: all of them, ranks at twice "
        "the world).",
        "texts",
        (),
    )
    run_label: str | None = _option(
        "--label",
        "A label for this run (a commit, a job id), kept in the JSON summary: trend shows it (default: "
        "run.json's commit, else its job).",
        "text",
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            given = spec.default if value is None else value  # None: not stated, the default holds
            object.__setattr__(self, spec.name, checked(spec.metadata["flag"], given))


def flag_of(name: str) -> Flag:
    """The `Flag` of the `UserOptions` field `name`."""
    found: Flag = next(f for f in fields(UserOptions) if f.name == name).metadata["flag"]
    return found


def _bounded(flag: Flag, value: float) -> float:
    low, high = flag.low, flag.high
    if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
        span = f"in [{low:g}, {high:g}]" if low is not None and high is not None else "finite"
        raise UsageError(f"{flag.flag} must be {span}, got {value!r}")
    return value


def _count(flag: Flag, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{flag.flag} takes a whole number, got {value!r}")
    return int(_bounded(flag, value))


def _number(flag: Flag, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{flag.flag} takes a number, got {value!r}")
    return float(value)


def _text(flag: Flag, value: Any) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{flag.flag} takes text, got {value!r}")
    return value


def _texts(flag: Flag, value: Any) -> tuple[Any, ...]:
    items = (value,) if isinstance(value, str | Path) else value
    if not isinstance(items, list | tuple):
        raise UsageError(f"{flag.flag} takes a list, got {value!r}")
    kind = (str, Path) if flag.kind == "paths" else (str,)
    bad = [item for item in items if not isinstance(item, kind)]
    if bad:
        raise UsageError(f"{flag.flag} takes {'paths' if flag.kind == 'paths' else 'text'}, got {bad[0]!r}")
    return tuple(Path(item) for item in items) if flag.kind == "paths" else tuple(items)


def _choice(flag: Flag, value: Any) -> str:
    if value not in flag.choices:
        raise UsageError(f"{flag.flag} takes one of {', '.join(flag.choices)}, got {value!r}")
    return str(value)


def _quantity(flag: Flag, value: Any) -> str | float:
    return _text(flag, value) if isinstance(value, str) else _number(flag, value)


_CHECKS = {
    "text": _text,
    "texts": _texts,
    "paths": _texts,
    "count": _count,
    "number": _number,
    "quantity": _quantity,
    "choice": _choice,
}


def checked(flag: Flag, value: Any) -> Any:
    """`value` of the option `flag` in its canonical form (a tuple for a list, a Path for a path); a value of
    the wrong kind is a `UsageError` naming the option. None stays None (the option is not stated)."""
    if value is None:
        return None
    return _CHECKS[flag.kind](flag, value)
