"""A pickle of Flight Recorder data laid out as PyTorch's own pickler writes a dump (the TorchScript pickler,
protocol 2; what `torch._C._distributed_c10d._dump_fr_trace` returns), for the benchmarks: each distinct
string is written once and memoized, then read back from the memo; each stack frame (a dict) likewise;
every other dict, list and tuple is written in full where it stands. Python's own pickler memoizes every
container instead, which gives a dump of the same entries more opcodes.

Only the value types a dump holds: dict, list, tuple, str, int, float, bool and None.
"""

from __future__ import annotations

import struct
from typing import Any

_INT_OPS = ((0, 0xFF, b"K", "<B"), (0, 0xFFFF, b"M", "<H"), (-(2**31), 2**31 - 1, b"J", "<i"))


class _Writer:
    """The opcodes of one value, strings and frames memoized by value."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.memo: dict[object, int] = {}

    def _memo_op(self, key: object) -> bool:
        """Reads `key` from the memo where it is there (True), else leaves it to be written."""
        index = self.memo.get(key)
        if index is None:
            return False
        self.out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def _put(self, key: object) -> None:
        index = self.memo[key] = len(self.memo)
        self.out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)

    def value(self, value: Any) -> None:
        """Append the opcodes that push `value`."""
        if value is None or isinstance(value, bool):
            self.out += {None: b"N", True: b"\x88", False: b"\x89"}[value]
        elif isinstance(value, int):
            self._int(value)
        elif isinstance(value, float):
            self.out += b"G" + struct.pack(">d", value)
        elif isinstance(value, str):
            self._str(value)
        elif isinstance(value, dict):
            self._dict(value)
        else:
            self._sequence(value)

    def _int(self, value: int) -> None:
        for low, high, code, layout in _INT_OPS:
            if low <= value <= high:
                self.out += code + struct.pack(layout, value)
                return
        raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
        self.out += b"\x8a" + bytes([len(raw)]) + raw

    def _str(self, value: str) -> None:
        if not self._memo_op(("str", value)):
            raw = value.encode()
            self.out += b"X" + struct.pack("<I", len(raw)) + raw
            self._put(("str", value))

    def _dict(self, value: dict[Any, Any]) -> None:
        frame = ("frame", *value.items()) if set(value) == {"name", "filename", "line"} else None
        if frame is not None and self._memo_op(frame):
            return
        self.out += b"}("
        for key, item in value.items():
            self.value(key)
            self.value(item)
        self.out += b"u"
        if frame is not None:
            self._put(frame)

    def _sequence(self, value: list[Any] | tuple[Any, ...]) -> None:
        if isinstance(value, list):
            self.out += b"]("
            for item in value:
                self.value(item)
            self.out += b"e"
            return
        small = len(value) <= 3
        self.out += b"" if small else b"("
        for item in value:
            self.value(item)
        self.out += b")\x85\x86\x87"[len(value) : len(value) + 1] if small else b"t"


def dumps(value: Any) -> bytes:
    """The pickle of `value` as PyTorch's pickler lays out a Flight Recorder dump."""
    writer = _Writer()
    writer.value(value)
    return bytes(writer.out + b".")
