"""The links of the alpha-beta model, each with where it came from (docs/metrics.md, "Predicted gamma"): B and
alpha inside a node and across nodes, and per process group where an NCCL log forces one (a socket
fallback).

Precedence: the command line or the manifest (`ModelOptions`, whose `sources` say which), then the NCCL log
(`LinkOverride`), then the hardware table (the device's scale-up or PCIe link inside a node, the NIC across
nodes: `--nic`, else `DEFAULT_NIC`). A link is *known* when its B comes from the command line, the manifest or
the NCCL log (`KNOWN_LINK_SOURCES`); a hardware-table link is *assumed*: the table knows the device, not how
this run's nodes are wired.
"""

from __future__ import annotations

from dataclasses import replace

from traceview.core.hardware import GpuSpec, HardwareLookupError, intra_node_link, link
from traceview.core.records import record
from traceview.options.model import LinkOverride, ModelOptions
from traceview.prediction.trace_facts import Assumption

DEFAULT_NIC = "ib_hdr"
"""The NIC of groups that span nodes when the user names none: one HDR InfiniBand port per GPU (DGX A100)."""
DEFAULT_ALPHA_S = {"intra": 1e-6, "inter": 5e-6, "host": 20e-6}
"""alpha when a bandwidth is given on the command line without one and the table has none."""
KNOWN_LINK_SOURCES = ("command line", "manifest", "nccl log", "measured")
"""Sources of a B the run or the user states; any other B is assumed."""
FIELDS = {"intra": ("bandwidth_Bps", "alpha_s"), "inter": ("inter_bandwidth_Bps", "inter_alpha_s")}
"""The `ModelOptions` fields of B and alpha of each scope."""


@record
class Link:
    """The links one kind of group spans: B (one direction per GPU, bytes/s) and alpha (s), with sources."""

    scope: str  # intra | inter
    name: str
    bandwidth_Bps: float  # noqa: N815 - B of the alpha-beta model
    alpha_s: float
    source: str
    alpha_source: str
    detail: str = ""
    key: str = ""  # the hardware table's key, when the link is one of its rows


def _override(options: ModelOptions, scope: str) -> LinkOverride | None:
    found = [o for o in options.link_overrides if o.scope == scope and o.group is None]
    return found[-1] if found else None


def _table_link(
    gpu: GpuSpec | None, scope: str, rpn: int, nic: str | None, nic_source: str = "command line"
) -> tuple[Link | None, str]:
    """The hardware table's link of `scope` (source "hardware table"), or None and a note."""
    try:
        if scope == "inter":
            spec = link(nic or DEFAULT_NIC)
        elif gpu is None:
            return None, "unknown device: give --bandwidth for groups inside a node"
        else:
            spec = intra_node_link(gpu, rpn)
    except HardwareLookupError as error:
        if scope == "inter" and nic:
            raise  # the user's --nic names no link: an error, not a note
        return None, str(error)
    detail = spec.source + ("" if scope == "intra" or nic else f" (default NIC {DEFAULT_NIC}; give --nic)")
    source = nic_source if scope == "inter" and nic else "hardware table"
    return Link(
        scope, spec.name, spec.bandwidth_bytes_per_s, spec.alpha_s, source, source, detail, spec.key
    ), ""


def resolve_link(options: ModelOptions, gpu: GpuSpec | None, scope: str, rpn: int) -> tuple[Link | None, str]:
    """B and alpha of `scope` ("intra" or "inter"): command line or manifest, then the NCCL log's override,
    then the table."""
    b_field, alpha_field = FIELDS[scope]
    given_b, given_alpha = getattr(options, b_field), getattr(options, alpha_field)
    table, note = _table_link(gpu, scope, rpn, options.nic, options.source_of("nic"))
    override = _override(options, scope)
    if given_b is not None:
        b_source = options.source_of(b_field)
        detail = "--bandwidth" if b_source == "command line" else "run.json"
        base = Link(scope, "stated", given_b, DEFAULT_ALPHA_S[scope], b_source, "default", detail)
    elif override is not None:
        alpha = (
            override.alpha_s
            if override.alpha_s is not None
            else (table.alpha_s if table else DEFAULT_ALPHA_S[scope])
        )
        base = Link(
            scope,
            override.name,
            override.bandwidth_Bps,
            alpha,
            override.source,
            override.source if override.alpha_s is not None else (table.alpha_source if table else "default"),
            override.reason,
        )
    elif table is not None:
        base = table
    else:
        return None, note
    if given_alpha is not None:
        return replace(base, alpha_s=given_alpha, alpha_source=options.source_of(alpha_field)), ""
    if given_b is not None and table is not None:
        return replace(base, alpha_s=table.alpha_s, alpha_source=table.alpha_source), ""
    return base, ""


HOST_LINK = "loopback or shared memory"
"""The link host collectives (gloo, MPI) use between ranks of one host; across hosts they use the NIC."""


def resolve_host_link(options: ModelOptions) -> tuple[Link | None, str]:
    """B and alpha of host collectives inside a host: stated (`--host-bandwidth`, run.json
    `hardware.host_bandwidth_Bps`), else measured in the run (a `host` override of
    `traceview.links_measured`, handed over by the reduce when its fit is reported), else unknown (no
    datasheet gives a loopback's or a shared-memory copy's speed) and a note saying how to give it."""
    measured = _override(options, "host")
    if options.host_bandwidth_Bps is None and measured is not None:
        alpha = measured.alpha_s if measured.alpha_s is not None else DEFAULT_ALPHA_S["host"]
        return Link(
            "host",
            HOST_LINK,
            measured.bandwidth_Bps,
            alpha,
            measured.source,
            measured.source,
            measured.reason,
        ), ""
    if options.host_bandwidth_Bps is None:
        return None, (
            "the link of host collectives inside a host (gloo or MPI over loopback or shared memory) is "
            "unknown: "
            "give --host-bandwidth or hardware.host_bandwidth_Bps in run.json"
        )
    source = options.source_of("host_bandwidth_Bps")
    detail = "--host-bandwidth" if source == "command line" else "run.json"
    alpha = DEFAULT_ALPHA_S["host"]
    return Link("host", HOST_LINK, options.host_bandwidth_Bps, alpha, source, "default", detail), ""


def link_assumptions(found: Link | None, scope: str) -> list[Assumption]:
    """B and alpha of `scope` as assumptions (one line each, B null when unknown)."""
    label = {"intra": "inside a node", "inter": "across nodes", "host": "of host collectives inside a host"}[
        scope
    ]
    option = "--host-bandwidth" if scope == "host" else "--bandwidth"
    if found is None:
        return [Assumption(f"B {label}", None, "B/s", "default", f"unknown: give {option}")]
    return [
        Assumption(
            f"B {label}",
            found.bandwidth_Bps,
            "B/s",
            found.source,
            f"{found.name}: {found.detail}" if found.detail else found.name,
        ),
        Assumption(
            f"alpha {label}",
            found.alpha_s,
            "s",
            found.alpha_source,
            "per latency step"
            if found.alpha_source in KNOWN_LINK_SOURCES
            else "per latency step; an assumption, give --alpha",
        ),
    ]


def group_links(options: ModelOptions, fallback: Link | None) -> tuple[tuple[str, Link], ...]:
    """(group, link) of every per-group NCCL-log override (alpha: the override's, else the fallback's)."""
    alpha = fallback.alpha_s if fallback else DEFAULT_ALPHA_S["inter"]
    return tuple(
        (
            o.group,
            Link(
                o.scope,
                o.name,
                o.bandwidth_Bps,
                o.alpha_s if o.alpha_s is not None else alpha,
                o.source,
                o.source if o.alpha_s is not None else "default",
                o.reason,
            ),
        )
        for o in options.link_overrides
        if o.group is not None
    )


def group_assumptions(groups: tuple[tuple[str, Link], ...]) -> list[Assumption]:
    """The B of every process group an NCCL log overrides."""
    return [
        Assumption(
            f"B of process group {group}",
            found.bandwidth_Bps,
            "B/s",
            found.source,
            f"{found.name}: {found.detail}",
        )
        for group, found in groups
    ]
