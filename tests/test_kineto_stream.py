"""A streamed trace reads exactly as the same text read whole: frames, steps, metadata, warnings (byte numbers
and counts included) and refusals, on every real trace and on every kind of damage, with chunks small
enough that each file is cut many times."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal
from traceview.parsers import kineto
from traceview.parsers.kineto import _gzip as kineto_gzip
from traceview.parsers.kineto.limits import DEFAULT_LIMITS, ParseLimits

from tests import kineto_factory as kf
from tests.shared_data import NOT_KINETO, REAL_KINETO, real_files
from traceview.core.errors import TraceviewError
from traceview.model.trace import RankTrace

WHOLE = replace(DEFAULT_LIMITS, stream_above_bytes=1 << 40)
SMALL_SLICE = 1 << 10


def streamed_limits(chunk_bytes: int) -> ParseLimits:
    return replace(DEFAULT_LIMITS, stream_above_bytes=1, stream_chunk_bytes=chunk_bytes)


def outcome(path: Path, limits: ParseLimits) -> RankTrace | tuple[type[Exception], str]:
    try:
        return kineto.parse(path, limits)
    except TraceviewError as exc:
        return type(exc), str(exc)


def assert_same_reading(path: Path, chunk_bytes: int = 4 * SMALL_SLICE, streamed_only: bool = True) -> None:
    whole = outcome(path, WHOLE)
    streamed = outcome(path, streamed_limits(chunk_bytes))
    if not isinstance(whole, RankTrace) or not isinstance(streamed, RankTrace):
        assert streamed == whole
        return
    for frame in ("gpu", "cpu", "steps"):
        assert_frame_equal(getattr(streamed, frame).rechunk(), getattr(whole, frame).rechunk())
    assert streamed.meta == whole.meta
    assert streamed.step_source == whole.step_source
    assert [w.message for w in streamed.warnings] == [w.message for w in whole.warnings]
    assert streamed.truncated_at_byte == whole.truncated_at_byte


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files read a KiB at a time, so that a test trace is streamed in many chunks."""
    monkeypatch.setattr(kineto_gzip, "INFLATED_SLICE", SMALL_SLICE)


def document(events: list[Any], **header: Any) -> dict[str, Any]:
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 2},
        "traceEvents": events,
        **header,
    }


def many_events(count: int = 400, name: str = "ncclKernel_AllReduce_RING_LL_Sum_float") -> list[Any]:
    events: list[Any] = [kf.cpu_op(f"ProfilerStep#{step}", step * 1000.0, 900.0) for step in range(4)]
    for i in range(count):
        events.append(kf.launch(i * 10.0, correlation=i))
        events.append(kf.kernel(name if i % 5 == 0 else f"gemm_{i % 7}", i * 10.0 + 3, 4.0, correlation=i))
    return events


def write(tmp_path: Path, data: bytes, name: str = "rank0.json") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, indent=1).encode()


@pytest.mark.parametrize("path", real_files(REAL_KINETO, "*/*"), ids=lambda p: p.parent.name)
def test_every_real_trace_reads_the_same_streamed(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_gzip, "INFLATED_SLICE", 64 << 10)
    assert_same_reading(path, chunk_bytes=1 << 20)


@pytest.mark.parametrize("path", real_files(NOT_KINETO, "*"), ids=lambda p: p.name)
def test_other_formats_are_refused_alike_streamed(path: Path, small_slices: None) -> None:
    assert_same_reading(path)


def test_a_streamed_trace_is_cut_many_times(tmp_path: Path, small_slices: None) -> None:
    path = write(tmp_path, dumps(document(many_events(), baseTimeNanoseconds=kf_base_ns())))
    chunks = []
    original = kineto._add_batch

    def counted(frames: Any, batch: Any) -> None:
        chunks.append(len(batch))
        original(frames, batch)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kineto, "_add_batch", counted)
        trace = kineto.parse(path, streamed_limits(4 * SMALL_SLICE))
    assert len(chunks) > 10  # one batch per chunk at this size
    assert sum(chunks) == 4 + 2 * 400
    assert trace.gpu.height == 400
    assert trace.meta.base_time_ns == kf_base_ns()  # a header field after the event array
    assert_same_reading(path)


def kf_base_ns() -> int:
    return 1_700_000_000 * 10**9


@pytest.mark.parametrize("gzipped", [False, True])
def test_header_fields_after_the_events_and_a_byte_order_mark(
    tmp_path: Path, small_slices: None, gzipped: bool
) -> None:
    doc = {"traceEvents": many_events(), "baseTimeNanoseconds": kf_base_ns(), "traceName": "x"}
    data = b"\xef\xbb\xbf" + dumps(doc)
    assert_same_reading(write(tmp_path, gzip.compress(data) if gzipped else data))


def test_a_bare_event_array(tmp_path: Path, small_slices: None) -> None:
    assert_same_reading(write(tmp_path, dumps(many_events())))


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.5, 0.77, 0.999])
@pytest.mark.parametrize("gzipped", [False, True])
def test_truncation_anywhere(tmp_path: Path, small_slices: None, fraction: float, gzipped: bool) -> None:
    data = dumps(document(many_events(), baseTimeNanoseconds=kf_base_ns()))
    if gzipped:
        packed = gzip.compress(data)
        path = write(tmp_path, packed[: int(len(packed) * fraction)])
    else:
        path = write(tmp_path, data[: int(len(data) * fraction)])
    assert_same_reading(path)


@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
def test_malformed_json_inside_the_events(tmp_path: Path, small_slices: None, at: float) -> None:
    data = bytearray(dumps(document(many_events())))
    where = data.index(b'"ts"', int(len(data) * at))
    data[where : where + 4] = b"#ts#"
    assert_same_reading(write(tmp_path, bytes(data)))


def test_trailing_bytes_after_the_document(tmp_path: Path, small_slices: None) -> None:
    assert_same_reading(write(tmp_path, dumps(document(many_events())) + b"\n<garbage>" * 100))


def test_invalid_utf8_in_events_and_in_the_header(tmp_path: Path, small_slices: None) -> None:
    in_events = dumps(document(many_events(name="nccl\u00e9AllReduce"))).replace(b"\\u00e9", b"\xff")
    assert_same_reading(write(tmp_path, in_events, "events.json"))
    in_header = dumps(document(many_events(), traceName="\u00e9")).replace(b"\\u00e9", b"\xfe")
    assert_same_reading(write(tmp_path, in_header, "header.json"))


def test_text_that_looks_like_a_cut(tmp_path: Path, small_slices: None) -> None:
    """Strings holding `},{`, arguments holding arrays of objects, and one event longer than many chunks: a
    cut there would not decode, and is never made."""
    events = many_events()
    for i, event in enumerate(events[::3]):
        event["args"] = {**event.get("args", {}), "note": "a}, {b", "shapes": [{"x": i}, {"y": [{}]}]}
    events[200]["name"] = "k" * (40 * SMALL_SLICE)
    assert_same_reading(write(tmp_path, json.dumps(document(events)).encode()))


def test_events_of_the_wrong_type_and_of_another_profiler(tmp_path: Path, small_slices: None) -> None:
    events: list[Any] = many_events()
    events[10:10] = [1, "x", None, [2, 3], {"ph": "X", "ts": "late"}]
    assert_same_reading(write(tmp_path, dumps(document(events)), "mixed.json"))
    other = [
        {"ph": "X", "cat": "Op", "name": f"op{i}", "ts": i, "dur": 1, "pid": 0, "tid": 0} for i in range(900)
    ]
    assert_same_reading(write(tmp_path, dumps({"traceEvents": other}), "other.json"))


def test_a_traceevents_key_inside_a_string_before_the_real_one(tmp_path: Path, small_slices: None) -> None:
    doc = document(many_events(), traceName='"traceEvents": [')
    text = dumps({"traceName": doc.pop("traceName"), **doc})
    assert_same_reading(write(tmp_path, text))


def test_nesting_too_deep_inside_the_events(tmp_path: Path, small_slices: None) -> None:
    data = dumps(document(many_events()))
    at = data.index(b"{", len(data) // 2)
    assert_same_reading(write(tmp_path, data[:at] + b"[" * 5000 + data[at:]))


def test_a_streamed_trace_is_held_in_one_chunk(tmp_path: Path, small_slices: None) -> None:
    """Cut in many chunks, the frames are put together once: one chunk a column, whatever the queries that
    read them later; a column that only the last chunk carries keeps its value there and its nulls before,
    and a column no event carries is null in every row."""
    events = many_events()
    events.append(
        kf.kernel("ncclDevKernel_AllGather_RING_LL", 5000.0, 4.0, args={"Collective name": "allgather"})
    )
    path = write(tmp_path, dumps(document(events)))
    trace = kineto.parse(path, streamed_limits(4 * SMALL_SLICE))
    for frame in (trace.gpu, trace.cpu):
        assert set(frame.n_chunks("all")) == {1}
    assert trace.gpu.get_column("collective_name").to_list() == [None] * 400 + ["allgather"]
    assert trace.gpu.get_column("pg_ranks").null_count() == trace.gpu.height == 401
    assert trace.cpu.get_column("in_split").null_count() == trace.cpu.height
    assert_same_reading(path)
