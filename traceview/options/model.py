"""What the user states of the alpha-beta model (docs/metrics.md, "Predicted gamma"): `ModelOptions`, each
value with its source (the command line, the API or `run.json`), and the parsing of the text forms the
command line takes ("312T", "300G,25G", "1,5"), each bounded by the input's physical range.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from traceview.core.errors import UsageError
from traceview.core.records import record
from traceview.options.user import UserOptions

COMMAND_LINE = "command line"
MANIFEST = "manifest"


@record
class LinkOverride:
    """A link stated for the model (an NCCL log's socket fallback, provenance "nccl log"; the links measured
    in the run, "measured"): replaces the link of every call of process group `group` (its `pg_key`), or with
    `group` None the table's link of `scope`."""

    scope: Literal["intra", "inter", "host"]  # host: host collectives (gloo, MPI) inside a host
    name: str
    bandwidth_Bps: float  # noqa: N815 - B of the alpha-beta model
    alpha_s: float | None = None
    reason: str = ""
    group: str | None = None
    source: str = "nccl log"  # or "measured": fitted on this run's transfer times (traceview.links_measured)


@record(kw_only=True)
class ModelOptions:
    """Every constant of the prediction the user may set; None: from the trace, NCCL log, table or default.

    Bandwidths are bytes/s one direction per GPU, alphas seconds, peak FLOP/s dense per device."""

    params: float | None = None  # P: the whole model's parameters, every rank's together
    params_per_rank: float | None = None  # what one rank holds (run.json model.params_per_rank)
    model_shards: int | None = None  # P / params per rank by the stated layout (tp x pp x fsdp)
    local_batch: float | None = None
    local_batch_unit: str | None = None  # examples or tokens, where run.json says (a recording measured it)
    peak_flops: float | None = None
    efficiency: float | None = None
    bandwidth_Bps: float | None = None  # noqa: N815 - intra-node B
    inter_bandwidth_Bps: float | None = None  # noqa: N815 - inter-node B
    host_bandwidth_Bps: float | None = None  # noqa: N815 - B of host collectives inside a host
    links_measured: bool | None = None  # the stated bandwidths were measured in this run (run.json)
    alpha_s: float | None = None
    inter_alpha_s: float | None = None
    nic: str | None = None
    dtype: str | None = None
    link_overrides: tuple[LinkOverride, ...] = ()
    logged_algorithms: tuple[
        tuple[str, int, str], ...
    ] = ()  # (collective, size bucket, algorithm): NCCL logs
    flops_per_sample: float | None = None  # model FLOPs per sample, forward + backward
    device: str | None = None  # the device name, before the traces'
    gpus_per_node: int | None = None
    nics_per_node: int | None = None  # NICs per node of rail-aligned rings across nodes; None: one per GPU
    rank_hosts: tuple[tuple[int, str], ...] = ()  # rank -> host as stated (a manifest)
    sources: tuple[tuple[str, str], ...] = ()  # (field, source) of the values not from the command line

    def source_of(self, name: str) -> str:
        """Where the value of field `name` came from: `command line` unless `sources` says otherwise."""
        return dict(self.sources).get(name, COMMAND_LINE)


MODEL_INPUT_BOUNDS = {
    "--params": (1.0, 1e15),
    "--local-batch": (1.0, 1e12),
    "--efficiency": (1e-6, 1.0),
    "--peak-flops": (1e9, 1e19),
    "--bandwidth": (1e6, 1e15),
    "--host-bandwidth": (1e6, 1e15),
    "--alpha": (0.0, 1e6),  # 0: a model without latency
}
"""The physical range of each model input (both ends included; bandwidth in bytes/s, alpha in microseconds,
peak in FLOP/s): outside it, or not finite, the value is refused (docs/metrics.md, "Predicted gamma")."""

_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_quantity(text: str, what: str, zero_ok: bool = False) -> float:
    """A positive number (or zero, with `zero_ok`) with an optional decimal SI suffix: "300e9", "300G",
    "312T", "25 g" -> float."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtTpP]?)\s*", text)
    value = float(found.group(1)) if found else math.nan
    if found is None or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        kind = "a non-negative" if zero_ok else "a positive"
        raise UsageError(f"{what}: {text!r} is not {kind} number (e.g. 300e9, 300G)")
    return value * _SI[found.group(2).lower()]


def parse_pair(text: str, what: str, scale: float = 1.0, zero_ok: bool = False) -> tuple[float, float | None]:
    """ "INTRA[,INTER]" as two quantities times `scale`; the second None when not given. `zero_ok`: 0 is a
    value (a latency; not a bandwidth)."""
    parts = text.split(",")
    if len(parts) > 2:
        raise UsageError(f"{what}: {text!r} takes at most two values, INTRA,INTER")
    values = [parse_quantity(part, what, zero_ok) * scale for part in parts]
    return values[0], (values[1] if len(values) == 2 else None)


def check_model_input(name: str, value: float | None) -> None:
    """Refuse `value` of option `name` (a `MODEL_INPUT_BOUNDS` key) when given and not finite or
    out of range."""
    low, high = MODEL_INPUT_BOUNDS[name]
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise UsageError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value:g}")


def _text(value: str | float | None) -> str | None:
    """A quantity as the command line writes it (the API may pass a number)."""
    return None if value is None else value if isinstance(value, str) else repr(float(value))


def _named(value: str | None, name: str) -> str | None:
    if value is not None and not value.strip():
        raise UsageError(f"{name} is empty")
    return value


def model_options(stated: UserOptions) -> ModelOptions:
    """`ModelOptions` from the inputs as typed, each checked against its physical range (a `UsageError`
    naming the option otherwise)."""
    bandwidth, alpha, peak = _text(stated.bandwidth), _text(stated.alpha), _text(stated.peak_flops)
    intra_b, inter_b = parse_pair(bandwidth, "--bandwidth") if bandwidth is not None else (None, None)
    intra_a, inter_a = parse_pair(alpha, "--alpha", 1e-6, zero_ok=True) if alpha is not None else (None, None)
    peak_value = parse_quantity(peak, "--peak-flops") if peak is not None else None
    host = _text(stated.host_bandwidth)
    host_b = parse_quantity(host, "--host-bandwidth") if host is not None else None
    given = [("--params", stated.params), ("--local-batch", stated.local_batch)]
    given += [("--efficiency", stated.efficiency), ("--peak-flops", peak_value)]
    given += [("--bandwidth", intra_b), ("--bandwidth", inter_b), ("--host-bandwidth", host_b)]
    given += [("--alpha", None if a is None else a * 1e6) for a in (intra_a, inter_a)]
    for name, value in given:
        check_model_input(name, value)
    return ModelOptions(
        params=stated.params,
        local_batch=stated.local_batch,
        peak_flops=peak_value,
        efficiency=stated.efficiency,
        bandwidth_Bps=intra_b,
        inter_bandwidth_Bps=inter_b,
        host_bandwidth_Bps=host_b,
        alpha_s=intra_a,
        inter_alpha_s=inter_a,
        nic=_named(stated.nic, "--nic"),
        dtype=_named(stated.dtype, "--dtype"),
        gpus_per_node=stated.gpus_per_node,
        nics_per_node=stated.nics_per_node,
    )
