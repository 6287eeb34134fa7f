"""The fast way to read a Flight Recorder pickle: every opcode checked first, then the data built in C.

`_pickle.load_data` runs every opcode in Python (about 0.3 us each: a 2,000-entry dump holds ~160,000). Here
the pickle is first walked opcode by opcode without building anything (`checked_opcodes`): a regular
expression steps over runs of the fixed-width opcodes `_pickle.OPCODES` allows, in C, and Python steps only
over the length-prefixed ones (strings, bytes, long numbers) and the named globals (each checked against
`_pickle.ALLOWED_GLOBALS`). The walk tells each opcode's boundary exactly, so an opcode hidden in a string's
bytes is never taken for one. Only a pickle whose every opcode is one `_pickle.OPCODES` allows, that ends
with STOP and whose globals are all allowed goes on to Python's C unpickler, whose `find_class` is the same
table (it resolves nothing else, never imports a module) and whose `persistent_load` refuses: so nothing but
dicts, lists, tuples, strings, bytes, numbers, booleans, None and the allowed globals' plain-Python results
can be built, and no code a pickle names can run. Anything else (a refused opcode or global, a pickle cut
short, a text opcode of protocol 0, an error while building) is left to `_pickle.load_data`'s stack machine,
which reads it or refuses it in one line as before. The two read every pickle PyTorch or Python writes
alike; on a damaged one the C unpickler may read memo slots written out of order, and ignores what is left
on the stack at STOP, where the stack machine refuses (data either way, nothing run).

A dump of 2,000 entries: the walk ~4 ms, the C build ~7 ms, against ~50 ms for the stack machine.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import re
from typing import Any

from traceview.parsers.flight_recorder._pickle import ALLOWED_GLOBALS, OPCODES, Allowed

_COMMON_FIRST = b"hqr]KM(aeu}"
"""Opcodes tried first in the run pattern (the commonest in a dump: the memo's, small numbers, containers)."""
LONG1_IN_RUN = 8
"""LONG1 numbers of up to this many bytes are stepped over in C (a nanosecond time takes 5)."""
_PREFIX_BYTES = {-2: 1, -3: 4, -4: 4, -5: 8}
"""pickletools' code of a length-prefixed argument -> the width of its length."""

_ALLOWED = [op for op in pickletools.opcodes if op.name in OPCODES]
_FIXED = {op.code.encode("latin-1"): 0 if op.arg is None else op.arg.n for op in _ALLOWED}
_FIXED = {code: width for code, width in _FIXED.items() if width >= 0 and code != b"."}
_PREFIXED = {ord(op.code): _PREFIX_BYTES[op.arg.n] for op in _ALLOWED if op.arg and op.arg.n in _PREFIX_BYTES}
_ORDERED = sorted(_FIXED, key=lambda code: (code not in _COMMON_FIRST, _COMMON_FIRST.find(code), code))
_LONG1 = [b"\\x8a" + re.escape(bytes([size])) + b"." * size for size in range(LONG1_IN_RUN + 1)]
_RUN = re.compile(  # possessive: a run is never given back (each opcode's first byte tells it)
    b"(?:" + b"|".join([re.escape(code) + b"." * _FIXED[code] for code in _ORDERED] + _LONG1) + b")*+",
    re.DOTALL,
)
_STOP, _GLOBAL = ord("."), ord("c")


def _global_end(data: bytes, pos: int) -> int | None:
    """The position after a GLOBAL's two lines (module, name), when it names an allowed global."""
    module_end = data.find(b"\n", pos)
    name_end = data.find(b"\n", module_end + 1) if module_end >= 0 else -1
    if name_end < 0:
        return None
    named = (data[pos:module_end].decode("latin-1"), data[module_end + 1 : name_end].decode("latin-1"))
    return name_end + 1 if named in ALLOWED_GLOBALS else None


def checked_opcodes(data: bytes) -> bool:
    """Whether every opcode up to the first STOP is one `_pickle.OPCODES` allows (the text ones of protocol 0
    but GLOBAL left out), with its whole argument inside `data`, and every GLOBAL an allowed one."""
    run, pos, end = _RUN.match, 0, len(data)
    while True:
        pos = run(data, pos).end()  # type: ignore[union-attr]  # a `*+` pattern always matches
        if pos >= end:
            return False
        code = data[pos]
        if code == _STOP:
            return True
        width = _PREFIXED.get(code)
        if width is not None:
            size = int.from_bytes(data[pos + 1 : pos + 1 + width], "little")
            pos += 1 + width + size
            if pos > end:
                return False
        elif code == _GLOBAL:
            after = _global_end(data, pos + 1)
            if after is None:
                return False
            pos = after
        else:
            return False


class _TableUnpickler(pickle.Unpickler):
    """Python's unpickler that resolves only `_pickle.ALLOWED_GLOBALS` and no persistent id."""

    def find_class(self, module: str, name: str) -> Any:
        function = ALLOWED_GLOBALS.get((module, name))
        if function is None:
            raise pickle.UnpicklingError(f"global {module}.{name} not allowed")
        return Allowed(f"{module}.{name}", function)

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("a persistent id (never in a Flight Recorder dump)")


_BUILD_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    LookupError,
    AttributeError,
    OverflowError,
    RecursionError,
)
"""What Python's unpickler raises on a pickle that is not whole or not well formed."""
NOT_READ = object()
"""What `checked_load` returns for a pickle it leaves to the stack machine."""


def checked_load(data: bytes) -> Any:
    """The value a pickle holds when its opcodes check (`checked_opcodes`) and it builds; else `NOT_READ`."""
    if not checked_opcodes(data):
        return NOT_READ
    try:
        return _TableUnpickler(io.BufferedReader(io.BytesIO(data))).load()  # peek: read ahead in C
    except _BUILD_ERRORS:  # the stack machine reads it, or names what is wrong in one line
        return NOT_READ
