"""Run kinds on factory traces built from the runtime's names only (docs/metrics.md, "Verdict", run kinds):
graph replay, graph capture, serving-engine annotations; expected values as arithmetic."""

from __future__ import annotations

from pathlib import Path

from tests import kineto_factory as kf
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze
from traceview.verdict.facts import Facts
from traceview.verdict.recommend import recommend

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


def test_a_straggler_costing_more_than_the_all_reduce_exposes_ranks_first() -> None:
    """A 100 ms step: the gradient all-reduce exposes 66 ms, 48 ms of it waiting for rank 1 (its cost): the
    all-reduce's own stake is (66 - 48) / 100 x 0.95, below the straggler's 48 / 100."""
    facts = Facts(
        {
            "step_us": 100_000.0,
            "dimension_exposed_us": 66_000.0,
            "dimension_exposed_share": 0.66,
            "dimension_wait_us": 300.0,
            "straggler_rank": 1.0,
            "straggler_cost_us": 48_000.0,
            "straggler_cost_share": 0.48,
            "straggler_times_last": 6.0,
            "straggler_instances": 6.0,
            "straggler_group_size": 2.0,
            "straggler_median_lateness_us": 30_000.0,
        },
        {"dimension_name": "data parallelism", "dimension_advice": "overlap", "dimension_link": "a link"},
    )
    items = {item.rule: item.score for item in recommend(facts).items}
    assert items["dimension-cost"] == (0.66 - 0.48) * 0.95
    assert recommend(facts).top is not None
    assert recommend(facts).top.rule == "straggler"  # type: ignore[union-attr]


def test_one_leading_gap_is_said_apart(tmp_path: Path) -> None:
    """Steps of 20 ms, each with one 9 ms kernel (step 0 starting 8 ms in, so it runs 1 ms): a step's window W
    runs from the end of the previous step's device work (docs/metrics.md section 3), so step 1's W is [9, 29]
    ms with its kernel at [20, 29]: one leading gap of 20 - 9 = 11 ms holds all of its 11 ms of idle (the
    first such window, step 1, is named)."""
    events: list[kf.Event] = []
    for number in range(3):
        start = 20_000.0 * number
        first = 8_000.0 if number == 0 else 0.0
        events += [kf.step(number, start, 10_000), kf.launch(start + first, 10 + number)]
        events.append(kf.kernel("gemm", start + first, 9_000 - first, correlation=10 + number))
    analysis = _analysed(tmp_path, events)
    gap = 20_000.0 - 9_000.0
    assert (
        f"One gap at the start of rank 0's step 1 holds {gap / gap:.0%} of that window's idle "
        f"({gap / 1000:.2f} ms before its first device activity)" in _said(analysis)
    )


def _kernel_only_step(number: int, start: float) -> list[kf.Event]:
    """A 1 ms step of one launched GEMM and no operators (the trace says nothing of a backward pass)."""
    correlation = 10 + number
    return [
        kf.step(number, start, 1_000),
        kf.launch(start + 10, correlation),
        kf.kernel("gemm", start + 20, 900, correlation=correlation),
    ]


def _with_metadata(tmp_path: Path, name: str, **top: object) -> RunAnalysis:
    events = [e for n in range(3) for e in _kernel_only_step(n, 2_000.0 * n)]
    folder = tmp_path / name
    folder.mkdir()
    kf.write(kf.document(events, rank=0, world_size=1, **top), folder / "rank0.json")
    return analyze(load_run(str(folder)))


def test_grad_mode_metadata_makes_a_forward_only_run(tmp_path: Path) -> None:
    """The trace's metadata (`grad_mode: inference_mode`, or `inference_mode: true`) says what the operators
    cannot (none recorded); without it, nothing is said."""
    said = "the trace's metadata says autograd was off (inference_mode) on 1 rank(s)"
    assert said in _said(_with_metadata(tmp_path, "grad", grad_mode="inference_mode"))
    assert said in _said(_with_metadata(tmp_path, "inference", inference_mode=True))
    assert "forward-only" not in _said(_with_metadata(tmp_path, "plain"))
    assert "forward-only" not in _said(_with_metadata(tmp_path, "training", grad_mode="enabled"))


def test_serving_engine_operators_make_a_forward_only_run(tmp_path: Path) -> None:
    """A vLLM custom operator in each window is a serving engine's step."""
    events = []
    for n in range(3):
        events += _kernel_only_step(n, 2_000.0 * n)
        events.append(kf.cpu_op("vllm::unified_attention_with_output", 2_000.0 * n + 5, 4))
    analysis = _analysed(tmp_path, events)
    assert "serving-engine step annotations in 3 window(s)" in _said(analysis)
