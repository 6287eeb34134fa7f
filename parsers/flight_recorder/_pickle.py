"""A pickle read as data: the opcodes a Flight Recorder dump is made of, and nothing that runs code.

The standard unpickler looks up any global a pickle names and calls it; a dump is untrusted data, so it is
never used. Here the stream's opcodes are decoded by `pickletools.genops` (which only decodes) and run on a
small stack machine that builds dicts, lists, tuples, strings, numbers, bytes, booleans and None. A global
is accepted only when `ALLOWED_GLOBALS` names it (the TorchScript pickler's list builders, written by older
PyTorch versions for typed lists), and it is applied as the plain Python function that table maps it to;
torch is never imported. Any other opcode or global is refused (`RefusedPickle`) before anything is built
from it.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Callable, Iterator
from typing import Any

MAX_DEPTH_ITEMS = 50_000_000
"""Most opcodes one dump may hold (a dump of 20,000 entries with stacks is some millions)."""


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


class _Mark:
    """The MARK opcode's place holder on the stack."""


_MARK = _Mark()
_CONSTANTS: dict[str, Any] = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_VALUE_OPS = frozenset(
    [
        "INT",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG",
        "LONG1",
        "LONG4",
        "FLOAT",
        "BINFLOAT",
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
        "BINBYTES",
        "SHORT_BINBYTES",
        "BINBYTES8",
        "BYTEARRAY8",
    ]
)
_EMPTY: dict[str, Callable[[], Any]] = {"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple}
_IGNORED = frozenset({"PROTO", "FRAME", "STOP"})
_MEMO_PUT = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GET = frozenset({"GET", "BINGET", "LONG_BINGET"})
_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


class _Machine:
    """The stack, the memo and the mark positions of one pickle being read."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.marks: list[int] = []

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise RefusedPickle("an item list without its mark")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def top(self, kind: type | tuple[type, ...], op: str) -> Any:
        if not self.stack or not isinstance(self.stack[-1], kind):
            raise RefusedPickle(f"{op} on a value it does not apply to")
        return self.stack[-1]

    def step(self, name: str, arg: Any) -> None:
        if name in _VALUE_OPS:
            self.stack.append(arg)
        elif name in _CONSTANTS:
            self.stack.append(_CONSTANTS[name])
        elif name in _EMPTY:
            self.stack.append(_EMPTY[name]())
        elif name in _MEMO_PUT:
            self.memo[arg] = self.stack[-1] if self.stack else None
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self.stack[-1] if self.stack else None
        elif name in _MEMO_GET:
            if arg not in self.memo:
                raise RefusedPickle(f"memo {arg} read before it was written")
            self.stack.append(self.memo[arg])
        elif name not in _IGNORED:
            self.collection_step(name, arg)

    def collection_step(self, name: str, arg: Any) -> None:
        if name == "MARK":
            self.marks.append(len(self.stack))
        elif name in ("SETITEM", "SETITEMS"):
            items = self.stack[-2:] if name == "SETITEM" else self.pop_mark()
            if name == "SETITEM":
                del self.stack[-2:]
            target = self.top(dict, name)
            for key, value in zip(items[::2], items[1::2], strict=False):
                target[_hashable(key)] = value
        elif name in ("APPEND", "APPENDS"):
            items = [self.stack.pop()] if name == "APPEND" else self.pop_mark()
            self.top(list, name).extend(items)
        elif name in ("TUPLE", "LIST", "DICT"):
            items = self.pop_mark()
            built = {"TUPLE": tuple, "LIST": list}.get(name)
            self.stack.append(built(items) if built else dict(zip(items[::2], items[1::2], strict=False)))
        elif name in _TUPLES:
            count = _TUPLES[name]
            items = self.stack[-count:]
            del self.stack[-count:]
            self.stack.append(tuple(items))
        elif name == "POP":
            self.stack.pop()
        else:
            self.code_step(name, arg)

    def code_step(self, name: str, arg: Any) -> None:
        if name == "GLOBAL":
            module, _, attribute = str(arg).partition(" ")
            self.stack.append(_allowed(module, attribute))
        elif name == "STACK_GLOBAL":
            attribute, module = self.stack.pop(), self.stack.pop()
            self.stack.append(_allowed(str(module), str(attribute)))
        elif name == "REDUCE":
            arguments, function = self.stack.pop(), self.stack.pop()
            if not isinstance(function, _Allowed) or not isinstance(arguments, tuple):
                raise RefusedPickle("REDUCE of something that is not an allowed global")
            self.stack.append(function.apply(arguments))
        else:
            raise RefusedPickle(f"opcode {name} (builds objects; a Flight Recorder dump never holds it)")


class _Allowed:
    """An allowed global, on the stack until REDUCE applies it."""

    def __init__(self, name: str, function: Callable[..., Any]) -> None:
        self.name, self.function = name, function

    def apply(self, arguments: tuple[Any, ...]) -> Any:
        try:
            return self.function(*arguments)
        except TypeError:
            raise RefusedPickle(f"{self.name} with arguments it never takes") from None


def _allowed(module: str, attribute: str) -> _Allowed:
    function = ALLOWED_GLOBALS.get((module, attribute))
    if function is None:
        shown = f"{module}.{attribute}"[:80]
        raise RefusedPickle(f"global {shown!r} (not one a Flight Recorder dump writes; nothing was run)")
    return _Allowed(f"{module}.{attribute}", function)


def _hashable(key: Any) -> Any:
    if isinstance(key, list | dict):
        raise RefusedPickle("a dict key that is a list or a dict")
    return key


def _opcodes(data: bytes) -> Iterator[tuple[str, Any]]:
    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(io.BytesIO(data))):
            if count > MAX_DEPTH_ITEMS:
                raise RefusedPickle(f"more than {MAX_DEPTH_ITEMS:,} opcodes")
            yield opcode.name, arg
    except RefusedPickle:
        raise
    except (ValueError, EOFError, UnicodeDecodeError) as error:
        raise RefusedPickle(f"not a whole pickle (cut short or damaged: {str(error)[:80]})") from None


def load_data(data: bytes) -> Any:
    """The value a pickle holds, read as data (module docstring); raises `RefusedPickle` for anything a
    Flight Recorder dump never holds, and for a pickle cut short."""
    machine = _Machine()
    stopped = False
    try:
        for name, arg in _opcodes(data):
            machine.step(name, arg)
            stopped = name == "STOP"
    except IndexError:
        raise RefusedPickle("an opcode with too few values on the stack") from None
    if not stopped or len(machine.stack) != 1 or machine.marks:
        raise RefusedPickle("not a whole pickle (cut short)")
    return machine.stack[0]
