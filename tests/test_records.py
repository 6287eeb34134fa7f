"""`traceview.core.records.record` against the standard library's `dataclass(frozen=True)`: one class body
made both ways reprs, compares, hashes, replaces, pickles and refuses assignment alike; a method the body
defines is kept; and the package makes its frozen records with `record` (the cheaper class creation)."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from traceview.core.records import record

ROOT = Path(__file__).resolve().parents[1]


@record
class Span:
    start_us: float
    end_us: float = 0.0
    labels: list[str] = field(default_factory=list, compare=False)
    note: str = field(default="", repr=False)


@record(kw_only=True)
class Named:
    name: str
    size: int = 1


@record
class Empty:
    pass


@record
class OwnMethods:  # noqa: PLW1641 (an `__eq__` alone: the record writes the hash, as `dataclass` does)
    value: int

    def __repr__(self) -> str:
        return f"<{self.value}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OwnMethods) and abs(self.value) == abs(other.value)


def _both(annotations: dict[str, Any], defaults: dict[str, Any]) -> tuple[type[Any], type[Any]]:
    """One class body made by `dataclass(frozen=True)` and by `record`."""
    made = []
    for decorate in (dataclass(frozen=True), record):
        body = type("Body", (), {"__annotations__": dict(annotations), "__module__": __name__, **defaults})
        made.append(decorate(body))
    return made[0], made[1]


SHAPES = [
    ({}, {}),
    ({"a": "int"}, {}),
    ({"a": "int", "b": "str"}, {"b": "x"}),
    ({"a": "int", "tags": "list[str]"}, {"tags": field(default_factory=list, compare=False)}),
    ({"a": "int", "b": "float"}, {"b": field(default=2.5, hash=False)}),
    ({"a": "int", "b": "float"}, {"b": field(default=2.5, repr=False)}),
]


@pytest.mark.parametrize(("annotations", "defaults"), SHAPES)
def test_record_behaves_as_the_frozen_dataclass(
    annotations: dict[str, Any], defaults: dict[str, Any]
) -> None:
    stdlib, ours = _both(annotations, defaults)
    values = {name: (index + 1) * 3 for index, name in enumerate(annotations) if name not in defaults}
    other = {name: value + 1 for name, value in values.items()}
    theirs_a, ours_a = stdlib(**values), ours(**values)
    assert repr(ours_a) == repr(theirs_a)
    assert hash(ours_a) == hash(theirs_a)
    assert (ours_a == ours(**values)) is (theirs_a == stdlib(**values)) is True
    assert (ours_a == ours(**other)) is (theirs_a == stdlib(**other))
    assert ours_a.__eq__(theirs_a) is NotImplemented  # another class: not equal, as the dataclass
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(stdlib)]
    assert dataclasses.asdict(ours_a) == dataclasses.asdict(theirs_a)


def test_fields_outside_the_comparison_are_outside_the_hash_too() -> None:
    assert Span(1.0, 2.0, ["a"]) == Span(1.0, 2.0, ["b"])
    assert hash(Span(1.0, 2.0, ["a"], "x")) == hash(Span(1.0, 2.0, ["b"], "x")) == hash((1.0, 2.0, "x"))
    assert Span(1.0, 2.0, note="x") != Span(1.0, 2.0, note="y")  # out of the repr, not of the comparison
    assert Span(1.0, 2.0) != Span(1.0, 3.0)
    assert repr(Span(1.0, labels=["a"], note="hidden")) == "Span(start_us=1.0, end_us=0.0, labels=['a'])"


def test_record_is_frozen_and_works_with_the_dataclass_tools() -> None:
    span = Span(1.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        span.start_us = 5.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del span.end_us  # type: ignore[misc]
    moved = dataclasses.replace(span, start_us=3.0)
    assert (moved.start_us, moved.end_us, span.start_us) == (3.0, 2.0, 1.0)
    assert pickle.loads(pickle.dumps(moved)) == moved
    assert dataclasses.is_dataclass(span)
    assert {span, Span(1.0, 2.0)} == {span}


def test_keyword_only_and_empty_records() -> None:
    assert Named(name="ring", size=2) == Named(size=2, name="ring")
    with pytest.raises(TypeError):
        Named("ring")  # type: ignore[misc]
    assert repr(Named(name="x")) == "Named(name='x', size=1)"
    assert Empty() == Empty()
    assert repr(Empty()) == "Empty()"
    assert hash(Empty()) == hash(())


def test_a_body_that_defines_its_methods_keeps_them() -> None:
    assert repr(OwnMethods(3)) == "<3>"
    assert OwnMethods(3) == OwnMethods(-3)
    assert hash(OwnMethods(3)) == hash((3,))  # `__eq__` alone: the hash is written, as the dataclass does


def _frozen_dataclasses(source: str) -> list[str]:
    """Classes of `source` decorated `@dataclass(frozen=True, ...)`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                called = isinstance(decorator, ast.Call) and getattr(decorator.func, "id", "") == "dataclass"
                if called and any(k.arg == "frozen" for k in decorator.keywords):  # type: ignore[union-attr]
                    found.append(node.name)
    return found


def test_the_convention_check_finds_a_frozen_dataclass() -> None:
    source = "@dataclass(frozen=True)\nclass A:\n    x: int\n\n@record\nclass B:\n    x: int\n"
    assert _frozen_dataclasses(source) == ["A"]


def test_the_package_makes_its_frozen_records_with_record() -> None:
    modules = [
        path for folder in ("traceview", "parsers", "reports") for path in (ROOT / folder).rglob("*.py")
    ]
    assert len(modules) > 100
    found = {
        f"{path.relative_to(ROOT)}:{name}"
        for path in modules
        for name in _frozen_dataclasses(path.read_text(encoding="utf-8"))
    }
    assert found == set(), "use traceview.core.records.record for a frozen dataclass"
