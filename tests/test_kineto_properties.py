"""Property tests of the Kineto parser on mutated traces (issue 16): whatever the bytes, `kineto.parse`
returns a `RankTrace` that validates, or raises `InputError` with a one-line message; never anything else.

Mutation classes: truncation at any offset, byte flips, structural mutations (an event replaced by another
JSON value, a field given a value of another type; `json.dumps` writes an infinite float as `Infinity`, which
is not JSON, so a few of those are refused as malformed), and control characters in names. Run with
`--hypothesis-show-statistics` to see how many inputs each class ran and their outcomes (`event` labels).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from traceview.parsers import kineto

from tests import kineto_factory as kf
from traceview.core.errors import InputError

pytest.importorskip("hypothesis")  # in the test extra; a bare install skips this module
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FIELDS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def sample_document(names: tuple[str, str] = ("gemm", "nccl")) -> dict[str, Any]:
    events = [
        kf.step(1, 0, 500),
        kf.launch(5, correlation=1),
        kf.kernel(names[0], 10, 50, correlation=1),
        kf.cpu_op(
            "record_param_comms",
            60,
            5,
            args={"Collective name": "allreduce", "In msg nelems": 1024, "Process Group Ranks": [0, 1]},
        ),
        kf.kernel(names[1], 70, 40, correlation=2, stream=20),
        kf.memcpy(120, 3),
        kf.step(1, 0, 400, on_gpu=True),
    ]
    return kf.document(events, rank=0, world_size=2, base_ns=1_700_000_000_000_000_000)


SAMPLE = json.dumps(sample_document(), indent=1).encode()


def outcome_of(data: bytes, kind: str) -> str:
    """Parse `data`; the outcome as a label. Anything but a validated trace or a one-line
    `InputError` fails."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank0.json"
        path.write_bytes(data)
        try:
            trace = kineto.parse(path)
        except InputError as exc:
            refusal = str(exc)
            outcome = f"{kind}: {type(exc).__name__}"
        else:
            refusal = ""
            trace.validate()
            outcome = f"{kind}: parsed with warnings" if trace.warnings else f"{kind}: parsed"
    assert "\n" not in refusal, refusal
    event(outcome)
    return outcome


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(SAMPLE)))
def test_any_truncation(cut: int) -> None:
    outcome_of(SAMPLE[:cut], "truncation")


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, len(SAMPLE) - 1), st.integers(0, 255)), min_size=1, max_size=6)
)
def test_byte_flips(flips: list[tuple[int, int]]) -> None:
    data = bytearray(SAMPLE)
    for at, value in flips:
        data[at] = value
    outcome_of(bytes(data), "byte flips")


@FUZZ
@given(index=st.integers(0, 6), replacement=json_values)
def test_an_event_replaced_by_another_value(index: int, replacement: Any) -> None:
    doc = sample_document()
    doc["traceEvents"][index] = replacement
    outcome_of(json.dumps(doc).encode(), "event replaced")


@FUZZ
@given(index=st.integers(0, 6), field=st.sampled_from(FIELDS), value=json_values)
def test_a_field_of_another_type(index: int, field: str, value: Any) -> None:
    doc = sample_document()
    doc["traceEvents"][index][field] = value
    outcome_of(json.dumps(doc).encode(), "field retyped")


@FUZZ
@given(key=st.sampled_from(("rank", "world_size", "pg_config", "backend")), value=json_values)
def test_a_header_value_of_another_type(key: str, value: Any) -> None:
    doc = sample_document()
    doc["distributedInfo"][key] = value
    outcome_of(json.dumps(doc).encode(), "header retyped")


@FUZZ
@given(names=st.tuples(st.text(alphabet=st.characters(max_codepoint=0x9F), min_size=1), st.text(min_size=1)))
def test_control_characters_in_names(names: tuple[str, str]) -> None:
    """Names are kept as written (a lone surrogate, invalid in UTF-8, becomes U+FFFD); the file is never
    refused."""
    data = json.dumps(sample_document(names), ensure_ascii=False).encode("utf-8", "surrogatepass")
    assert "parsed" in outcome_of(data, "control characters")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank0.json"
        path.write_bytes(data)
        kept = kineto.parse(path).gpu.get_column("name").to_list()
    written = [name.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for name in names]
    assert kept == [*written, "Memcpy HtoD (Pageable -> Device)"]
