"""Hand-made PyTorch Flight Recorder dumps for the tests of `traceview hang`: the classes gloo cannot show
(NCCL's point-to-point ops, several groups, a group whose members disagree, a rank without a dump) and the
older format versions.

Formats modelled (docs/metrics.md, "Hang forensics"): `2.10`, what torch 2.13 writes (checked against the
real dumps of tests/jobs/flight_recorder_job.py: `pg_config` keyed by group name with `ranks` as text,
`pg_status` keyed by group id with numbers as text, entries with `collective_seq_id`, `p2p_seq_id`,
`is_p2p`, `process_group` [name, desc], times in ns); `2.4` (the same without `is_p2p`, `pg_status` values
as numbers, `ranks` as a list); `2.2` (one `seq_id` for collectives and p2p ops, no `pg_status`). Pickles are
written with protocol 2, as PyTorch's pickler writes them; `typed_lists` wraps the sizes in the TorchScript
pickler's `build_intlist` global, as versions that pickled typed lists did.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

SECOND_NS = 1_000_000_000
START_NS = 1_700_000_000 * SECOND_NS  # an arbitrary wall-clock start


@dataclass
class Op:
    """One entry: its op, group and sequence number, sizes, peer (p2p), state and creation time (s)."""

    op: str
    seq: int
    group: str = "0"
    sizes: tuple[int, ...] = (1024,)
    dtype: str = "Float"
    peer: int | None = None
    state: str = "scheduled"
    created_s: float = 0.0
    duration_ms: float | None = None


@dataclass
class RankDump:
    """One rank's dump: its ops, its groups' members, the dump's time (s) and version."""

    rank: int
    ops: list[Op] = field(default_factory=list)
    groups: dict[str, tuple[int, ...]] = field(default_factory=lambda: {"0": (0, 1, 2, 3)})
    dumped_s: float = 100.0
    version: str = "2.10"


class _TypedList:
    """A list the pickle writes through `torch.jit._pickle.build_intlist` (as TorchScript's pickler did)."""

    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __reduce__(self) -> tuple[Any, tuple[list[int]]]:
        return (_build_intlist, (self.items,))


def _build_intlist(data: list[int]) -> list[int]:
    return data


def _save_torch_global(pickler: Any, obj: Any, name: Any = None) -> None:
    """Write `_build_intlist` as the global `torch.jit._pickle build_intlist` (torch is not imported)."""
    if obj is _build_intlist:
        pickler.write(pickle.GLOBAL + b"torch.jit._pickle\nbuild_intlist\n")
        return
    pickle._Pickler.save_global(pickler, obj, name)  # type: ignore[attr-defined]


class _TorchListPickler(pickle._Pickler):  # type: ignore[name-defined,misc]
    """The pure-Python pickler, functions written by `_save_torch_global`."""

    dispatch: ClassVar[dict[Any, Any]] = {
        **pickle._Pickler.dispatch,
        type(_build_intlist): _save_torch_global,
    }  # type: ignore[attr-defined]


def torch_pickle(document: Any) -> bytes:
    """`document` pickled with protocol 2, `_TypedList`s as TorchScript's typed-list global."""
    import io

    buffer = io.BytesIO()
    _TorchListPickler(buffer, protocol=2).dump(document)
    return buffer.getvalue()


def _name(op: Op, rank: int) -> str:
    if op.peer is None:
        return f"nccl:{op.op}"
    arrow = f"{rank}->{op.peer}" if op.op == "send" else f"{rank}<-{op.peer}"
    return f"nccl:{op.op} {arrow}"


def _entry(op: Op, rank: int, record: int, version: str, typed: bool) -> dict[str, Any]:
    sizes: Any = [_TypedList(list(op.sizes))] if typed else [list(op.sizes)]
    entry: dict[str, Any] = {
        "record_id": record,
        "pg_id": int(op.group) if op.group.isdigit() else 0,
        "process_group": (op.group, "default_pg" if op.group == "0" else f"group {op.group}"),
        "profiling_name": _name(op, rank),
        "input_sizes": sizes,
        "input_dtypes": [op.dtype],
        "output_sizes": sizes,
        "output_dtypes": [op.dtype],
        "state": op.state,
        "time_created_ns": START_NS + int(op.created_s * SECOND_NS),
        "time_discovered_started_ns": 0,
        "time_discovered_completed_ns": 0,
        "retired": op.state == "completed",
        "timeout_ms": 600_000,
        "frames": [{"name": "train_step", "filename": "/job/train.py", "line": 40 + record}],
    }
    if op.duration_ms is not None:
        entry["duration_ms"] = op.duration_ms
    is_p2p = op.peer is not None
    if version == "2.2":
        entry["seq_id"] = op.seq
    else:
        entry["collective_seq_id"] = 0 if is_p2p else op.seq
        entry["p2p_seq_id"] = op.seq if is_p2p else 0
    if version == "2.10":
        entry["is_p2p"] = is_p2p
    return entry


def dump_dict(dump: RankDump, typed_lists: bool = False) -> dict[str, Any]:
    """The dump as the dict PyTorch pickles (module docstring: the versions)."""
    text_ranks = dump.version == "2.10"
    document: dict[str, Any] = {
        "version": dump.version,
        "pg_config": {
            name: {"name": name, "desc": "", "ranks": str(list(ranks)) if text_ranks else list(ranks)}
            for name, ranks in dump.groups.items()
        },
        "entries": [
            _entry(op, dump.rank, index, dump.version, typed_lists) for index, op in enumerate(dump.ops)
        ],
    }
    if dump.version != "2.2":
        document["pg_status"] = _status(dump, text=text_ranks)
    return document


def _status(dump: RankDump, text: bool) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for name in dump.groups:
        seqs = [op.seq for op in dump.ops if op.group == name and op.peer is None]
        done = [op.seq for op in dump.ops if op.group == name and op.peer is None and op.state == "completed"]
        values = {
            "last_enqueued_collective": max(seqs, default=-1),
            "last_started_collective": -1,
            "last_completed_collective": max(done, default=-1),
        }
        status[name] = {key: str(value) if text else value for key, value in values.items()}
    return status


def write_dumps(
    folder: Path, dumps: Sequence[RankDump], as_json: bool = False, typed_lists: bool = False
) -> list[Path]:
    """Each rank's dump written as `nccl_trace_rank_<N>` (pickle) or `.json`, its modification time the dump's
    time; returns the files."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for dump in dumps:
        path = folder / (f"nccl_trace_rank_{dump.rank}" + (".json" if as_json else ""))
        document = dump_dict(dump, typed_lists and not as_json)
        if as_json:
            path.write_text(json.dumps(document), encoding="utf-8")
        else:
            path.write_bytes(torch_pickle(document))
        moment = (START_NS + int(dump.dumped_s * SECOND_NS)) / SECOND_NS
        os.utime(path, (moment, moment))
        written.append(path)
    return written


def steady(
    ranks: Sequence[int], count: int, group: str = "0", every_s: float = 1.0, **overrides: Any
) -> dict[int, list[Op]]:
    """`count` all-reduces per rank, one every `every_s` seconds, completed."""
    return {
        rank: [
            Op("all_reduce", seq, group=group, state="completed", created_s=seq * every_s, **overrides)
            for seq in range(1, count + 1)
        ]
        for rank in ranks
    }
