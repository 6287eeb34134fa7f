"""A pickle read as data: the opcodes a Flight Recorder dump is made of, and nothing that runs code.

The standard unpickler looks up any global a pickle names and calls it; a dump is untrusted data, so it is
never used. Here each opcode is decoded by hand and run on a small stack machine (`_Machine`) that builds
dicts, lists, tuples, strings, numbers, bytes, booleans and None. `OPCODES` is the table of what is run: each
allowed opcode's byte and the machine's method that runs it; every other byte is refused before anything is
built from it, and so is a pickle cut short. A global is accepted only when `ALLOWED_GLOBALS` names it (the
TorchScript pickler's list builders, which older PyTorch versions wrote for typed lists), and it is applied
as the plain Python function that table maps it to; torch is never imported. The opcodes' codes and layouts
are the pickle protocol's (0 to 5), named as `pickletools` names them.

Speed (the dumps of a thousand ranks are read in one run): the loop runs the commonest opcodes of PyTorch's
dumps itself (`_HOT`) and dispatches the others through a 256-slot list of bound methods; the memo is a list
(the picklers PyTorch uses number it 0, 1, 2, ...: an index out of that order is refused); numbers are read
with `struct`.
"""

from __future__ import annotations

import pickletools
import struct
from collections.abc import Callable
from typing import Any

from traceview.parsers.flight_recorder._pickle_values import CUT_SHORT, U2, U4, RefusedPickle, StackValues


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

OPCODES: dict[str, str] = {
    # values
    "BININT1": "binint1",
    "BININT2": "binint2",
    "BININT": "binint",
    "LONG1": "long1",
    "LONG4": "long4",
    "INT": "text_int",
    "LONG": "text_int",
    "BINFLOAT": "binfloat",
    "FLOAT": "text_float",
    "BINUNICODE": "binunicode",
    "SHORT_BINUNICODE": "short_binunicode",
    "BINUNICODE8": "binunicode8",
    "UNICODE": "text_unicode",
    "BINBYTES": "binbytes",
    "SHORT_BINBYTES": "short_binbytes",
    "BINBYTES8": "binbytes8",
    "NONE": "none",
    "NEWTRUE": "true",
    "NEWFALSE": "false",
    "EMPTY_DICT": "empty_dict",
    "EMPTY_LIST": "empty_list",
    "EMPTY_TUPLE": "empty_tuple",
    # collections
    "MARK": "mark",
    "TUPLE": "make_tuple",
    "TUPLE1": "tuple1",
    "TUPLE2": "tuple2",
    "TUPLE3": "tuple3",
    "LIST": "make_list",
    "DICT": "make_dict",
    "POP": "pop",
    "APPEND": "append",
    "APPENDS": "appends",
    "SETITEM": "setitem",
    "SETITEMS": "setitems",
    # the memo
    "BINGET": "binget",
    "LONG_BINGET": "long_binget",
    "GET": "text_get",
    "BINPUT": "binput",
    "LONG_BINPUT": "long_binput",
    "PUT": "text_put",
    "MEMOIZE": "memoize",
    # globals, framing, the end
    "GLOBAL": "text_global",
    "STACK_GLOBAL": "stack_global",
    "REDUCE": "reduce",
    "PROTO": "skip1",
    "FRAME": "skip8",
    "STOP": "stop",
}
"""pickletools' name of each opcode a Flight Recorder dump may hold -> the `_Machine` method that runs it."""
_CODES: tuple[tuple[int, str], ...] = tuple(
    (ord(op.code), OPCODES[op.name]) for op in pickletools.opcodes if op.name in OPCODES
)

_HOT = b"h(]eKuM}Nra"
"""The codes the machine's loop runs itself: BINGET, MARK, EMPTY_LIST, APPENDS, BININT1, SETITEMS, BININT2,
EMPTY_DICT, NONE, LONG_BINPUT, APPEND (the commonest in PyTorch's dumps first)."""


class _Allowed:
    """An allowed global, on the stack until REDUCE applies it."""

    __slots__ = ("function", "name")

    def __init__(self, name: str, function: Callable[..., Any]) -> None:
        self.name, self.function = name, function


class _Machine(StackValues):
    """One pickle being read (its state and value opcodes: `StackValues`), with the opcodes that build
    collections, use the memo, apply an allowed global or stop; each opcode's method takes the position after
    the opcode's byte and returns the position after its argument (-1: STOP)."""

    __slots__ = ()

    def table(self) -> list[Callable[[int], int]]:
        """The 256-slot dispatch table: each allowed opcode's method, `refuse` elsewhere."""
        slots: list[Callable[[int], int]] = [self.refuse] * 256
        for code, method in _CODES:
            slots[code] = getattr(self, method)
        return slots

    def run(self) -> None:
        """Every opcode up to STOP. The commonest (the memo's, small numbers, empty containers, MARK, and
        APPENDS and SETITEMS onto the container below their mark) are run in the loop itself, in the order of
        their frequency in PyTorch's dumps, as their methods run them; the others, and any of these on
        something they do not apply to (refused there), through the table."""
        data, table, pos = self.data, self.table(), 0
        stack, memo, marks, push = self.stack, self.memo, self.marks, self.push
        (
            binget,
            mark,
            empty_list,
            appends,
            binint1,
            setitems,
            binint2,
            empty_dict,
            none,
            long_binput,
            append,
        ) = _HOT
        while pos >= 0:  # the opcodes' codes are locals: read faster than the module's names
            code = data[pos]
            if code == binget:
                push(memo[data[pos + 1]])
                pos += 2
            elif code == mark:
                marks.append(len(stack))
                pos += 1
            elif code == empty_list:
                push([])
                pos += 1
            elif code == appends and marks and marks[-1] and type(stack[marks[-1] - 1]) is list:
                start = marks.pop()
                stack[start - 1].extend(stack[start:])
                del stack[start:]
                pos += 1
            elif code == binint1:
                push(data[pos + 1])
                pos += 2
            elif code == setitems and marks and self.items_onto_dict(marks[-1]):
                pos += 1
            elif code == binint2:
                push(U2(data, pos + 1)[0])
                pos += 3
            elif code == empty_dict:
                push({})
                pos += 1
            elif code == none:
                push(None)
                pos += 1
            elif code == long_binput and U4(data, pos + 1)[0] == len(memo):
                memo.append(stack[-1])
                pos += 5
            elif code == append and type(stack[-2]) is list:
                stack[-2].append(stack.pop())
                pos += 1
            else:
                pos = table[code](pos + 1)

    def items_onto_dict(self, start: int) -> bool:
        """SETITEMS where the value below the mark at `start` is a dict and the items pair up: done (True);
        else nothing done (False: the table's method refuses it)."""
        stack = self.stack
        if not start or type(stack[start - 1]) is not dict or (len(stack) - start) % 2:
            return False
        self.marks.pop()
        items = stack[start:]
        del stack[start:]
        self._set(0, items)
        return True

    # collections ---------------------------------------------------------------------------------------
    def mark(self, pos: int) -> int:
        self.marks.append(len(self.stack))
        return pos

    def _pop_mark(self) -> list[Any]:
        if not self.marks:
            raise RefusedPickle("an item list without its mark")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def make_tuple(self, pos: int) -> int:
        self.push(tuple(self._pop_mark()))
        return pos

    def tuple1(self, pos: int) -> int:
        self.stack[-1] = (self.stack[-1],)
        return pos

    def tuple2(self, pos: int) -> int:
        return self._tuple_of(pos, 2)

    def tuple3(self, pos: int) -> int:
        return self._tuple_of(pos, 3)

    def _tuple_of(self, pos: int, count: int) -> int:
        stack = self.stack
        if len(stack) < count:
            raise RefusedPickle(CUT_SHORT)
        items = tuple(stack[-count:])
        del stack[-count:]
        self.push(items)
        return pos

    def make_list(self, pos: int) -> int:
        self.push(self._pop_mark())
        return pos

    def make_dict(self, pos: int) -> int:
        items = self._pop_mark()
        self.push({})
        return self._set(pos, items)

    def pop(self, pos: int) -> int:
        self.stack.pop()
        return pos

    def append(self, pos: int) -> int:
        value = self.stack.pop()
        target = self.stack[-1]
        if type(target) is not list:
            raise RefusedPickle("APPEND on a value it does not apply to")
        target.append(value)
        return pos

    def appends(self, pos: int) -> int:
        items = self._pop_mark()
        target = self.stack[-1]
        if type(target) is not list:
            raise RefusedPickle("APPENDS on a value it does not apply to")
        target.extend(items)
        return pos

    def setitem(self, pos: int) -> int:
        items = self.stack[-2:]
        del self.stack[-2:]
        return self._set(pos, items)

    def setitems(self, pos: int) -> int:
        return self._set(pos, self._pop_mark())

    def _set(self, pos: int, items: list[Any]) -> int:
        target = self.stack[-1]
        if type(target) is not dict or len(items) % 2:
            raise RefusedPickle("SETITEMS on a value it does not apply to")
        try:
            target.update(zip(items[::2], items[1::2], strict=True))
        except TypeError:
            raise RefusedPickle("a dict key that is a list or a dict") from None
        return pos

    # the memo ------------------------------------------------------------------------------------------
    def binget(self, pos: int) -> int:
        self.push(self.memo[self.data[pos]])
        return pos + 1

    def long_binget(self, pos: int) -> int:
        self.push(self.memo[U4(self.data, pos)[0]])
        return pos + 4

    def text_get(self, pos: int) -> int:
        text, pos = self._line(pos)
        index = int(text)
        if not 0 <= index < len(self.memo):
            raise RefusedPickle(f"memo {index} read before it was written")
        self.push(self.memo[index])
        return pos

    def binput(self, pos: int) -> int:
        self._put(self.data[pos])
        return pos + 1

    def long_binput(self, pos: int) -> int:
        self._put(U4(self.data, pos)[0])
        return pos + 4

    def text_put(self, pos: int) -> int:
        text, pos = self._line(pos)
        self._put(int(text))
        return pos

    def memoize(self, pos: int) -> int:
        self.memo.append(self.stack[-1])
        return pos

    def _put(self, index: int) -> None:
        memo = self.memo
        if index == len(memo):
            memo.append(self.stack[-1])
        elif 0 <= index < len(memo):
            memo[index] = self.stack[-1]
        else:
            raise RefusedPickle(f"memo {index} written out of order (not a pickle PyTorch writes)")

    # globals, framing, the end ---------------------------------------------------------------------------
    def text_global(self, pos: int) -> int:
        module, pos = self._line(pos)
        attribute, pos = self._line(pos)
        return self._global(pos, module, attribute)

    def stack_global(self, pos: int) -> int:
        attribute, module = str(self.stack.pop()), str(self.stack.pop())
        return self._global(pos, module, attribute)

    def _global(self, pos: int, module: str, attribute: str) -> int:
        function = ALLOWED_GLOBALS.get((module, attribute))
        if function is None:
            shown = f"{module}.{attribute}"[:80]
            raise RefusedPickle(f"global {shown!r} (not one a Flight Recorder dump writes; nothing was run)")
        self.push(_Allowed(f"{module}.{attribute}", function))
        return pos

    def reduce(self, pos: int) -> int:
        arguments, function = self.stack.pop(), self.stack.pop()
        if type(function) is not _Allowed or type(arguments) is not tuple:
            raise RefusedPickle("REDUCE of something that is not an allowed global")
        try:
            self.push(function.function(*arguments))
        except TypeError:
            raise RefusedPickle(f"{function.name} with arguments it never takes") from None
        return pos

    def skip1(self, pos: int) -> int:
        return self._within(pos + 1)

    def skip8(self, pos: int) -> int:
        return self._within(pos + 8)

    def stop(self, _pos: int) -> int:
        return -1

    def refuse(self, pos: int) -> int:
        code = self.data[pos - 1]
        known = pickletools.code2op.get(chr(code))  # type: ignore[attr-defined]
        if known is None:
            raise RefusedPickle(f"not a pickle opcode: byte 0x{code:02x} (damaged)")
        raise RefusedPickle(f"opcode {known.name} (builds objects; a Flight Recorder dump never holds it)")


def load_data(data: bytes) -> Any:
    """The value a pickle holds, read as data (module docstring); raises `RefusedPickle` for anything a
    Flight Recorder dump never holds, and for a pickle cut short."""
    machine = _Machine(data)
    try:
        machine.run()
    except (IndexError, struct.error):
        raise RefusedPickle(CUT_SHORT) from None
    except UnicodeDecodeError:
        raise RefusedPickle("a string that is not UTF-8 (damaged)") from None
    except (ValueError, TypeError, AttributeError, RecursionError) as error:
        if isinstance(error, RefusedPickle):
            raise
        raise RefusedPickle(f"a malformed value ({str(error)[:60]})") from None
    if len(machine.stack) != 1 or machine.marks:
        raise RefusedPickle("not a whole pickle (cut short)")
    return machine.stack[0]
