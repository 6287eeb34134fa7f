"""`record`: the project's frozen dataclass, with one shared `__repr__`, `__eq__` and `__hash__`.

`@record` is `@dataclass(frozen=True)` (every dataclass tool reads it: `fields`, `replace`, `asdict`,
pickling; mypy checks it as frozen), and its instances repr, compare and hash exactly as that dataclass's
would. The difference is what creating the class costs. Python 3.11's `dataclass` compiles each method it
writes from source text, one `exec` each: six for a frozen class (`__init__`, `__setattr__`, `__delattr__`,
`__repr__`, `__eq__`, `__hash__`), about 0.9 ms for a class of eight fields. The project defines some 150 such
classes, and a command imports about 120 of them at every start. `__repr__`, `__eq__` and `__hash__` read the
fields by name, so one shared function of each serves every class; `record` leaves `dataclass` the three it
must write (docs/scaling.md, "What a process pays before it reads a byte").

A method the class body defines itself is kept, as `dataclass` keeps it.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

Klass = TypeVar("Klass", bound=type[Any])

_COMPARED = "__record_compared__"
_HASHED = "__record_hashed__"


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving an instance's values of `names` as a tuple (the tuple `dataclass` compares and
    hashes, one field included)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda instance: (one(instance),)
    return lambda instance: ()


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({shown})"


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = getattr(self.__class__, _COMPARED)
    return compared(self) == compared(other)


def _hash(self: Any) -> int:
    return hash(getattr(self.__class__, _HASHED)(self))


_SHARED: dict[str, Callable[..., Any]] = {"__repr__": _repr, "__eq__": _eq, "__hash__": _hash}


def _shared_methods(klass: Klass) -> Klass:
    """`klass` (a frozen dataclass made without repr and eq) given the shared methods `dataclass(frozen=True)`
    would have written, where its body defines none (a body's `__eq__` alone leaves `__hash__` None: as
    `dataclass`, that one is written)."""
    own = vars(klass)
    fields = dataclasses.fields(klass)
    setattr(klass, _COMPARED, staticmethod(_values(tuple(f.name for f in fields if f.compare))))
    hashed = (f.name for f in fields if (f.compare if f.hash is None else f.hash))
    setattr(klass, _HASHED, staticmethod(_values(tuple(hashed))))
    kept = {name for name in _SHARED if name in own}
    if "__eq__" in own and own.get("__hash__") is None:
        kept.discard("__hash__")
    for name, method in _SHARED.items():
        if name not in kept:
            setattr(klass, name, method)
    return klass


@overload
def record(klass: Klass, /) -> Klass: ...
@overload
def record(*, kw_only: bool = False) -> Callable[[Klass], Klass]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(klass: Klass | None = None, /, *, kw_only: bool = False) -> Klass | Callable[[Klass], Klass]:
    """`@record` or `@record(kw_only=True)`: `@dataclass(frozen=True[, kw_only=True])`, made cheaper to
    create (module docstring)."""

    def made(body: Klass) -> Klass:
        dataclasses.dataclass(body, frozen=True, repr=False, eq=False, kw_only=kw_only)  # in place
        return _shared_methods(body)

    return made if klass is None else made(klass)
