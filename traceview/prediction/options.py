"""What the user may state of the prediction's inputs (`PredictionOptions`: the command line or the run's
manifest, each value with its source) and the links an NCCL log found (`LinkOverride`); docs/metrics.md,
"Predicted gamma"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class LinkOverride:
    """A link the NCCL log found (e.g. a socket fallback), provenance "nccl log": replaces the link of every
    call of process group `group` (its `pg_key`), or with `group` None the table's link of `scope`."""

    scope: Literal["intra", "inter"]
    name: str
    bandwidth_Bps: float  # noqa: N815 - B of the alpha-beta model
    alpha_s: float | None = None
    reason: str = ""
    group: str | None = None


@dataclass(frozen=True)
class PredictionOptions:
    """Every constant of the prediction the user may set; None: from the trace, NCCL log, table or default.

    Bandwidths are bytes/s one direction per GPU, alphas seconds, peak FLOP/s dense per device."""

    params: float | None = None
    local_batch: float | None = None
    peak_flops: float | None = None
    efficiency: float | None = None
    bandwidth_Bps: float | None = None  # noqa: N815 - intra-node B
    inter_bandwidth_Bps: float | None = None  # noqa: N815 - inter-node B
    alpha_s: float | None = None
    inter_alpha_s: float | None = None
    nic: str | None = None
    dtype: str | None = None
    link_overrides: tuple[LinkOverride, ...] = ()
    flops_per_sample: float | None = None  # model FLOPs per sample, forward + backward
    device: str | None = None  # the device name, before the traces'
    gpus_per_node: int | None = None
    rank_hosts: tuple[tuple[int, str], ...] = ()  # rank -> host as stated (a manifest)
    sources: tuple[tuple[str, str], ...] = ()  # (field, source) of the values not from the command line

    def source_of(self, name: str) -> str:
        """Where the value of field `name` came from: `command line` unless `sources` says otherwise."""
        return dict(self.sources).get(name, "command line")
