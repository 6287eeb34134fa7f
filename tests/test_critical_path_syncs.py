"""The critical path's recorded sync edges (docs/metrics.md, "Critical path"): the profiler's CUDA sync
events (`cuda_sync`, written with `enable_cuda_sync_events`) kept by the parser and read as the host's waits
on the device, on factory traces (no GPU needed): with the events, the wait is held by `blocking_sync` and
named by the device work it waited for; without them, the path names the host row the wait happened in,
and the notes say the edges were inferred from call names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traceview.parsers import kineto

import traceview
from tests.kineto_factory import cpu_op, cuda_sync, document, kernel, launch, step, write
from traceview.critical_path.categories import CATEGORY_COLUMNS
from traceview.reduce.analysis import RunAnalysis

GEMM, ELEMENTWISE = "ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel"


def runtime(name: str, ts: float, dur: float, correlation: int) -> dict[str, Any]:
    """A runtime call that launches nothing (a synchronize), with its correlation."""
    return {**launch(ts, correlation, dur=dur, name=name)}


def analysed(tmp_path: Path, events: list[dict[str, Any]], name: str) -> RunAnalysis:
    (tmp_path / name).mkdir()
    return traceview.analyze(write(document(events), tmp_path / name / "rank0.json")).raw


def path_row(analysis: RunAnalysis) -> dict[str, Any]:
    path = analysis.critical_path
    assert path is not None
    assert path.per_step.height == 1
    return path.per_step.row(0, named=True)


def a_read_of_device_values() -> list[dict[str, Any]]:
    """A 1,000 us step: a GEMM on stream 7 from 20 to 520 us, the host in `aten::_local_scalar_dense` from
    30 to 590 us (its synchronize call not recorded), then an elementwise kernel launched at 600 us."""
    return [
        step(1, 0, 1000, on_gpu=True),
        step(1, 0, 1000),
        launch(10, 1),
        kernel(GEMM, 20, 500, correlation=1),
        cpu_op("aten::_local_scalar_dense", 30, 560),
        launch(600, 2),
        kernel(ELEMENTWISE, 610, 390, correlation=2),
    ]


def test_parser_keeps_the_sync_events(tmp_path: Path) -> None:
    events = [
        *a_read_of_device_values(),
        cuda_sync("Stream Sync", 40, 540, correlation=50),
        cuda_sync(
            "Stream Wait Event",
            5,
            1,
            correlation=51,
            stream=8,
            wait_on_stream=7,
            wait_on_cuda_event_record_corr_id=49,
            wait_on_cuda_event_id=3,
        ),
    ]
    trace = kineto.parse(write(document(events), tmp_path / "rank0.json"))
    rows = trace.syncs.sort("start_us").to_dicts()
    assert [row["name"] for row in rows] == ["Stream Wait Event", "Stream Sync"]
    assert rows[0]["stream"] == 8
    assert rows[0]["wait_on_stream"] == 7
    assert rows[0]["wait_on_record_correlation"] == 49
    assert rows[1]["start_us"] == 40
    assert rows[1]["end_us"] == 40 + 540
    assert rows[1]["correlation"] == 50
    assert trace.gpu.height == 2  # the sync events are no device work


def test_a_sync_event_moves_the_wait_to_blocking_sync(tmp_path: Path) -> None:
    """Device idle from 520 (the GEMM's end) to 600: without the sync event the host operator holds
    520..590; with a Stream Sync from 40 to 580 on stream 7, the wait 520..580 is blocking_sync, named by
    the GEMM it waited for."""
    inferred = path_row(analysed(tmp_path, a_read_of_device_values(), "inferred"))
    synced_run = analysed(
        tmp_path, [*a_read_of_device_values(), cuda_sync("Stream Sync", 40, 540, correlation=50)], "synced"
    )
    synced = path_row(synced_run)
    assert inferred["blocking_sync_us"] == 0
    assert inferred["host_other_us"] == 590 - 520
    assert synced["blocking_sync_us"] == 580 - 520
    assert synced["host_other_us"] == 590 - 580
    for row in (inferred, synced):
        assert row["compute_gemm_us"] == 520 - 20
        assert sum(row[c] for c in CATEGORY_COLUMNS) == row["step_us"] == 1000
    path = synced_run.critical_path
    assert path is not None
    holder = path.holders.filter(path.holders["category"] == "blocking_sync").row(0, named=True)
    assert holder["name"] == f"Stream Sync (waits for {GEMM})"
    assert holder["us_per_step"] == 580 - 520
    assert any("1 host wait(s) read from the recorded CUDA sync events" in n for n in path.notes)
    assert not any("no CUDA sync events recorded" in n for n in path.notes)
    inferred_path = analysed(tmp_path, a_read_of_device_values(), "again").critical_path
    assert inferred_path is not None
    assert any("every rank: no CUDA sync events recorded" in n for n in inferred_path.notes)


def test_an_event_sync_names_the_recording_stream(tmp_path: Path) -> None:
    """An Event Sync on an event recorded on stream 7 (wait_on_stream 7): of the GEMM on stream 7 (ending at
    300) and the elementwise kernel on stream 8 (ending at 100), the wait names the GEMM; the device idles
    from 300 to the call's end at 320 either way (cudaEventSynchronize is read by name too), and the call
    the sync event correlates with gives way to it."""
    events = [
        step(1, 0, 400, on_gpu=True),
        step(1, 0, 400),
        launch(5, 1),
        kernel(GEMM, 20, 280, correlation=1),
        launch(8, 2),
        kernel(ELEMENTWISE, 20, 80, correlation=2, stream=8),
        runtime("cudaEventSynchronize", 30, 290, correlation=60),
        cuda_sync(
            "Event Sync",
            30,
            290,
            correlation=60,
            stream=-1,
            wait_on_stream=7,
            wait_on_cuda_event_record_corr_id=3,
            wait_on_cuda_event_id=1,
        ),
        cuda_sync("Stream Wait Event", 9, 1, correlation=61, stream=8, wait_on_stream=7),
        launch(330, 4),
        kernel(GEMM, 340, 60, correlation=4),
    ]
    analysis = analysed(tmp_path, events, "event")
    row = path_row(analysis)
    assert row["blocking_sync_us"] == 320 - 300
    path = analysis.critical_path
    assert path is not None
    names = path.holders.filter(path.holders["category"] == "blocking_sync")["name"].to_list()
    assert names == [f"Event Sync (waits for {GEMM})"]
    assert any("1 cross-stream wait(s) (Stream Wait Event) read" in n for n in path.notes)
