"""One document, one reading: a top-level key given twice (two `traceEvents`) is refused by the reader of the
whole text and by the streamed reader alike, naming the key (a document under 8 MiB was analysed and the same
document over 8 MiB refused). A property test sends the same generated documents through both readers, the
streaming threshold lowered so that each is streamed in many chunks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from traceview.parsers.kineto._header import repeated_key

from tests import kineto_factory as kf
from tests.test_kineto_stream import WHOLE, many_events, outcome, streamed_limits
from traceview.core.errors import InputError
from traceview.model.trace import RankTrace

HEADER = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}}


def _member(key: str, value: Any) -> str:
    return f"{json.dumps(key)}: {json.dumps(value)}"


def _document(members: list[tuple[str, Any]]) -> bytes:
    return ("{" + ",\n".join(_member(key, value) for key, value in members) + "}").encode()


def test_two_trace_event_arrays_are_refused_by_both_readers(tmp_path: Path) -> None:
    events = many_events(200)
    path = tmp_path / "rank0.json"
    path.write_bytes(_document([*HEADER.items(), ("traceEvents", events), ("traceEvents", events[:50])]))
    whole, streamed = outcome(path, WHOLE), outcome(path, streamed_limits(4096))
    assert whole == streamed
    assert whole[0] is InputError  # type: ignore[index]
    assert "the top-level key 'traceEvents' is given twice" in whole[1]  # type: ignore[index]


def test_the_command_says_it_in_one_line(tmp_path: Path) -> None:
    """Over 8 MiB the streamed reader reads it: the same line, exit 2."""
    events = many_events(200)
    small = tmp_path / "small.json"
    small.write_bytes(_document([("traceEvents", events), *HEADER.items(), ("traceEvents", [])]))
    padding = [kf.cpu_op(f"op{i}" + "x" * 200, float(i), 1.0) for i in range(40_000)]
    large = tmp_path / "large.json"
    large.write_bytes(_document([*HEADER.items(), ("traceEvents", events + padding), ("traceEvents", [])]))
    assert large.stat().st_size > 8 << 20
    for path in (small, large):
        done = subprocess.run(
            [sys.executable, "-m", "traceview", "summary", str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().endswith(
            "the top-level key 'traceEvents' is given twice: two readings of one document"
        )
        assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (b'{"a": 1, "b": [1, 2]}', None),
        (b' { "a" : 1 , "a" : 2 }', "a"),
        (b'{"a": 1, "a": 1}', "a"),  # the same value twice is still two readings of the key
        (b"{}", None),
        (b'{"x\\"y": 1, "x\\"y": {"a": 1}}', 'x"y'),
        (b'{"tr\\u0061ceEvents": [], "traceEvents": [1]}', "traceEvents"),  # one key, spelt two ways
        (b'{"a": "}", "b": 1, "a": "}"}', "a"),
        (b'{"a": [1], "b": {"a": 2}}', None),  # a nested key is not a top-level one
    ],
)
def test_repeated_key(text: bytes, key: str | None) -> None:
    assert repeated_key(text) == key


KEYS = st.sampled_from(
    ["traceEvents", "schemaVersion", "distributedInfo", "deviceProperties", "baseTimeNanoseconds", "x"]
)
VALUES = st.one_of(
    st.integers(0, 10),
    st.just([]),
    st.just({"rank": 1, "world_size": 2}),
    st.builds(many_events, st.integers(0, 60)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    members=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6),
    chunk_bytes=st.sampled_from([512, 2048, 8192]),
)
def test_generated_documents_read_the_same_by_both_readers(
    tmp_path: Path, members: list[tuple[str, Any]], chunk_bytes: int
) -> None:
    """Whole and streamed (threshold lowered to one byte), every generated document reads the same, and one
    whose top-level keys repeat is refused by both, naming a key given again."""
    path = tmp_path / "rank0.json"
    path.write_bytes(_document(members))
    whole, streamed = outcome(path, WHOLE), outcome(path, streamed_limits(chunk_bytes))
    keys = [key for key, _ in members]
    if len(set(keys)) < len(keys):
        repeated = {key for index, key in enumerate(keys) if key in keys[:index]}
        assert whole == streamed
        named = [key for key in repeated if f"the top-level key {key!r} is given twice" in whole[1]]  # type: ignore[index]
        assert len(named) == 1, whole
        return
    if isinstance(whole, RankTrace) and isinstance(streamed, RankTrace):
        assert streamed.gpu.equals(whole.gpu)
        assert streamed.cpu.equals(whole.cpu)
        assert streamed.meta == whole.meta
    else:
        assert streamed == whole
