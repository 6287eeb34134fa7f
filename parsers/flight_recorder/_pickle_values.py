"""The stack machine's state and its value opcodes (`traceview.parsers.flight_recorder._pickle`): numbers,
strings, bytes, constants and empty containers pushed on the stack, each read from the pickle's bytes with
`struct`, a read past the end refused as a pickle cut short."""

from __future__ import annotations

import struct
from typing import Any

U2, _I4, U4, _U8 = (struct.Struct(f"<{code}").unpack_from for code in "HiIQ")
_F8 = struct.Struct(">d").unpack_from
CUT_SHORT = "not a whole pickle (cut short or damaged)"


class RefusedPickle(ValueError):
    """The pickle holds something a Flight Recorder dump never does (a foreign global, an opcode that builds
    objects), or is not a whole pickle; the message says what, in a few words."""


class StackValues:
    """The bytes, the stack, the memo and the mark positions of one pickle being read, and the methods of the
    opcodes that push a value; each takes the position after the opcode's byte and returns the position
    after its argument."""

    __slots__ = ("data", "end", "marks", "memo", "push", "stack")

    def __init__(self, data: bytes) -> None:
        self.data, self.end = data, len(data)
        self.stack: list[Any] = []
        self.memo: list[Any] = []
        self.marks: list[int] = []
        self.push = self.stack.append

    # values -------------------------------------------------------------------------------------------
    def binint1(self, pos: int) -> int:
        self.push(self.data[pos])
        return pos + 1

    def binint2(self, pos: int) -> int:
        self.push(U2(self.data, pos)[0])
        return pos + 2

    def binint(self, pos: int) -> int:
        self.push(_I4(self.data, pos)[0])
        return pos + 4

    def long1(self, pos: int) -> int:
        return self._long(pos + 1, self.data[pos])

    def long4(self, pos: int) -> int:
        return self._long(pos + 4, U4(self.data, pos)[0])

    def _long(self, start: int, length: int) -> int:
        end = self._within(start + length)
        self.push(int.from_bytes(self.data[start:end], "little", signed=True))
        return end

    def binfloat(self, pos: int) -> int:
        self.push(_F8(self.data, pos)[0])
        return pos + 8

    def binunicode(self, pos: int) -> int:
        return self._text(pos + 4, U4(self.data, pos)[0])

    def short_binunicode(self, pos: int) -> int:
        return self._text(pos + 1, self.data[pos])

    def binunicode8(self, pos: int) -> int:
        return self._text(pos + 8, _U8(self.data, pos)[0])

    def _text(self, start: int, length: int) -> int:
        end = self._within(start + length)
        self.push(self.data[start:end].decode("utf-8", "surrogatepass"))
        return end

    def binbytes(self, pos: int) -> int:
        return self._bytes(pos + 4, U4(self.data, pos)[0])

    def short_binbytes(self, pos: int) -> int:
        return self._bytes(pos + 1, self.data[pos])

    def binbytes8(self, pos: int) -> int:
        return self._bytes(pos + 8, _U8(self.data, pos)[0])

    def _bytes(self, start: int, length: int) -> int:
        end = self._within(start + length)
        self.push(self.data[start:end])
        return end

    def _within(self, end: int) -> int:
        if end > self.end:
            raise RefusedPickle(CUT_SHORT)
        return end

    def _line(self, pos: int) -> tuple[str, int]:
        end = self.data.find(b"\n", pos)
        if end < 0:
            raise RefusedPickle(CUT_SHORT)
        return self.data[pos:end].decode("latin-1"), end + 1

    def text_int(self, pos: int) -> int:
        text, pos = self._line(pos)
        value = text.rstrip("L")
        self.push({"00": False, "01": True}[value] if value in ("00", "01") else int(value))
        return pos

    def text_float(self, pos: int) -> int:
        text, pos = self._line(pos)
        self.push(float(text))
        return pos

    def text_unicode(self, pos: int) -> int:
        end = self.data.find(b"\n", pos)
        if end < 0:
            raise RefusedPickle(CUT_SHORT)
        self.push(self.data[pos:end].decode("raw-unicode-escape"))
        return end + 1

    def none(self, pos: int) -> int:
        self.push(None)
        return pos

    def true(self, pos: int) -> int:
        self.push(True)
        return pos

    def false(self, pos: int) -> int:
        self.push(False)
        return pos

    def empty_dict(self, pos: int) -> int:
        self.push({})
        return pos

    def empty_list(self, pos: int) -> int:
        self.push([])
        return pos

    def empty_tuple(self, pos: int) -> int:
        self.push(())
        return pos
