"""msgspec Structs for the parts of a Kineto trace traceview reads, and nothing else.

Unknown keys are skipped by the decoder without being materialised, which is what makes decoding fast. Types
are unions where real traces disagree (a process group name may be written as a number; a tid as "stream 7").

The document is read with `traceEvents` as `list[msgspec.Raw]` (each event's bytes, not decoded), then the
events in batches through a union tagged by `ph`, where every phase but complete events (`X`) decodes to a
field-less struct. The tolerant `Event` takes any object (a missing or unknown `ph` included); it reads a
batch the union refuses, and one event at a time a batch that neither reads. No Struct here can be part of a
reference cycle, so all are `gc=False`: the collector neither tracks nor scans the hundreds of thousands of
them a trace decodes into.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

EMPTY_RAW = msgspec.Raw(b"")


class Args(msgspec.Struct, frozen=True, gc=False):
    """Event arguments used by the analyses (docs/metrics.md section 2 and "Collectives")."""

    correlation: int | str | None = None
    external_id: int | str | None = msgspec.field(default=None, name="External id")
    external_id_old: int | str | None = msgspec.field(default=None, name="external id")
    device: int | str | None = None
    stream: int | str | None = None
    wait_on_stream: int | str | None = None  # a `cuda_sync` event's
    wait_on_record_correlation: int | str | None = msgspec.field(
        default=None, name="wait_on_cuda_event_record_corr_id"
    )
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | str | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | str | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | str | None = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | int | None = msgspec.field(default=None, name="Process Group Name")
    pg_id: str | int | None = msgspec.field(default=None, name="Process Group ID")
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: str | list[int] | None = msgspec.field(default=None, name="Process Group Ranks")
    seq: int | str | None = msgspec.field(default=None, name="Seq")
    seq_lower: int | str | None = msgspec.field(default=None, name="seq")
    in_split: str | list[int] | None = msgspec.field(default=None, name="In split size")
    out_split: str | list[int] | None = msgspec.field(default=None, name="Out split size")
    flops: float | None = None  # an integer is read as a float; one beyond float64 makes the event unreadable
    input_dims: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input Dims")
    input_dims_old: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input dims")
    input_type: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Concrete Inputs")


NO_ARGS = Args()
COMM_ARG_FIELDS = (
    "collective_name",
    "in_nelems",
    "out_nelems",
    "group_size",
    "dtype",
    "pg_name",
    "pg_id",
    "pg_desc",
    "pg_ranks",
    "seq",
    "seq_lower",
    "in_split",
    "out_split",
)
"""The `Args` fields of a collective call (docs/metrics.md, "Collectives"): absent on all but a few events of
a trace."""


class Event(msgspec.Struct, frozen=True, gc=False):
    """One Chrome-trace event, any phase; `ts`/`dur` in microseconds (floats allowed)."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: Args | None = None


class Complete(msgspec.Struct, frozen=True, gc=False, tag_field="ph", tag="X"):
    """A complete event (`"ph": "X"`), the only phase traceview reads: the fields of `Event` but `ph`."""

    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: Args | None = None


OTHER_PHASES = (
    *("B", "E", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "V", "v", "R", "c"),
    *("(", ")", "S", "T", "p", "F"),
)
"""Every other Chrome trace event phase (duration begin/end, instant, counter, async, flow, sample, object,
metadata, memory dump, mark, clock sync, context, and the deprecated async steps): each decodes to a struct
without fields, its keys skipped."""
OTHER_EVENT_TYPES = tuple(
    msgspec.defstruct(f"Phase{index}", [], frozen=True, gc=False, tag_field="ph", tag=phase)
    for index, phase in enumerate(OTHER_PHASES)
)
TaggedEvent = Union[Complete, *OTHER_EVENT_TYPES]  # type: ignore[valid-type]
"""An event decoded by phase: `Complete`, or one of `OTHER_EVENT_TYPES` (not read)."""


class PgConfig(msgspec.Struct, frozen=True, gc=False):
    """`distributedInfo.pg_config` entry."""

    pg_name: str | int | None = None
    pg_desc: str | None = None
    backend_config: str | None = None
    pg_size: int | None = None
    ranks: list[int] | None = None


class DistributedInfo(msgspec.Struct, frozen=True, gc=False):
    """`distributedInfo`: rank, world size, backend and process groups (any may be missing)."""

    backend: str | None = None
    rank: int | None = None
    world_size: int | None = None
    pg_config: list[PgConfig] | None = None
    nccl_version: str | None = None


class DeviceProperties(msgspec.Struct, frozen=True, gc=False):
    """An entry of `deviceProperties` (or the PyTorch 1.8 `computeProperties`)."""

    name: str | None = None


class Header(msgspec.Struct, frozen=True, gc=False):
    """The document's keys other than `traceEvents`."""

    distributedInfo: DistributedInfo | None = None  # noqa: N815 - the trace's own key
    deviceProperties: list[DeviceProperties] | None = None  # noqa: N815
    computeProperties: list[DeviceProperties] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    host_name: str | None = None
    hostname: str | None = None
    torch_version: str | None = msgspec.field(default=None, name="pytorch_version")
    grad_mode: str | bool | None = None  # metadata a recorder adds (`add_metadata`): "inference_mode", ...
    inference_mode: str | bool | None = None


class RawDocument(Header, frozen=True, gc=False):
    """A Kineto trace document with each event's JSON text kept as it is, to decode later in batches."""

    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815


class CategoryProbe(msgspec.Struct, frozen=True, gc=False):
    """An event's category alone, as written (to tell a Kineto trace from another profiler's Chrome trace)."""

    cat: msgspec.Raw = EMPTY_RAW


class Probe(msgspec.Struct, frozen=True):
    """Top-level keys that tell other JSON trace formats apart (used only to explain a refusal)."""

    traceEvents: msgspec.Raw = EMPTY_RAW  # noqa: N815
    nodes: msgspec.Raw = EMPTY_RAW
    schema: str | None = None
    metadata: msgspec.Raw = EMPTY_RAW
    displayTimeUnit: str | None = None  # noqa: N815


EVENTS_DECODER = msgspec.json.Decoder(list[Event])
EVENT_DECODER = msgspec.json.Decoder(Event)
RAW_DOCUMENT_DECODER = msgspec.json.Decoder(RawDocument)
RAW_EVENTS_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
TAGGED_EVENTS_DECODER = msgspec.json.Decoder(list[TaggedEvent])
TAGGED_EVENT_DECODER = msgspec.json.Decoder(TaggedEvent)
CATEGORY_DECODER = msgspec.json.Decoder(list[CategoryProbe | list[Any] | str | int | float | bool | None])
"""The category of each object in an event array; any other JSON value as it is."""
