"""`run.json` read by the analysis (docs/run-manifest.md): the traces it lists, and its model inputs preferred
over the traces' and the defaults, each shown with the source `manifest`; the command line still wins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import report_factory as rf
from traceview.api import analyze
from traceview.core.errors import InputError
from traceview.load.inputs import resolve_trace_files
from traceview.options.manifest import (
    ManifestHardware,
    ManifestModel,
    ManifestTrace,
    RunManifest,
    write_manifest,
)
from traceview.options.run import build_options


def _assumptions(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in document["prediction"]["assumptions"]}


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    rf.write_run(folder)
    traces = sorted(p.name for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    manifest = RunManifest(
        world_size=len(traces),
        ranks_per_host=4,
        traces=[ManifestTrace(rank=i, path=name) for i, name in enumerate(traces)],
        model=ManifestModel(local_batch=8.0, params=1e6, flops_per_sample=3e9),
        hardware=ManifestHardware(nic="ib_ndr", intra_alpha_us=2.0),
    )
    write_manifest(folder, manifest)
    (folder / "run.rank0.json").write_text("{}", encoding="utf-8")  # a part left behind: never a trace
    return folder


def test_a_manifest_names_the_traces_and_is_never_one(run_folder: Path) -> None:
    listed = build_options(run_folder / "run.json").listed_traces
    assert listed is not None
    named = [p.name for p in resolve_trace_files(run_folder / "run.json", listed)]
    assert named == sorted(p.name for p in run_folder.glob("*.json*") if not p.name.startswith("run."))
    assert resolve_trace_files(run_folder) == resolve_trace_files(run_folder / "run.json", listed)


def test_model_inputs_come_from_the_manifest_with_their_source(run_folder: Path) -> None:
    document = analyze(run_folder / "run.json", workers=1).summary()
    inputs = _assumptions(document)
    assert document["run"]["manifest"] == str(run_folder / "run.json")
    assert (inputs["b (local batch)"]["value"], inputs["b (local batch)"]["source"]) == (8.0, "manifest")
    assert (inputs["P (parameters)"]["value"], inputs["P (parameters)"]["source"]) == (1e6, "manifest")
    assert inputs["F (model FLOPs per sample)"]["source"] == "manifest"
    assert (inputs["FLOPs per step"]["value"], inputs["FLOPs per step"]["source"]) == (
        "FLOPs per sample x b",
        "manifest",
    )
    assert (inputs["GPUs per node"]["value"], inputs["GPUs per node"]["source"]) == (4, "manifest")
    assert (inputs["alpha inside a node"]["value"], inputs["alpha inside a node"]["source"]) == (
        pytest.approx(2e-6),
        "manifest",
    )
    assert inputs["B across nodes"]["source"] == "manifest"
    per_step = document["prediction"]["per_step"]
    r_sustained = inputs["R (sustained FLOP/s)"]["value"]  # the factory's A100 is in the hardware table
    assert per_step[0]["comp_pred_us"] == pytest.approx(3e9 * 8 / r_sustained * 1e6)  # F b / R


def test_the_command_line_wins_over_the_manifest(run_folder: Path) -> None:
    inputs = _assumptions(analyze(run_folder, workers=1, local_batch=2, gpus_per_node=8).summary())
    assert (inputs["b (local batch)"]["value"], inputs["b (local batch)"]["source"]) == (2.0, "command line")
    assert (inputs["GPUs per node"]["value"], inputs["GPUs per node"]["source"]) == (8, "command line")
    assert inputs["P (parameters)"]["source"] == "manifest"


def test_a_broken_manifest_is_one_line_naming_it(tmp_path: Path) -> None:
    rf.write_run(tmp_path)
    (tmp_path / "run.json").write_text('{"kind": "traceview-run", "world_size": 0}', encoding="utf-8")
    with pytest.raises(InputError, match=r"run\.json.*world_size = 0"):
        analyze(tmp_path, workers=1)


def test_a_recorded_batch_of_tokens_is_said_in_tokens(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    rf.write_run(folder)
    traces = sorted(p.name for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    listed = [ManifestTrace(rank=i, path=name) for i, name in enumerate(traces)]
    for unit, said in (("tokens", "tokens"), (None, "examples")):
        model = ManifestModel(local_batch=60.0, local_batch_unit=unit, params=1e6)
        write_manifest(folder, RunManifest(world_size=len(traces), traces=listed, model=model))
        batch = _assumptions(analyze(folder / "run.json", workers=1).summary())["b (local batch)"]
        assert (batch["value"], batch["unit"], batch["source"]) == (60.0, said, "manifest")
