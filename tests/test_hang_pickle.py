"""How a Flight Recorder pickle is read (parsers/flight_recorder/_pickle.py's stack machine, never Python's
unpickler): what Python pickled at every protocol and format version read back alike, typed lists through the
allowed global, opcode bytes inside strings read as data, foreign globals and object-building opcodes refused
with nothing run, and the cycle collector back on after each dump.

Expected values come from a second reader: `pickle.loads` of data the test itself pickled (trusted here, never
by traceview).
"""

from __future__ import annotations

import gc
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from traceview.parsers import flight_recorder
from traceview.parsers.flight_recorder._pickle import RefusedPickle, load_data

from tests.flight_recorder_factory import RankDump, dump_dict, steady, torch_pickle
from traceview.core.errors import InputError

WORLD = (0, 1, 2, 3)


def _document(version: str = "2.10", typed: bool = False) -> dict[str, Any]:
    return dump_dict(RankDump(1, steady(WORLD, 5)[1], version=version), typed_lists=typed)


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("version", ["2.10", "2.4", "2.2"])
def test_the_stack_machine_reads_what_python_pickled(protocol: int, version: str) -> None:
    document = _document(version)
    data = pickle.dumps(document, protocol=protocol)
    assert load_data(data) == pickle.loads(data) == document


def test_typed_lists_built_through_the_allowed_global() -> None:
    """TorchScript's `build_intlist` global (protocol 2 GLOBAL + REDUCE) read as a plain list, as the stack
    machine reads it."""
    data = torch_pickle(_document(typed=True))
    assert b"build_intlist" in data
    value = load_data(data)
    assert value["entries"][0]["input_sizes"] == [[1024]]  # the factory's default sizes, one tensor


def test_opcode_bytes_inside_strings_are_data() -> None:
    """Strings and bytes holding what would be opcodes (a GLOBAL naming os.system, REDUCE, STOP) are read as
    the text they are (bytes from protocol 3: protocol 2 pickles bytes through a global)."""
    document: dict[str, Any] = {
        "entries": ["cos\nsystem\n", "R.", "\x80\x02c", "." * 300],
        "big": [2**64 + 5, -(2**70), 1 << 200],
    }
    assert load_data(pickle.dumps(document, protocol=2)) == document
    document["raw"] = b"cposix\nsystem\n(S'x'\ntR."
    for protocol in (3, 4, 5):
        assert load_data(pickle.dumps(document, protocol=protocol)) == document


class _Payload:
    marker: Path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4])
def test_foreign_global_never_built(tmp_path: Path, protocol: int) -> None:
    """os.system named by GLOBAL (protocol 2) or STACK_GLOBAL (protocol 4): refused by name, nothing run."""
    _Payload.marker = tmp_path / "ran"
    data = pickle.dumps({"version": "2.10", "entries": [_Payload()]}, protocol=protocol)
    with pytest.raises(RefusedPickle, match="system"):
        load_data(data)
    assert not _Payload.marker.exists()
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(data)
    with pytest.raises(InputError, match="system"):
        flight_recorder.parse(dump)
    assert not _Payload.marker.exists()


def test_object_building_opcode_never_built() -> None:
    """BUILD (sets an object's state) is not an opcode a dump holds: refused."""
    data = b"\x80\x02}}b."  # PROTO 2, EMPTY_DICT, EMPTY_DICT, BUILD, STOP
    with pytest.raises(RefusedPickle):
        load_data(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x02(K\x01e.",  # APPENDS with nothing below its mark
        b"\x80\x02}(K\x01e.",  # APPENDS onto a dict
        b"\x80\x02(K\x01K\x02u.",  # SETITEMS with nothing below its mark
        b"\x80\x02](K\x01K\x02u.",  # SETITEMS onto a list
        b"\x80\x02}(K\x01u.",  # SETITEMS with a key and no value
        b"\x80\x02}(]K\x01u.",  # SETITEMS with a list as a key
    ],
)
def test_items_onto_what_they_do_not_apply_to_are_refused(data: bytes) -> None:
    """The loop runs APPENDS and SETITEMS itself only onto the list or dict below their mark, the items
    paired; anything else goes to their methods, which refuse it (never a wrong value)."""
    with pytest.raises(RefusedPickle):
        load_data(data)
    with pytest.raises((pickle.UnpicklingError, IndexError, TypeError, AttributeError)):
        pickle.loads(data)  # Python's unpickler refuses them as well


def test_items_onto_their_containers_read_as_python_reads_them() -> None:
    data = b"\x80\x02}(K\x01](K\x02K\x03eK\x04}(K\x05NuX\x01\x00\x00\x00a(K\x06tu."
    assert load_data(data) == pickle.loads(data) == {1: [2, 3], 4: {5: None}, "a": (6,)}


def test_every_cut_is_refused() -> None:
    data = pickle.dumps(_document(), protocol=2)
    for end in range(len(data)):
        with pytest.raises(RefusedPickle):
            load_data(data[:end])


def test_collector_on_after_each_dump(tmp_path: Path) -> None:
    """The cycle collector paused while a dump is read is on again after it, read or refused."""
    good, bad = tmp_path / "dump_rank_0", tmp_path / "dump_rank_1"
    good.write_bytes(pickle.dumps(_document(), protocol=2))
    bad.write_bytes(pickle.dumps(_document(), protocol=2)[:-7])
    assert gc.isenabled()
    assert flight_recorder.parse(good).rank == 0
    assert gc.isenabled()
    with pytest.raises(InputError, match="cut short"):
        flight_recorder.parse(bad)
    assert gc.isenabled()
