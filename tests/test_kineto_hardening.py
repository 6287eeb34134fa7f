"""The Kineto parser on damaged and hostile traces (issue 16): event-level problems drop only the bad events,
counted in one warning per kind; file-level problems raise one-line `InputError`s; truncated traces keep every
complete event before the cut; limits bound what one file may cost (docs/metrics.md, "Input limits")."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from traceview.parsers import kineto
from traceview.parsers.kineto.limits import ParseLimits

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.core.errors import InputError
from traceview.load.inputs import load_run
from traceview.model.trace import RankTrace

BASE_NS = 1_700_000_000_000_000_000
DEVICE_CATEGORIES = {"kernel", "Kernel", "mtia_ccp_events", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def events() -> list[kf.Event]:
    return [
        kf.kernel("first", 10, 5, correlation=1),
        kf.kernel("second", 20, 5, correlation=2),
        kf.kernel("third", 30, 5, correlation=3),
    ]


def text(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def parse_bytes(tmp_path: Path, data: bytes, limits: ParseLimits | None = None) -> RankTrace:
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    return kineto.parse(path, limits) if limits else kineto.parse(path)


def names(trace: RankTrace) -> list[str]:
    return trace.gpu.get_column("name").to_list()


def messages(trace: RankTrace) -> list[str]:
    return [warning.message for warning in trace.warnings]


def with_event(bad: Any) -> bytes:
    """A document whose second event is replaced by `bad` (JSON text)."""
    good = [text(event) for event in events()]
    return b'{"baseTimeNanoseconds": %d, "traceEvents": [%s, %s, %s]}' % (BASE_NS, good[0], bad, good[2])


@pytest.mark.parametrize(
    "bad",
    [
        b'{"ph": "X", "cat": "kernel", "name": "s", "ts": "20", "dur": 5}',  # a string ts
        b"null",
        b'{"ph": "X", "cat": "kernel", "name": "s", "ts": 20, "dur": 5, "args": [1, 2]}',
        b"42",
        b'"an event"',
        b'{"ph": "X", "cat": "kernel", "name": "s", "ts": 20, "dur": 1e400}',  # beyond float64
        b'{"ph": "X", "cat": "kernel", "name": "s", "ts": 20, "dur": 5, "args": {"flops": 1%s}}'
        % (b"0" * 400),
    ],
)
def test_a_mistyped_event_is_dropped_and_counted(tmp_path: Path, bad: bytes) -> None:
    trace = parse_bytes(tmp_path, with_event(bad))
    assert names(trace) == ["first", "third"]
    assert "dropped 1 events of the wrong type (not an object, or a field of another type)" in messages(trace)


def test_one_warning_per_kind_with_its_count(tmp_path: Path) -> None:
    listed = events() + [kf.kernel(f"negative{i}", 40 + i, -1) for i in range(3)]
    data = text(kf.document(listed, base_ns=BASE_NS)).replace(
        b'"traceEvents": [', b'"traceEvents": [null, 7, '
    )
    trace = parse_bytes(tmp_path, data)
    assert names(trace) == ["first", "second", "third"]
    assert sorted(messages(trace)) == [
        "dropped 2 events of the wrong type (not an object, or a field of another type)",
        "dropped 3 events with a negative duration",
    ]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("ts", 2**53 + 2, "timestamp outside [-1e12, 2^53] us"),
        ("ts", -1e15, "timestamp outside [-1e12, 2^53] us"),
        ("ts", 10**40, "timestamp outside [-1e12, 2^53] us"),
        ("dur", 1e308, "duration above 1e11 us (28 h)"),
        ("dur", 1e11 + 1, "duration above 1e11 us (28 h)"),
        ("dur", -0.5, "negative duration"),
    ],
)
def test_absurd_times_drop_the_event(tmp_path: Path, field: str, value: float, says: str) -> None:
    listed = events()
    listed[1][field] = value
    trace = parse_bytes(tmp_path, text(kf.document(listed, base_ns=BASE_NS)))
    assert names(trace) == ["first", "third"]
    assert messages(trace) == [f"dropped 1 events with a {says}"]


def test_absurd_gpu_annotations_are_not_steps(tmp_path: Path) -> None:
    listed = [*events(), kf.step(1, 0, 100, on_gpu=True), kf.step(2, 200, -50, on_gpu=True)]
    trace = parse_bytes(tmp_path, text(kf.document(listed, base_ns=BASE_NS)))
    assert trace.steps.rows() == [(1, 0.0, 100.0, "gpu")]  # step, start, end, source (GPU annotations)
    assert messages(trace) == ["dropped 1 events with a negative duration"]


def test_integers_beyond_64_bits_and_absurd_element_counts_become_null(tmp_path: Path) -> None:
    call = kf.cpu_op(
        "record_param_comms",
        5,
        2,
        args={"Collective name": "allreduce", "In msg nelems": 2**51, "Out msg nelems": 1024, "Seq": 2**70},
    )
    sized = [
        kf.cpu_op(
            "record_param_comms", 8 + index, 1, args={"Collective name": "allreduce", "Group size": size}
        )
        for index, size in enumerate((10**12, 0, 8))
    ]
    listed = [call, *sized, *events()]
    listed[4]["args"]["correlation"] = 2**64
    trace = parse_bytes(tmp_path, text(kf.document(listed, base_ns=BASE_NS)))
    row = trace.cpu.row(0, named=True)
    assert (row["in_nelems"], row["out_nelems"], row["seq"]) == (None, 1024, None)
    assert trace.cpu.get_column("group_size").to_list() == [None, None, None, 8]
    assert trace.gpu.get_column("correlation").to_list() == [None, 2, 3]
    assert sorted(messages(trace)) == [
        "set 1 element counts outside [0, 2^50] to null",
        "set 2 group sizes outside [1, 2^24] to null",
        "set 2 integers beyond 64 bits to null",
    ]


@pytest.mark.parametrize(
    ("top", "base", "expected", "says"),
    [
        ({"world_size": 2**24 + 1}, BASE_NS, (None, BASE_NS), "world_size 16777217 is not a world size"),
        ({"world_size": 0}, BASE_NS, (None, BASE_NS), "world_size 0 is not a world size"),
        ({"world_size": "8"}, BASE_NS, (None, BASE_NS), "wrong type: distributedInfo.world_size"),
        ({}, 10**15, (1, 0), "baseTimeNanoseconds 1000000000000000 is not a time between 2000 and 2100"),
        (
            {},
            9 * 10**18,
            (1, 0),
            "baseTimeNanoseconds 9000000000000000000 is not a time between 2000 and 2100",
        ),
        (
            {},
            None,
            (1, 0),
            "no baseTimeNanoseconds (the document is complete: older profilers write none): this rank's "
            "clock is "
            "aligned by its collectives",
        ),
    ],
)
def test_absurd_header_values_are_unknown(
    tmp_path: Path, top: dict[str, Any], base: int | None, expected: tuple[int | None, int], says: str
) -> None:
    doc = kf.document(events(), base_ns=base)
    doc["distributedInfo"].update(top)
    trace = parse_bytes(tmp_path, text(doc))
    assert (trace.meta.world_size, trace.meta.base_time_ns) == expected
    assert names(trace) == ["first", "second", "third"]
    assert any(says in message for message in messages(trace)), messages(trace)


def test_a_header_listing_more_devices_than_a_node_keeps_the_first_64(tmp_path: Path) -> None:
    doc = kf.document(events(), base_ns=BASE_NS)
    doc["deviceProperties"] = [{"id": i, "name": f"device {i:05d}"} for i in range(100_000)]
    trace = parse_bytes(tmp_path, text(doc))
    assert trace.meta.devices == tuple(f"device {i:05d}" for i in range(64))
    assert "100000 distinct device names: kept the first 64 (sorted)" in messages(trace)


def test_a_process_group_listing_ranks_outside_the_world_has_no_rank_list(tmp_path: Path) -> None:
    doc = kf.document(events(), world_size=8, base_ns=BASE_NS)
    doc["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))},
        {"pg_name": "1", "pg_desc": "huge", "pg_size": 2_000_000, "ranks": list(range(2_000_000))},
        {"pg_name": "2", "pg_desc": "stray", "pg_size": 2, "ranks": [0, 9]},
    ]
    trace = parse_bytes(tmp_path, text(doc))
    groups = {group.name: (group.size, group.ranks) for group in trace.meta.process_groups}
    assert groups == {"0": (8, tuple(range(8))), "1": (0, ()), "2": (2, ())}
    assert (
        "process group '1' lists 2000000 rank(s) outside a world of 8: its rank list is unknown"
        in messages(trace)
    )
    assert "process group '1' size 2000000 is not in [1, 8]: read as 0, the ranks it lists" in messages(trace)


def test_the_commonest_device_is_counted_once_per_name() -> None:
    from traceview.model.trace import Run
    from traceview.prediction.trace_facts import device_name

    def ranked(devices: tuple[str, ...]) -> Any:
        return SimpleNamespace(meta=SimpleNamespace(devices=devices))

    run: Any = [ranked(("b", "a")), ranked(("b",)), ranked(("a", "c"))]
    assert device_name(run) == "a"  # a and b twice each: the first by name
    assert device_name(Run(ranks=())) is None


def test_a_rank_that_is_not_one_falls_back_to_the_file_name(tmp_path: Path) -> None:
    doc = kf.document(events(), rank=2**40, base_ns=BASE_NS)
    path = tmp_path / "rank5.json"
    path.write_bytes(text(doc))
    trace = kineto.parse(path)
    assert (trace.rank, trace.meta.rank_source) == (5, "file name")


def test_invalid_utf8_in_an_event_is_replaced_in_that_event(tmp_path: Path) -> None:
    doc = text(kf.document(events(), base_ns=BASE_NS))
    trace = parse_bytes(tmp_path, doc.replace(b'"second"', b'"sec\xffond"'))
    assert names(trace) == ["first", "sec\ufffdond", "third"]
    assert messages(trace) == ["replaced invalid UTF-8 by U+FFFD in 1 events"]


def test_invalid_utf8_in_the_header_is_replaced_in_the_document(tmp_path: Path) -> None:
    doc = text(kf.document(events(), base_ns=BASE_NS, host_name="node")).replace(b'"second"', b'"sec\xffond"')
    data = doc.replace(b'"node"', b'"no\xc3de"')  # the header comes first: its byte is the first invalid one
    trace = parse_bytes(tmp_path, data)
    assert (trace.meta.hostname, names(trace)) == ("no\ufffdde", ["first", "sec\ufffdond", "third"])
    first_bad = data.index(b"\xc3")
    assert messages(trace) == [f"invalid UTF-8 from byte {first_bad} replaced by U+FFFD"]


def test_a_utf8_bom_is_accepted(tmp_path: Path) -> None:
    trace = parse_bytes(tmp_path, b"\xef\xbb\xbf" + text(kf.document(events(), base_ns=BASE_NS)))
    assert (names(trace), trace.warnings) == (["first", "second", "third"], ())


@pytest.mark.parametrize("depth", [1_000, 200_000])
@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_deep_nesting_is_refused_in_one_line(tmp_path: Path, depth: int, opener: bytes) -> None:
    closer = b"]" if opener == b"[" else b"}"
    nested = opener * depth + (b"" if opener == b"[" else b"1") + closer * depth
    data = with_event(b'{"ph": "X", "args": {"x": %s}}' % nested)
    with pytest.raises(InputError, match="nested too deeply") as caught:
        parse_bytes(tmp_path, data)
    event_start = data.index(b'{"ph": "X", "args"')
    assert event_start <= int(caught.value.where.removeprefix("byte ")) <= data.index(opener * 200)
    assert "\n" not in str(caught.value)


def test_malformed_json_names_the_byte(tmp_path: Path) -> None:
    data = text(kf.document(events(), base_ns=BASE_NS)).replace(b'"ts": 10', b'"ts": 10 x')
    with pytest.raises(InputError, match="malformed JSON") as caught:
        parse_bytes(tmp_path, data)
    assert caught.value.where == f"byte {data.index(b' x') + 1}"


@pytest.mark.parametrize("bad", [b" x", b" NaN", b" -Infinity", b" tru"])
def test_the_events_before_malformed_json_are_kept_with_a_warning(tmp_path: Path, bad: bytes) -> None:
    data = text(kf.document(events(), base_ns=BASE_NS)).replace(b'"ts": 30', b'"ts": 30' + bad)
    trace = parse_bytes(tmp_path, data)
    assert names(trace) == ["first", "second"]  # the third event holds the malformed byte
    at = data.index(b'"ts": 30') + len(b'"ts": 30') + 1
    assert f"at byte {at}: kept the 2 complete events before it, not the {len(data) - at} bytes" in " ".join(
        messages(trace)
    )


def test_bytes_after_the_document_are_ignored_with_a_warning(tmp_path: Path) -> None:
    data = text(kf.document(events(), base_ns=BASE_NS))
    trace = parse_bytes(tmp_path, data + b"\n\x00garbage")
    assert names(trace) == ["first", "second", "third"]
    assert messages(trace) == [f"ignored 9 bytes after the JSON document (from byte {len(data)})"]


def test_trace_events_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="traceEvents is not an array"):
        parse_bytes(tmp_path, b'{"traceEvents": {"ph": "X"}}')


def test_long_strings_are_cut_with_a_marker(tmp_path: Path) -> None:
    listed = events()
    listed[1]["name"] = "k" * 5000
    listed.append(kf.cpu_op("record_param_comms", 1, 1, args={"Process Group Description": "d" * 30}))
    doc = kf.document(listed, base_ns=BASE_NS, host_name="h" * 12)
    trace = parse_bytes(tmp_path, text(doc), ParseLimits(max_name_chars=10))
    assert names(trace) == ["first", "k" * 10 + f"...[cut {5000 - 10} chars]", "third"]
    assert trace.cpu.get_column("pg_desc").to_list() == ["d" * 10 + "...[cut 20 chars]"]
    assert trace.meta.hostname == "h" * 10 + "...[cut 2 chars]"
    assert trace.meta.devices == ("NVIDIA A10...[cut 11 chars]",)  # "NVIDIA A100-SXM4-80GB": 21 characters
    # the names k * 5000 and record_param_comms, the description, the host and the device
    assert "cut 5 strings longer than 10 characters" in messages(trace)


def test_a_gzip_bomb_is_refused_by_the_ratio_guard(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(b"[" + b" " * (40 << 20) + b"]"))
    limits = ParseLimits(ratio_checked_after_bytes=1 << 20, inflation_budget_bytes=16 << 20)
    with pytest.raises(InputError, match="max_inflation_ratio") as caught:
        kineto.parse(path, limits)
    assert caught.value.where.startswith("compressed byte")


def test_a_gzip_bomb_whose_trailer_lies_is_refused_while_streaming(tmp_path: Path) -> None:
    data = gzip.compress(b"[" + b" " * (40 << 20) + b"]")
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data[:-4] + (10).to_bytes(4, "little"))  # ISIZE says 10 bytes
    with pytest.raises(InputError, match="max_inflation_ratio"):
        kineto.parse(path, ParseLimits(ratio_checked_after_bytes=1 << 20, inflation_budget_bytes=16 << 20))
    with pytest.raises(InputError, match="max_inflated_bytes"):
        kineto.parse(path, ParseLimits(max_inflated_bytes=20 << 20, max_inflation_ratio=1e9))


def test_the_inflated_size_limit(tmp_path: Path) -> None:
    path = kf.write(kf.document(events() * 50, base_ns=BASE_NS), tmp_path / "rank0.json.gz")
    inflated = len(gzip.decompress(path.read_bytes()))
    assert kineto.parse(path, ParseLimits(max_inflated_bytes=inflated)).gpu.height == 150
    with pytest.raises(InputError, match="max_inflated_bytes"):
        kineto.parse(path, ParseLimits(max_inflated_bytes=inflated - 1))
    plain = kf.write(kf.document(events(), base_ns=BASE_NS), tmp_path / "rank1.json")
    with pytest.raises(InputError, match="max_inflated_bytes"):
        kineto.parse(plain, ParseLimits(max_inflated_bytes=100))


def test_load_run_passes_limits_and_skips_only_the_bad_rank(tmp_path: Path) -> None:
    for rank in range(3):
        kf.write(
            kf.document(events(), rank=rank, world_size=3, base_ns=BASE_NS), tmp_path / f"rank{rank}.json"
        )
    (tmp_path / "rank1.json").write_bytes(with_event(b"[" * 5000 + b"]" * 5000))
    run = load_run(tmp_path, workers=1, limits=ParseLimits(max_name_chars=3))
    assert run.rank_ids == [0, 2]
    assert "nested too deeply" in run.skipped[0].reason
    assert names(run.ranks[0]) == ["fir...[cut 2 chars]", "sec...[cut 3 chars]", "thi...[cut 2 chars]"]


def complete_events_in(prefix: str) -> list[dict[str, Any]]:
    """The events of `traceEvents` complete in `prefix`, by a plain pass of the standard json module."""
    start = prefix.find("[", prefix.find('"traceEvents"')) if prefix.lstrip().startswith("{") else 0
    if start < 0 or not prefix.strip():
        return []
    decoder, position, found = json.JSONDecoder(), start + 1, []
    while True:
        while position < len(prefix) and prefix[position] in " \n\r\t,":
            position += 1
        try:
            event, position = decoder.raw_decode(prefix, position)
        except json.JSONDecodeError:
            return found
        found.append(event)


def device_names(listed: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in listed if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]


def test_every_cut_of_a_small_trace_keeps_every_complete_event(tmp_path: Path) -> None:
    listed: list[kf.Event] = [
        kf.kernel("gemm<{1},{2}>", 10, 5.5, correlation=1),
        kf.launch(12, correlation=2),
        kf.kernel('name with "quotes" and ]}', -20, 1e-3, correlation=2),
        kf.memcpy(30, 2),
    ]
    data = json.dumps(kf.document(listed, base_ns=BASE_NS), indent=1).encode()
    outcomes = {"kept": 0, "refused": 0}
    for cut in range(len(data) + 1):
        expected = device_names(complete_events_in(data[:cut].decode()))
        if not complete_events_in(data[:cut].decode()):
            with pytest.raises(InputError):
                parse_bytes(tmp_path, data[:cut])
            outcomes["refused"] += 1
            continue
        assert names(parse_bytes(tmp_path, data[:cut])) == expected, cut
        outcomes["kept"] += 1
    assert outcomes["kept"] > len(data) // 2


@requires_shared
def test_cuts_of_a_real_trace_past_its_middle_keep_every_complete_event(tmp_path: Path) -> None:
    source = REAL_KINETO / "hta_nccl_data" / "nccl_data.json.gz"
    data = gzip.decompress(source.read_bytes())
    for cut in [len(data) * share // 16 for share in range(8, 16)] + [len(data) - 1]:
        expected = device_names(complete_events_in(data[:cut].decode()))
        trace = parse_bytes(tmp_path, data[:cut])
        assert names(trace) == expected, cut
        assert trace.truncated_at_byte == cut


def test_running_out_of_memory_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(*_: object, **__: object) -> None:
        raise MemoryError

    monkeypatch.setattr(kineto, "read_text", no_memory)
    with pytest.raises(InputError, match="not enough memory"):
        parse_bytes(tmp_path, text(kf.document(events(), base_ns=BASE_NS)))


def test_time_base_moves_known_bases_and_places_a_rank_of_another_epoch() -> None:
    from traceview.model.time_base import RankClockBase, time_base

    epoch_us = 1.7e15  # an old trace without a base writes microseconds since 1970
    base = time_base(
        [
            RankClockBase(BASE_NS, 100.0),
            RankClockBase(BASE_NS + 20_000, 100.0),  # 20 us later
            RankClockBase(0, epoch_us + 100.0),  # no base, another epoch
            RankClockBase(0, 130.0),  # no base, the others' epoch (a truncated trace)
            RankClockBase(0, None),  # no base, no step
        ]
    )
    median_first_step = (100.0 + (100.0 + 20.0)) / 2
    assert base.shifts_us == (0.0, 20.0, median_first_step - (epoch_us + 100.0), 0.0, 0.0)
    assert base.placed == (2,)


def _two_host_run(folder: Path, rank1_base_ns: int | None, rank1_shift_us: float) -> Path:
    from tests import report_factory as rf

    folder.mkdir()
    for rank, base_ns, shift in ((0, BASE_NS, 0.0), (1, rank1_base_ns, rank1_shift_us)):
        listed = rf.rank_events(rank)
        for event in listed:
            event["ts"] += shift
        doc = kf.document(listed, rank=rank, world_size=2, base_ns=base_ns, hostname=f"node-{rank}")
        kf.write(doc, folder / f"rank{rank}.json")
    return folder


@pytest.mark.parametrize(
    ("rank1_base_ns", "shift_us", "placed"),
    [
        (None, 0.0, False),  # truncated: no base, timestamps on the others' base
        (None, 1.7e15, True),  # timestamps since 1970 without a base
        (1_000_000_000, 0.0, False),  # a base in 1970: unknown
        (9_223_372_036_854_775_807, 1.7e15, True),  # a base in 2262: unknown
    ],
)
def test_a_rank_without_a_usable_base_is_aligned_by_its_collectives(
    tmp_path: Path, rank1_base_ns: int | None, shift_us: float, placed: bool
) -> None:
    from traceview.reduce.analysis import analyze

    run = load_run(_two_host_run(tmp_path / "run", rank1_base_ns, shift_us), workers=1)
    analysis = analyze(run)
    offsets = analysis.crossrank.clocks.offsets if analysis.crossrank else None
    assert offsets is not None
    # both ranks' collectives end at the same step-relative times: aligned, the offset is 0, never the base
    assert offsets.get_column("offset_us").to_list() == [0.0, 0.0]
    warnings = " ".join(analysis.header.warnings)
    assert "aligned by its collectives" in warnings
    assert ("placed at their median first step" in warnings) == placed
    assert max(abs(s) for s in analysis.header.base_shifts_us) == pytest.approx(shift_us)


def test_a_cut_document_without_a_base_time_says_it_was_cut(tmp_path: Path) -> None:
    whole = text(kf.document(events()))
    trace = parse_bytes(tmp_path, whole[: whole.rindex(b"}", 0, len(whole) - 2)])
    assert trace.truncated_at_byte is not None
    said = messages(trace)
    assert any("no baseTimeNanoseconds (the document is cut short" in m for m in said), said
