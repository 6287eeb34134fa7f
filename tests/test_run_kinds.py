"""Run kinds on factory traces built from the runtime's names only (docs/metrics.md, "Verdict", run kinds):
graph replay, graph capture, serving-engine annotations; expected values as arithmetic."""

from __future__ import annotations

from pathlib import Path

from tests import kineto_factory as kf
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

FORWARD_OPS = ("aten::linear", "aten::addmm", "aten::relu")


def _analysed(tmp_path: Path, events: list[kf.Event]) -> RunAnalysis:
    kf.write(kf.document(events, rank=0, world_size=1), tmp_path / "rank0.json")
    return analyze(load_run(str(tmp_path)))


def _decode_step(number: int, start: float, annotation: str | None = None) -> list[kf.Event]:
    """A 10 ms step: forward operators on the host, one `cudaGraphLaunch` replaying 20 kernels of 20 us,
    two kernels launched one by one (each 2 us, shorter than its 30 us launch), the device idle otherwise."""
    events = [kf.step(number, start, 10_000)]
    if annotation:
        events.append(kf.cpu_op(annotation, start + 5, 9_000, cat="user_annotation"))
    events += [kf.cpu_op(name, start + 10 + i, 1) for i, name in enumerate(FORWARD_OPS)]
    replay = 100 * number
    events.append(kf.launch(start + 100, replay, name="cudaGraphLaunch"))
    events += [kf.kernel("gemm", start + 200 + 25 * i, 20, correlation=replay) for i in range(20)]
    for i in range(2):
        events.append(kf.launch(start + 800 + 40 * i, replay + 1 + i, dur=30))
        events.append(kf.kernel("elementwise", start + 900 + 10 * i, 2, correlation=replay + 1 + i))
    return events


def _said(analysis: RunAnalysis) -> str:
    return " ".join((analysis.verdict.sentence, *analysis.verdict.run_shape))


def test_a_graph_replay_step_is_never_told_to_use_graphs(tmp_path: Path) -> None:
    analysis = _analysed(tmp_path, [e for n in range(3) for e in _decode_step(n, 20_000.0 * n)])
    share = 20 / (20 + 2)
    assert f"Graph replay: {share:.0%} of the device work" in _said(analysis)
    assert analysis.recommendations.items, "the idle GPU is advised"
    for item in analysis.recommendations.items:
        assert "graphs" not in item.sentence.lower().replace("graph replays", "")
        assert "launch-bound" not in item.sentence


def test_serving_annotations_make_a_forward_only_run(tmp_path: Path) -> None:
    steps = [e for n in range(3) for e in _decode_step(n, 20_000.0 * n, "step[DECODE bs=32]")]
    analysis = _analysed(tmp_path, steps)
    assert "serving-engine step annotations in 3 window(s)" in _said(analysis)
    for item in analysis.recommendations.items:
        assert "DataLoader" not in item.sentence


def test_a_capture_gets_no_budget_advice(tmp_path: Path) -> None:
    events = [kf.step(1, 0.0, 10_000), kf.launch(1, 9000, name="cudaStreamBeginCapture")]
    for i in range(546):
        events.append(kf.launch(10 + 15 * i, 10 + i))
    events += [kf.kernel("gemm", 20 + 15 * i, 4, correlation=10 + i) for i in range(2)]
    events.append(kf.launch(9_500, 9001, name="cudaStreamEndCapture"))
    analysis = _analysed(tmp_path, events)
    assert analysis.verdict.label == "graph-capture"
    top = analysis.recommendations.top
    assert top is not None
    assert top.sentence.startswith("Profile the replay steps")
    assert [item.rule for item in analysis.recommendations.items if item.section == "time-budget"] == [
        "graph-capture"
    ]
