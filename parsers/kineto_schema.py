"""msgspec Structs for the parts of a Kineto trace traceview reads, and nothing else.

Unknown keys are skipped by the decoder without being materialised, which is what makes decoding fast. Types are
unions where real traces disagree (a process group name may be written as a number; a tid as "stream 7").
"""

from __future__ import annotations

import msgspec

EMPTY_RAW = msgspec.Raw(b"")


class Args(msgspec.Struct, frozen=True):
    """Event arguments used by the analyses (SPEC sections 2 and 3)."""

    correlation: int | str | None = None
    external_id: int | str | None = msgspec.field(default=None, name="External id")
    external_id_old: int | str | None = msgspec.field(default=None, name="external id")
    device: int | str | None = None
    stream: int | str | None = None
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
    flops: int | float | None = None
    input_dims: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input Dims")
    input_dims_old: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input dims")
    input_type: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input type")


NO_ARGS = Args()


class Event(msgspec.Struct, frozen=True):
    """One Chrome-trace event; `ts`/`dur` in microseconds (floats allowed)."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: Args | None = None


class PgConfig(msgspec.Struct, frozen=True):
    """`distributedInfo.pg_config` entry."""

    pg_name: str | int | None = None
    pg_desc: str | None = None
    backend_config: str | None = None
    pg_size: int | None = None
    ranks: list[int] | None = None


class DistributedInfo(msgspec.Struct, frozen=True):
    """`distributedInfo`: rank, world size, backend and process groups (any may be missing)."""

    backend: str | None = None
    rank: int | None = None
    world_size: int | None = None
    pg_config: list[PgConfig] | None = None
    nccl_version: str | None = None


class DeviceProperties(msgspec.Struct, frozen=True):
    """An entry of `deviceProperties` (or the PyTorch 1.8 `computeProperties`)."""

    name: str | None = None


class Document(msgspec.Struct, frozen=True):
    """A Kineto trace document (the object form; PyTorch 1.8 may also write a bare event array)."""

    traceEvents: list[Event] | None = None  # noqa: N815 - the trace's own key
    distributedInfo: DistributedInfo | None = None  # noqa: N815
    deviceProperties: list[DeviceProperties] | None = None  # noqa: N815
    computeProperties: list[DeviceProperties] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    host_name: str | None = None
    hostname: str | None = None
    torch_version: str | None = msgspec.field(default=None, name="pytorch_version")


class Probe(msgspec.Struct, frozen=True):
    """Top-level keys that tell other JSON trace formats apart (used only to explain a refusal)."""

    traceEvents: msgspec.Raw = EMPTY_RAW  # noqa: N815
    nodes: msgspec.Raw = EMPTY_RAW
    schema: str | None = None
    metadata: msgspec.Raw = EMPTY_RAW
    displayTimeUnit: str | None = None  # noqa: N815


DOCUMENT_DECODER = msgspec.json.Decoder(Document)
EVENTS_DECODER = msgspec.json.Decoder(list[Event])
