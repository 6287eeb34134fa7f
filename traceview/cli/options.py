"""The command line's shared options and the analysis options they build (used by `traceview.cli.main`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traceview.core.errors import UsageError
from traceview.core.sanitize import printable

if TYPE_CHECKING:  # imported where used, so that `--help` loads no analysis
    from traceview.reduce.analysis import AnalysisOptions

MAX_WORKERS, MAX_RANKS_PER_HOST = 4096, 2**16
"""Upper bounds of the integer options: past them a value is a typo, refused as a usage error (exit 2)."""

RunArg = Annotated[str, typer.Argument(help="A trace file, a folder of per-rank traces, or a glob.")]
RunsArg = Annotated[
    list[str],
    typer.Argument(
        metavar="RUN...",
        help="A trace file, a folder of per-rank traces, or a glob; several files (an unquoted glob the shell "
        "expanded) are read as one run.",
    ),
]


def run_spec(runs: Sequence[str]) -> str | list[str]:
    """The run the positional arguments name: one spec, or the list of files a shell expanded."""
    return runs[0] if len(runs) == 1 else list(runs)


CommPatternOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--comm-pattern", help="Extra regex (or LIBRARY=REGEX) naming communication kernels; repeatable."
    ),
]
ComputePatternOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--compute-pattern", help="Regex naming kernels that are compute, not communication; repeatable."
    ),
]
FailOnOpt = Annotated[
    list[str] | None,
    typer.Option("--fail-on", help="Exit 1 when a figure crosses it, e.g. 'exposed_gamma>0.5'; repeatable."),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers", min=1, max=MAX_WORKERS, help="Processes that read and summarise ranks (default: CPUs)."
    ),
]
ExecutorOpt = Annotated[
    str,
    typer.Option(
        "--executor",
        help="Where ranks are read: 'local' (a process pool) or 'ray' (pip install 'traceview[ray]').",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option("--ray-address", help="Ray cluster to run on (default: $RAY_ADDRESS, else a local Ray)."),
]
MaxTraceBytesOpt = Annotated[
    int | None,
    typer.Option(
        "--max-trace-bytes",
        min=1,
        max=2**50,
        help="Refuse (skip, among several) a trace whose JSON text, after gunzip, passes this many bytes.",
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar on stderr.")]


VirtualStagesOpt = Annotated[
    int,
    typer.Option(
        "--virtual-stages", min=1, max=1024, help="Model chunks per pipeline stage (V of the bubble theory)."
    ),
]


def options_from(
    comm_pattern: list[str] | None, virtual_stages: int = 1, compute_pattern: list[str] | None = None
) -> AnalysisOptions:
    """Analysis options from the command line; a malformed pattern is a `UsageError` before any file is read."""
    from traceview.events.kernel_names import user_patterns
    from traceview.reduce.analysis import AnalysisOptions

    user_patterns(tuple(comm_pattern or ()), tuple(compute_pattern or ()))
    return AnalysisOptions(
        comm_patterns=tuple(comm_pattern or ()),
        compute_patterns=tuple(compute_pattern or ()),
        virtual_stages=virtual_stages,
    )


ParamsOpt = Annotated[
    float | None,
    typer.Option("--params", help="Model parameters P (default: gradient all-reduce elements per step)."),
]
LocalBatchOpt = Annotated[
    float | None,
    typer.Option("--local-batch", help="Local batch b per worker: examples, or tokens for a transformer."),
]
PeakFlopsOpt = Annotated[
    str | None,
    typer.Option(
        "--peak-flops", help="Peak dense FLOP/s per GPU, e.g. 312T or 312e12 (default: the hardware table)."
    ),
]
EfficiencyOpt = Annotated[
    float | None,
    typer.Option("--efficiency", help="Share of peak FLOP/s sustained: R = peak x efficiency (default 0.5)."),
]
BandwidthOpt = Annotated[
    str | None,
    typer.Option("--bandwidth", help="B per GPU, one direction, bytes/s: INTRA[,INTER], e.g. 300G,25G."),
]
AlphaOpt = Annotated[
    str | None,
    typer.Option(
        "--alpha", help="Link latency per step in microseconds: INTRA[,INTER], e.g. 1,5 (0 allowed)."
    ),
]
NicOpt = Annotated[
    str | None,
    typer.Option("--nic", help="NIC of groups spanning nodes, e.g. ib_ndr, roce_400 (default ib_hdr)."),
]
GpusPerNodeOpt = Annotated[
    int | None,
    typer.Option(
        "--gpus-per-node",
        min=1,
        max=MAX_RANKS_PER_HOST,
        help="GPUs per node: which groups span nodes (default: what the run shows, else 8).",
    ),
]
DtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        help="Compute dtype for the peak FLOP/s: fp32, tf32, bf16, fp16, fp8 (default: the gradients').",
    ),
]


MODEL_INPUT_BOUNDS = {
    "--params": (1.0, 1e15),
    "--local-batch": (1.0, 1e12),
    "--efficiency": (1e-6, 1.0),
    "--peak-flops": (1e9, 1e19),
    "--bandwidth": (1e6, 1e15),
    "--alpha": (0.0, 1e6),  # 0: a model without latency
}
"""The physical range of each model input (both ends included; bandwidth in bytes/s, alpha in microseconds, peak
in FLOP/s): outside it, or not finite, the value is refused (docs/metrics.md, "Predicted gamma")."""


def check_model_input(name: str, value: float | None) -> None:
    """Refuse `value` of option `name` (a `MODEL_INPUT_BOUNDS` key) when given and not finite or out of range."""
    low, high = MODEL_INPUT_BOUNDS[name]
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise UsageError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value:g}")


def with_model(
    options: AnalysisOptions,
    params: float | None = None,
    local_batch: float | None = None,
    peak_flops: str | None = None,
    efficiency: float | None = None,
    bandwidth: str | None = None,
    alpha: str | None = None,
    nic: str | None = None,
    gpus_per_node: int | None = None,
    dtype: str | None = None,
) -> AnalysisOptions:
    """`options` with the alpha-beta model's inputs from the command line (docs/metrics.md, "Predicted gamma")."""
    from traceview.prediction.inputs import PredictionOptions, parse_pair, parse_quantity

    for name, named in (("--nic", nic), ("--dtype", dtype)):
        if named is not None and not named.strip():
            raise UsageError(f"{name} is empty")
    intra_b, inter_b = parse_pair(bandwidth, "--bandwidth") if bandwidth is not None else (None, None)
    intra_a, inter_a = parse_pair(alpha, "--alpha", 1e-6, zero_ok=True) if alpha is not None else (None, None)
    peak = parse_quantity(peak_flops, "--peak-flops") if peak_flops is not None else None
    alpha_us = [None if a is None else a * 1e6 for a in (intra_a, inter_a)]
    given = [("--params", params), ("--local-batch", local_batch), ("--efficiency", efficiency)]
    given += [("--peak-flops", peak), ("--bandwidth", intra_b), ("--bandwidth", inter_b)]
    for name, value in [*given, ("--alpha", alpha_us[0]), ("--alpha", alpha_us[1])]:
        check_model_input(name, value)
    model = PredictionOptions(
        params=params, local_batch=local_batch, peak_flops=peak,
        efficiency=efficiency, bandwidth_Bps=intra_b, inter_bandwidth_Bps=inter_b, alpha_s=intra_a, inter_alpha_s=inter_a,
        nic=nic, dtype=dtype, link_overrides=options.prediction.link_overrides, gpus_per_node=gpus_per_node,
    )  # fmt: skip
    return replace(options, prediction=model, ranks_per_host=gpus_per_node or options.ranks_per_host)


NcclLogOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--nccl-log",
        help="An NCCL_DEBUG=INFO log to join to the traces; repeatable (logs in the run folder are found too).",
    ),
]
NCCL_LOG_SUFFIXES, NCCL_LOG_PROBE_BYTES = (".log", ".txt", ".out"), 64 * 1024


def _logs_in(folder: Path) -> list[Path]:
    """Files of `folder` ending .log/.txt/.out (or .gz of them) whose first 64 KB say `NCCL INFO`."""
    found = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        name = path.name.removesuffix(".gz")
        if not name.endswith(NCCL_LOG_SUFFIXES):
            continue
        try:
            with path.open("rb") as handle:
                head = handle.read(NCCL_LOG_PROBE_BYTES)
        except OSError:
            continue
        if b"NCCL INFO" in head or path.suffix == ".gz":
            found.append(path)
    return found


def _given_logs(given: Sequence[Path]) -> list[Path]:
    """The logs named by `--nccl-log`: a file as it is, a folder's logs; a missing path is a usage error."""
    found: list[Path] = []
    for path in given:
        if path.is_dir():
            inside = _logs_in(path)
            if not inside:
                raise UsageError(f"--nccl-log {printable(path)}: a folder without NCCL_DEBUG logs in it")
            found += inside
        elif not path.exists():
            raise UsageError(f"--nccl-log {printable(path)}: no such file")
        else:
            found.append(path)
    return found


def nccl_log_paths(run: str | Sequence[str], given: Sequence[Path] | None) -> list[Path]:
    """The logs given, then those a run manifest lists, then those of the run folder (ending .log/.txt/.out,
    saying `NCCL INFO`; the manifest's folder for a `run.json`), each once."""
    from traceview.load.manifest import MANIFEST_NAME
    from traceview.load.manifest_inputs import manifest_logs

    found = list(dict.fromkeys(_given_logs(given or ())))
    found += [path for path in manifest_logs(run) if path not in found]
    folder = Path(run) if isinstance(run, str) else None
    if folder is not None and folder.name == MANIFEST_NAME and folder.is_file():
        folder = folder.parent
    if folder is not None and folder.is_dir():
        found += [path for path in _logs_in(folder) if path not in found]
    return found


RanksPerHostOpt = Annotated[
    int | None,
    typer.Option(
        "--ranks-per-host",
        min=1,
        max=MAX_RANKS_PER_HOST,
        help="Ranks per host for clock alignment when traces name no host.",
    ),
]
