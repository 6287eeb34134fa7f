"""A pickle read as data: the opcodes a Flight Recorder dump is made of, and nothing that runs code.

The standard unpickler looks up any global a pickle names and calls it; a dump is untrusted data, so it is
never used. Here each opcode is decoded by hand and run on a small stack machine that builds dicts, lists,
tuples, strings, numbers, bytes, booleans and None (`_VALUES`, `_BUILDERS`, `_MEMO`). A global is accepted
only when `ALLOWED_GLOBALS` names it (the TorchScript pickler's list builders, which older PyTorch versions
wrote for typed lists), and it is applied as the plain Python function that table maps it to; torch is never
imported. Any other opcode or global is refused (`RefusedPickle`) before anything is built from it, and so is
a pickle cut short. The opcodes' codes and layouts are the pickle protocol's (0 to 5), named as
`pickletools` names them.
"""

from __future__ import annotations

import pickletools
import struct
from collections.abc import Callable
from typing import Any

MAX_OPCODES = 200_000_000
"""Most opcodes one dump may hold (a dump of 20,000 entries with deep stacks is some millions)."""


class RefusedPickle(ValueError):
    """The pickle holds something a Flight Recorder dump never does (a foreign global, an opcode that builds
    objects), or is not a whole pickle; the message says what, in a few words."""


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _type_tagged(value: Any, _type: Any = None) -> Any:
    return value


ALLOWED_GLOBALS: dict[tuple[str, str], Callable[..., Any]] = {
    ("torch.jit._pickle", "build_intlist"): _as_list,
    ("torch.jit._pickle", "build_doublelist"): _as_list,
    ("torch.jit._pickle", "build_boollist"): _as_list,
    ("torch.jit._pickle", "build_genericlist"): _as_list,
    ("torch.jit._pickle", "build_stringlist"): _as_list,
    ("torch.jit._pickle", "restore_type_tag"): _type_tagged,
}
"""The named globals a Flight Recorder dump may hold, each mapped to what it means as plain data."""

_U1, _U2, _U4, _U8 = (struct.Struct(f"<{code}").unpack_from for code in "BHIQ")
_I4, _F8 = struct.Struct("<i").unpack_from, struct.Struct(">d").unpack_from


class _Allowed:
    """An allowed global, on the stack until REDUCE applies it."""

    def __init__(self, name: str, function: Callable[..., Any]) -> None:
        self.name, self.function = name, function


class _State:
    """The bytes, the stack, the memo and the mark positions of one pickle being read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.marks: list[int] = []

    def take(self, pos: int, size: int) -> bytes:
        end = pos + size
        if end > len(self.data):
            raise RefusedPickle("not a whole pickle (cut short)")
        return self.data[pos:end]

    def line(self, pos: int) -> tuple[str, int]:
        end = self.data.find(b"\n", pos)
        if end < 0:
            raise RefusedPickle("not a whole pickle (cut short)")
        return self.data[pos:end].decode("latin-1"), end + 1

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise RefusedPickle("an item list without its mark")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items


def _sized(width: Callable[[bytes, int], tuple[int]], size: int, text: bool) -> Callable[[_State, int], int]:
    """A value opcode whose argument is a length of `size` bytes, then that many bytes (text or bytes)."""

    def run(state: _State, pos: int) -> int:
        length: int = width(state.data, pos)[0]
        raw = state.take(pos + size, length)
        state.stack.append(raw.decode("utf-8", "surrogatepass") if text else raw)
        return pos + size + length

    return run


def _fixed(read: Callable[[bytes, int], tuple[Any]], size: int) -> Callable[[_State, int], int]:
    def run(state: _State, pos: int) -> int:
        state.take(pos, size)
        state.stack.append(read(state.data, pos)[0])
        return pos + size

    return run


def _long(size: int) -> Callable[[_State, int], int]:
    def run(state: _State, pos: int) -> int:
        length: int = (_U1 if size == 1 else _U4)(state.data, pos)[0]
        state.stack.append(int.from_bytes(state.take(pos + size, length), "little", signed=True))
        return pos + size + length

    return run


def _text_number(state: _State, pos: int) -> int:
    text, pos = state.line(pos)
    value = text.rstrip("L")
    state.stack.append({"00": False, "01": True}.get(value) if value in ("00", "01") else int(value))
    return pos


def _text_float(state: _State, pos: int) -> int:
    text, pos = state.line(pos)
    state.stack.append(float(text))
    return pos


def _text_unicode(state: _State, pos: int) -> int:
    end = state.data.find(b"\n", pos)
    if end < 0:
        raise RefusedPickle("not a whole pickle (cut short)")
    state.stack.append(state.data[pos:end].decode("raw-unicode-escape"))
    return end + 1


def _constant(value: Any) -> Callable[[_State, int], int]:
    def run(state: _State, pos: int) -> int:
        state.stack.append(value() if callable(value) else value)
        return pos

    return run


_VALUES: dict[int, Callable[[_State, int], int]] = {
    ord("K"): _fixed(_U1, 1),  # BININT1
    ord("M"): _fixed(_U2, 2),  # BININT2
    ord("J"): _fixed(_I4, 4),  # BININT
    ord("G"): _fixed(_F8, 8),  # BINFLOAT
    ord("I"): _text_number,  # INT
    ord("L"): _text_number,  # LONG
    ord("F"): _text_float,  # FLOAT
    0x8A: _long(1),  # LONG1
    0x8B: _long(4),  # LONG4
    ord("X"): _sized(_U4, 4, True),  # BINUNICODE
    0x8C: _sized(_U1, 1, True),  # SHORT_BINUNICODE
    0x8D: _sized(_U8, 8, True),  # BINUNICODE8
    ord("V"): _text_unicode,  # UNICODE
    ord("B"): _sized(_U4, 4, False),  # BINBYTES
    ord("C"): _sized(_U1, 1, False),  # SHORT_BINBYTES
    0x8E: _sized(_U8, 8, False),  # BINBYTES8
    ord("N"): _constant(None),  # NONE
    0x88: _constant(True),  # NEWTRUE
    0x89: _constant(False),  # NEWFALSE
    ord("}"): _constant(dict),  # EMPTY_DICT
    ord("]"): _constant(list),  # EMPTY_LIST
    ord(")"): _constant(tuple),  # EMPTY_TUPLE
}
"""Opcodes that push one value."""


def _items(state: _State, pos: int, name: str) -> int:
    stack = state.stack
    if name in ("SETITEM", "SETITEMS"):
        items = stack[-2:] if name == "SETITEM" else state.pop_mark()
        if name == "SETITEM":
            del stack[-2:]
        target = stack[-1] if stack else None
        if not isinstance(target, dict) or len(items) % 2:
            raise RefusedPickle(f"{name} on a value it does not apply to")
        for index in range(0, len(items), 2):
            if isinstance(items[index], list | dict):
                raise RefusedPickle("a dict key that is a list or a dict")
            target[items[index]] = items[index + 1]
    else:
        items = [stack.pop()] if name == "APPEND" else state.pop_mark()
        if not stack or not isinstance(stack[-1], list):
            raise RefusedPickle(f"{name} on a value it does not apply to")
        stack[-1].extend(items)
    return pos


def _collection(state: _State, pos: int, name: str) -> int:
    if name == "MARK":
        state.marks.append(len(state.stack))
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        count = int(name[-1])
        items = state.stack[-count:]
        if len(items) < count:
            raise IndexError(name)
        del state.stack[-count:]
        state.stack.append(tuple(items))
    elif name in ("TUPLE", "LIST"):
        items = state.pop_mark()
        state.stack.append(tuple(items) if name == "TUPLE" else items)
    elif name == "DICT":
        items = state.pop_mark()
        state.stack.append(dict(zip(items[::2], items[1::2], strict=True)))
    elif name == "POP":
        state.stack.pop()
    else:
        return _items(state, pos, name)
    return pos


def _memo(state: _State, pos: int, name: str) -> int:
    if name in ("PUT", "GET"):
        text, pos = state.line(pos)
        index = int(text)
    elif name in ("BINPUT", "BINGET"):
        index, pos = state.take(pos, 1)[0], pos + 1
    elif name in ("LONG_BINPUT", "LONG_BINGET"):
        index, pos = _U4(state.take(pos, 4), 0)[0], pos + 4
    else:  # MEMOIZE
        index = len(state.memo)
    if name.endswith("GET"):
        if index not in state.memo:
            raise RefusedPickle(f"memo {index} read before it was written")
        state.stack.append(state.memo[index])
    else:
        state.memo[index] = state.stack[-1]
    return pos


def _global(state: _State, pos: int, name: str) -> int:
    if name == "GLOBAL":
        module, pos = state.line(pos)
        attribute, pos = state.line(pos)
    else:  # STACK_GLOBAL
        attribute, module = str(state.stack.pop()), str(state.stack.pop())
    function = ALLOWED_GLOBALS.get((module, attribute))
    if function is None:
        shown = f"{module}.{attribute}"[:80]
        raise RefusedPickle(f"global {shown!r} (not one a Flight Recorder dump writes; nothing was run)")
    state.stack.append(_Allowed(f"{module}.{attribute}", function))
    return pos


def _reduce(state: _State, pos: int, _name: str) -> int:
    arguments, function = state.stack.pop(), state.stack.pop()
    if not isinstance(function, _Allowed) or not isinstance(arguments, tuple):
        raise RefusedPickle("REDUCE of something that is not an allowed global")
    try:
        state.stack.append(function.function(*arguments))
    except TypeError:
        raise RefusedPickle(f"{function.name} with arguments it never takes") from None
    return pos


def _skip(size: int) -> Callable[[_State, int, str], int]:
    def run(state: _State, pos: int, _name: str) -> int:
        state.take(pos, size)
        return pos + size

    return run


_HANDLERS: dict[str, Callable[[_State, int, str], int]] = {
    **dict.fromkeys(("MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "LIST", "DICT", "POP"), _collection),
    **dict.fromkeys(("SETITEM", "SETITEMS", "APPEND", "APPENDS"), _collection),
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET", "LONG_BINGET"), _memo),
    **dict.fromkeys(("GLOBAL", "STACK_GLOBAL"), _global),
    "REDUCE": _reduce,
    "PROTO": _skip(1),
    "FRAME": _skip(8),
}
"""Opcodes that build, remember or look up (by pickletools' name)."""
_BUILDERS: dict[int, tuple[str, Callable[[_State, int, str], int]]] = {
    ord(op.code): (op.name, _HANDLERS[op.name]) for op in pickletools.opcodes if op.name in _HANDLERS
}
_STOP = ord(".")


def _refused(code: int) -> RefusedPickle:
    known = pickletools.code2op.get(chr(code))  # type: ignore[attr-defined]
    if known is None:
        return RefusedPickle(f"not a pickle opcode: byte 0x{code:02x} (damaged)")
    return RefusedPickle(f"opcode {known.name} (builds objects; a Flight Recorder dump never holds it)")


_BINGET, _BINPUT, _LONG_BINPUT, _APPEND = ord("h"), ord("q"), ord("r"), ord("a")
_BINUNICODE, _BININT1, _MARK = ord("X"), ord("K"), ord("(")


def _run(state: _State) -> int:
    """Run the pickle's opcodes up to STOP on `state`; returns how many ran. The commonest opcodes (the
    memo's, short strings and integers, MARK, APPEND) are run in the loop itself."""
    data, stack, memo = state.data, state.stack, state.memo
    values, builders, pos, size, count = _VALUES, _BUILDERS, 0, len(state.data), 0
    while pos < size:
        code = data[pos]
        pos += 1
        count += 1
        if code == _BINGET:
            stack.append(memo[data[pos]])
            pos += 1
        elif code == _BINUNICODE:
            end = pos + 4 + _U4(data, pos)[0]
            if end > size:
                raise IndexError(pos)
            stack.append(data[pos + 4 : end].decode("utf-8", "surrogatepass"))
            pos = end
        elif code == _BININT1:
            stack.append(data[pos])
            pos += 1
        elif code == _MARK:
            state.marks.append(len(stack))
        elif code in (_BINPUT, _LONG_BINPUT):
            width = 1 if code == _BINPUT else 4
            memo[data[pos] if width == 1 else _U4(data, pos)[0]] = stack[-1]
            pos += width
        elif code in values:
            pos = values[code](state, pos)
        elif code == _APPEND and len(stack) > 1 and type(stack[-2]) is list:
            stack[-2].append(stack.pop())
        elif code in builders:
            name, handler = builders[code]
            pos = handler(state, pos, name)
        elif code == _STOP:
            return count
        else:
            raise _refused(code)
    raise RefusedPickle("not a whole pickle (cut short: no STOP)")


def load_data(data: bytes) -> Any:
    """The value a pickle holds, read as data (module docstring); raises `RefusedPickle` for anything a
    Flight Recorder dump never holds, and for a pickle cut short."""
    state = _State(data)
    try:
        count = _run(state)
    except KeyError as missing:
        raise RefusedPickle(f"memo {missing} read before it was written") from None
    except (IndexError, struct.error):
        raise RefusedPickle("not a whole pickle (cut short or damaged)") from None
    except UnicodeDecodeError:
        raise RefusedPickle("a string that is not UTF-8 (damaged)") from None
    except ValueError as error:
        if isinstance(error, RefusedPickle):
            raise
        raise RefusedPickle(f"a malformed value ({str(error)[:60]})") from None
    if len(state.stack) != 1 or state.marks or count > MAX_OPCODES:
        raise RefusedPickle("not a whole pickle (cut short)")
    return state.stack[0]
