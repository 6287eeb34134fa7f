"""A worker's batch of summaries pickled packed (`traceview.map.packed`): what arrives equals what was sent,
frame for frame with its types, with the unreadable inputs in their places, in fewer bytes than frame by
frame."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import polars as pl

from traceview.map.executors import MapTask, summarize_files
from traceview.map.packed import PackedResults, frame_paths, with_values
from traceview.model.trace import SkippedInput

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def differences(sent: Any, arrived: Any, where: str = "") -> list[str]:
    if isinstance(sent, pl.DataFrame):
        same = sent.schema == arrived.schema and sent.equals(arrived)
        return [] if same else [where]
    if dataclasses.is_dataclass(sent):
        fields = dataclasses.fields(sent)
        return [
            d for f in fields for d in differences(getattr(sent, f.name), getattr(arrived, f.name), f.name)
        ]
    return [] if sent == arrived else [where]


def test_a_batch_arrives_as_it_was_sent_in_fewer_bytes(tmp_path: Path) -> None:
    broken = tmp_path / "rank9.json"
    broken.write_text("{not json", encoding="utf-8")
    files = sorted((SAMPLES / "dp8_straggler").glob("rank*.json*"))
    tasks = [MapTask(str(path), ranks_in_run=9) for path in [*files[:4], broken, *files[4:]]]
    sent = summarize_files(tasks)
    assert isinstance(sent, PackedResults)
    arrived = pickle.loads(pickle.dumps(sent))
    assert type(arrived) is list
    assert isinstance(arrived[4], SkippedInput)
    assert arrived[4] == sent[4]
    assert [d for s, a in zip(sent, arrived, strict=True) for d in differences(s, a)] == []
    assert len(pickle.dumps(sent)) < len(pickle.dumps(list(sent)))


def test_one_summary_and_frames_of_differing_types_are_sent_as_they_are() -> None:
    one = summarize_files([MapTask(str(sorted((SAMPLES / "dp8_straggler").glob("rank*.json*"))[0]))])
    assert differences(one[0], pickle.loads(pickle.dumps(one))[0]) == []
    first, second = summarize_files(
        [MapTask(str(path)) for path in sorted((SAMPLES / "dp8_straggler").glob("rank*.json*"))[:2]]
    )
    retyped = with_values(second, {("windows",): second.windows.with_columns(pl.col("step").cast(pl.Int32))})
    arrived = pickle.loads(pickle.dumps(PackedResults([first, retyped])))
    assert arrived[1].windows.schema["step"] == pl.Int32
    assert differences(retyped, arrived[1]) == []
    assert ("trace", "cpu") in frame_paths(first)
    assert ("kernel_parts", "top_kernels") in frame_paths(first)
