"""Plausibility before the headline (docs/metrics.md, "Predicted gamma"): a prediction with stated inputs and
a ratio within 10x leads the verdict's line; one whose achieved FLOP/s cannot be (outside 1% to 100% of a
known peak), or that is 10x off while an input is a guess, is withheld and names the doubtful input; a B
measured in the run is said to be no independent check. The `dp8_ideal` sample (R = 150 TFLOP/s stated as
its peak, at efficiency 1) and its planted figures."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from traceview.options.run import build_options
from traceview.options.user import UserOptions
from traceview.prediction.trace_facts import Assumption
from traceview.prediction.trust import plausibility
from traceview.reduce.pipeline import analyze_files
from traceview.reduce.results import RunAnalysis
from traceview.verdict.facts import Measured, facts_of
from traceview.verdict.headline import verdict

IDEAL = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_ideal"


def _analysed(run: Path, **stated: object) -> RunAnalysis:
    return analyze_files(run, build_options(run, UserOptions(**stated)), parallel_min_bytes=1 << 62)  # type: ignore[arg-type]


def test_stated_inputs_within_ten_x_lead_the_headline() -> None:
    analysis = _analysed(IDEAL)
    assert analysis.prediction is not None
    assert analysis.prediction.trust is not None
    assert analysis.prediction.trust.doubt is None
    assert analysis.prediction.trust.achieved_over_peak == pytest.approx(1.0, rel=1e-3)  # R is the peak here
    assert analysis.verdict.prediction.startswith("Measured gamma 0.21 against 0.21 predicted")


def test_an_impossible_peak_is_withheld_and_named() -> None:
    analysis = _analysed(IDEAL, peak_flops="1e19")  # the run computes at 150e12: 1.5e-5 of that peak
    assert analysis.prediction is not None
    assert analysis.prediction.run["gamma_pred"] is not None
    # the closed form, whose T_comp_pred rests on the peak, stays out of a headline that reads it
    closed_form = verdict(
        facts_of(Measured(analysis.budget, analysis.crossrank, prediction=analysis.prediction))
    )
    line = closed_form.prediction
    assert line.startswith("Predicted gamma withheld from the headline: achieved FLOP/s would be 1.5e-05x")
    assert "--peak-flops" in line
    assert "Its figures stay in the prediction section" in line
    assert closed_form.gamma_pred is None
    # the headline's own gamma_pred is the replay's: the run's own compute, no peak in it, so it leads
    assert analysis.verdict.gamma_pred_source == "replay"
    assert analysis.verdict.withheld == ()
    assert analysis.verdict.prediction.startswith("Measured gamma 0.21 against 0.21 predicted")


def test_far_off_with_a_guessed_input_is_withheld_naming_the_guess() -> None:
    analysis = _analysed(IDEAL)
    assert analysis.prediction is not None
    inputs = analysis.prediction.inputs
    guessed = tuple(replace(a, source="default") if a.name == "efficiency" else a for a in inputs.assumptions)
    run = {**analysis.prediction.run, "gamma_ratio": 12.0}
    achieved, doubt, guesses = plausibility(replace(inputs, assumptions=guessed), run)
    assert achieved == pytest.approx(1.0, rel=1e-3)
    assert guesses == ("the efficiency (default 0.5): give --efficiency or hardware.efficiency",)
    assert doubt is not None
    assert doubt.startswith("measured gamma is 12x the predicted, more than 10x off")
    stated = plausibility(inputs, run)  # the same ratio with every input stated stays in the headline
    assert stated[1] is None
    flops_guess = tuple(
        Assumption("FLOPs per step", "6 P b", "", "trace") if a.name == "FLOPs per step" else a
        for a in inputs.assumptions
    )
    assert (
        "6 P b of a P and b the trace suggests"
        in plausibility(replace(inputs, assumptions=flops_guess), run)[1]
    )  # type: ignore[operator]


def test_a_measured_link_is_no_independent_check(tmp_path: Path) -> None:
    run = tmp_path / "dp8_ideal"
    shutil.copytree(IDEAL, run)
    manifest = json.loads((run / "run.json").read_text(encoding="utf-8"))
    manifest["hardware"]["links_measured"] = True
    (run / "run.json").write_text(json.dumps(manifest), encoding="utf-8")
    analysis = _analysed(run)
    assert analysis.verdict.prediction.endswith(
        "B was measured in this run (run.json hardware.links_measured), so this is no independent check."
    )
