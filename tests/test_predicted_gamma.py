"""The headline's predicted gamma (docs/metrics.md, "Predicted gamma", The headline's gamma_pred): the
replay's comm_model gamma where it exists (source `replay`), else the closed form's (source `closed form`),
one decision read by the verdict, the JSON summary, the tiles, the card and `--fail-on`; on the simulated
straggler run and on the real gloo run of ../shared, each checked by a plain pass over the JSON; compare and
trend say "method changed" across the two."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from traceview.reports.html.card import verdict_card
from traceview.reports.html.page import verdict_figures

from tests.shared_data import REAL_KINETO, requires_shared
from traceview.api import analyze
from traceview.compare.prediction_method import gamma_pred_source, method_change
from traceview.compare.settings import load_settings
from traceview.compare.trend import trend
from traceview.compare.two_runs import compare
from traceview.replay.predicted import CLOSED_FORM, REPLAY, predicted_gamma

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _summary(run: Path) -> dict[str, Any]:
    found = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(run), "--json", "--workers", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode in (0, 1, 4), found.stderr
    document: dict[str, Any] = json.loads(found.stdout)
    return document


def _lever(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(row for row in document["replay"]["levers"] if row["lever"] == name)


@pytest.fixture(scope="module")
def straggler() -> Any:
    return analyze(SAMPLES / "dp8_straggler", workers=1)


def test_the_headline_takes_the_replays_comm_model_gamma(straggler: Any) -> None:
    raw = straggler.raw
    recorded, modelled = raw.replay.lever("as_recorded"), raw.replay.lever("comm_model")
    assert raw.verdict.gamma_pred_source == REPLAY
    assert raw.verdict.gamma_pred == modelled["gamma"]
    assert raw.verdict.gamma_ratio == pytest.approx(recorded["gamma"] / modelled["gamma"])
    # the closed form keeps its own figures in the prediction section: it prices the straggler's waiting
    # too, the replay keeps the recorded waits, so the two differ on this run
    assert raw.prediction.run["gamma_pred"] != raw.verdict.gamma_pred
    # every surface reads the one decision
    figures = raw.gate_figures()
    assert figures["gamma_pred"] == raw.verdict.gamma_pred
    assert figures["gamma_ratio"] == raw.verdict.gamma_ratio
    assert raw.recommendations.facts["gamma_pred"] == raw.verdict.gamma_pred
    tiles = {label: (value, note) for label, value, note, _ in verdict_figures(raw, ())}
    assert "replayed on the run's own graph" in tiles["predicted gamma"][1]
    assert "predicted gamma (replay)" in verdict_card(raw)
    assert "replayed on the run's own graph" in raw.verdict.prediction


def test_without_a_replay_the_closed_form_leads(straggler: Any) -> None:
    raw = straggler.raw
    found = predicted_gamma(raw.prediction, None)
    assert found is not None
    assert found.source == CLOSED_FORM
    assert (found.gamma_pred, found.gamma_ratio) == (
        raw.prediction.run["gamma_pred"],
        raw.prediction.run["gamma_ratio"],
    )
    assert found.dominant == raw.prediction.dominant
    assert predicted_gamma(None, raw.replay) is None


def test_the_json_says_the_same_by_a_plain_pass(straggler_summary: dict[str, Any]) -> None:
    document = straggler_summary
    verdict = document["verdict"]
    recorded, modelled = _lever(document, "as_recorded"), _lever(document, "comm_model")
    assert verdict["gamma_pred_source"] == "replay"
    assert verdict["gamma_pred"] == modelled["gamma"]
    assert abs(verdict["gamma_ratio"] - recorded["gamma"] / modelled["gamma"]) < 1e-9
    assert document["recommendations"]["facts"]["gamma_pred"] == verdict["gamma_pred"]


@pytest.fixture(scope="module")
def straggler_summary() -> dict[str, Any]:
    return _summary(SAMPLES / "dp8_straggler")


def _closed_form(document: dict[str, Any]) -> dict[str, Any]:
    """The same summary as one written before `gamma_pred_source`: its headline the closed form's."""
    older = json.loads(json.dumps(document))
    del older["verdict"]["gamma_pred_source"]
    older["verdict"]["gamma_pred"] = document["prediction"]["gamma_pred"]
    older["verdict"]["gamma_ratio"] = document["prediction"]["gamma_ratio"]
    return older


def test_compare_says_method_changed(straggler_summary: dict[str, Any]) -> None:
    older = _closed_form(straggler_summary)
    assert (gamma_pred_source(older), gamma_pred_source(straggler_summary)) == ("closed form", "replay")
    compare_settings, _ = load_settings()
    changed = compare(older, straggler_summary, compare_settings)
    said = [c for c in changed.structure.setup_changes if c.startswith("method changed")]
    assert said == [method_change(older, straggler_summary)]
    assert "closed form -> by the replay; gamma_ratio not compared" in said[0]
    same = compare(straggler_summary, straggler_summary, compare_settings)
    assert not [c for c in same.structure.setup_changes if c.startswith("method changed")]
    # no headline gamma_pred on one side: no method to compare
    withheld = json.loads(json.dumps(straggler_summary))
    withheld["verdict"]["gamma_pred"] = None
    assert method_change(older, withheld) is None


def test_trend_says_method_changed(straggler_summary: dict[str, Any]) -> None:
    older = _closed_form(straggler_summary)
    _, settings = load_settings()
    found = trend([("a.json", older), ("b.json", older), ("c.json", straggler_summary)], settings)
    methods = [c for c in found.changes if c.label.startswith("method changed")]
    assert [(c.metric, c.index) for c in methods] == [("gamma_ratio", 2)]


@requires_shared
def test_the_real_gloo_run_predicts_from_its_own_graph() -> None:
    # the closed form is withheld on this run (FLOPs counted from shapes above the device's peak); the replay
    # keeps the run's own compute, so its prediction needs no FLOPs and reaches the headline
    document = _summary(REAL_KINETO / "h200_pt211_gloo_dp2")
    verdict, prediction = document["verdict"], document["prediction"]
    assert prediction["headline_doubt"] is not None
    assert "peak" in prediction["headline_doubt"]
    recorded, modelled = _lever(document, "as_recorded"), _lever(document, "comm_model")
    assert verdict["gamma_pred_source"] == "replay"
    assert verdict["withheld"] == []
    assert verdict["gamma_pred"] == modelled["gamma"]
    assert abs(verdict["gamma_ratio"] - recorded["gamma"] / modelled["gamma"]) < 1e-9
    # B of the host collectives was fitted on this run: the verdict says it is no independent check
    assert any("links measured in this run" in note for note in verdict["notes"])
