"""A batch of files parsed together (`traceview.parsers.kineto.batch.parse_many`): each file's trace, or its
error, equal to what its own `parse` gives, whatever the files beside it; the batch's queries keyed by file,
each file alone when they meet a defect."""

from __future__ import annotations

import glob
import random
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal
from traceview.parsers import kineto
from traceview.parsers.kineto import batch

from tests import kineto_factory as kf
from tests.shared_data import REAL_KINETO, requires_shared
from traceview.map import executors
from traceview.map.executors import MapTask
from traceview.model.trace import RankTrace, SkippedInput

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _alone(path: str) -> RankTrace | Exception:
    try:
        return kineto.parse(path)
    except Exception as error:
        return error


def assert_same(alone: RankTrace | Exception, together: RankTrace | Exception) -> None:
    """The same trace (frames, header, warnings) or the same error."""
    if isinstance(alone, Exception) or isinstance(together, Exception):
        assert (type(together), str(together)) == (type(alone), str(alone))
        return
    for part in ("gpu", "cpu", "steps"):
        assert_frame_equal(getattr(together, part), getattr(alone, part))
    kept = ("path", "meta", "step_source", "warnings", "truncated_at_byte")
    assert [getattr(together, name) for name in kept] == [getattr(alone, name) for name in kept]


def _documents() -> dict[str, Any]:
    """Traces of every shape a batch may hold: steps on the host or on the device, a device without events
    or without device ids, events dropped as absurd (the frame made sane, its steps found again), nothing."""
    kernels = [kf.launch(110, correlation=1), kf.kernel("gemm", 200, 50, correlation=1)]
    return {
        "host_steps.json": kf.document([kf.step(1, 100, 400), kf.step(2, 500, 400), *kernels], rank=0),
        "gpu_steps.json.gz": kf.document(
            [kf.step(3, 150, 200, on_gpu=True), kf.step(4, 400, 50, on_gpu=True), *kernels], rank=1
        ),
        "host_only.json": kf.document([kf.cpu_op("aten::add", 10, 5), kf.step(9, 0, 50)], rank=2),
        "absurd.json": kf.document(
            [kf.step(5, 100, 900), kf.kernel(NCCL, 300, -4.0), kf.kernel("gemm", 400, 10, device=3)], rank=3
        ),
        "no_device_id.json": kf.document([{**kf.kernel("gemm", 10, 5), "args": {"stream": 7}}], rank=4),
        "no_events.json": kf.document([], rank=5),
    }


def _files(tmp_path: Path) -> list[str]:
    written = [str(kf.write(doc, tmp_path / name)) for name, doc in _documents().items()]
    (tmp_path / "not_json.json").write_text("NCCL INFO this is a log\n")
    (tmp_path / "cut.json").write_bytes(Path(written[0]).read_bytes()[:200])
    refused = [str(tmp_path / name) for name in ("not_json.json", "cut.json", "gone.json")]
    return [*written, *refused]


def test_each_file_as_alone_in_any_batch(tmp_path: Path) -> None:
    files = _files(tmp_path)
    alone = {path: _alone(path) for path in files}
    assert any(isinstance(result, Exception) for result in alone.values())
    assert {r.step_source for r in alone.values() if isinstance(r, RankTrace)} == {"gpu", "cpu", "none"}
    shuffled = random.Random(7)
    for size in (len(files), 2, 3):
        order = files[:]
        shuffled.shuffle(order)
        for start in range(0, len(order), size):
            group = order[start : start + size]
            for path, together in zip(group, batch.parse_many(group), strict=True):
                assert_same(alone[path], together)


def test_a_defect_of_the_batch_query_costs_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _files(tmp_path)

    def broken(files: Any) -> Any:
        raise RuntimeError("a defect")

    monkeypatch.setattr(batch, "_keyed_answers", broken)
    for path, together in zip(files, batch.parse_many(files), strict=True):
        assert_same(_alone(path), together)


def test_the_map_parses_its_batch_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's batch: one `parse_many`; should it fail, each file parsed alone; skipped files said."""
    files = _files(tmp_path)
    tasks = [MapTask(path) for path in files]
    calls: list[int] = []
    inner = batch.parse_many

    def counted(paths: Any, limits: Any) -> Any:
        calls.append(len(paths))
        return inner(paths, limits)

    monkeypatch.setattr(batch, "parse_many", counted)
    together = executors._parsed_together(tasks)
    assert calls == [len(files)]
    monkeypatch.setattr(batch, "parse_many", lambda paths, limits: 1 / 0)
    alone = executors._parsed_together(tasks)
    for one, other in zip(together, alone, strict=True):
        if isinstance(one, SkippedInput):
            assert one == other
        else:
            assert_same(one, other)
    assert [type(r) for r in together].count(SkippedInput) == 3  # not JSON, cut before any event, missing


@requires_shared
def test_real_traces_in_shuffled_batches() -> None:
    paths = sorted(
        path
        for path in glob.glob(str(REAL_KINETO / "**" / "*"), recursive=True)
        if path.endswith((".json", ".gz")) and "df_index_resolver" not in path
    )
    alone = {path: _alone(path) for path in paths}
    order = paths[:]
    random.Random(26).shuffle(order)
    for start in range(0, len(order), 7):
        group = order[start : start + 7]
        for path, together in zip(group, batch.parse_many(group), strict=True):
            assert_same(alone[path], together)
