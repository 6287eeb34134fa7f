"""run.json (docs/run-manifest.md): read and checked, its inputs reaching the prediction with the source
`manifest` below the command line, never read as a trace; the samples' manifests state what the simulator
used, so `traceview summary sample_traces/dp8_ideal` predicts its gamma with no flags."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simulate.engine import write_run
from tests.simulate.manifest import scenario_manifest
from tests.simulate.scenario import data_parallel_scenario
from traceview.core.errors import InputError
from traceview.load.inputs import load_run, resolve_trace_files
from traceview.options.manifest import ManifestHardware, RunManifest, load_manifest, write_manifest
from traceview.options.run import build_options
from traceview.options.user import UserOptions

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
sys.path.insert(0, str(SAMPLES))
import make_samples  # noqa: E402  (the sample writer, beside the samples)


def summary(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", *args, "--json", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def test_a_manifest_round_trips_and_always_names_its_kind(tmp_path: Path) -> None:
    written = write_manifest(tmp_path, RunManifest(job="j", hardware=ManifestHardware(efficiency=0.4)))
    text = json.loads(written.read_text(encoding="utf-8"))
    assert (text["schema_version"], text["kind"], text["job"]) == ("1.0", "traceview-run", "j")
    assert load_manifest(written).hardware.efficiency == 0.4


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "malformed JSON"),
        ('{"kind": "other"}', "not a traceview run manifest"),
        ('{"schema_version": "2.0"}', "schema_version 2.0"),
        ('{"hardware": {"inter_bandwidth_Bps": -5}}', "hardware.inter_bandwidth_Bps = -5"),
        ('{"hardware": {"efficiency": 1.5}}', "hardware.efficiency = 1.5 is not in (0, 1]"),
        ('{"hardware": {"gpus_per_node": 0}}', "hardware.gpus_per_node = 0"),
        ('{"model": {"local_batch": "many"}}', "not a traceview run manifest"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_it(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=None) as raised:
        load_manifest(path)
    assert str(path) in str(raised.value)
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)


def test_cli_refuses_a_bad_manifest_with_exit_2(tmp_path: Path) -> None:
    write_run(data_parallel_scenario(2, 1_000_000, 8, 10e12, 10e9, steps=1), tmp_path)
    (tmp_path / "run.json").write_text('{"hardware": {"efficiency": 0}}', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(tmp_path), "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "run.json" in done.stderr
    assert "efficiency" in done.stderr


def test_the_manifest_is_never_a_trace_and_names_the_traces(tmp_path: Path) -> None:
    truth = write_run(data_parallel_scenario(2, 1_000_000, 8, 10e12, 10e9, steps=1), tmp_path)
    write_manifest(tmp_path, RunManifest())
    assert resolve_trace_files(tmp_path) == sorted(truth.files)
    listed = build_options(tmp_path / "run.json").listed_traces
    assert listed is not None
    assert resolve_trace_files(tmp_path / "run.json", listed) == sorted(truth.files)
    only_one = scenario_manifest("two", data_parallel_scenario(2, 1_000_000, 8, 10e12, 10e9), truth.files[:1])
    write_manifest(tmp_path, only_one)
    assert build_options(tmp_path).listed_traces == (truth.files[0],)  # the traces it lists, not the folder's
    assert load_run(tmp_path, workers=1).skipped == ()


def test_command_line_wins_and_the_manifest_fills_the_rest(tmp_path: Path) -> None:
    write_manifest(
        tmp_path,
        RunManifest(hardware=ManifestHardware(intra_bandwidth_Bps=25e9, intra_alpha_us=7.0, gpus_per_node=4)),
    )
    model = build_options(tmp_path, UserOptions(bandwidth="50G")).model
    assert (model.bandwidth_Bps, model.source_of("bandwidth_Bps")) == (50e9, "command line")
    assert (model.alpha_s, model.source_of("alpha_s")) == (7.0 / 1e6, "manifest")
    assert (model.gpus_per_node, model.source_of("gpus_per_node")) == (4, "manifest")
    elsewhere = build_options(tmp_path / "elsewhere", UserOptions(bandwidth="50G"))
    assert (elsewhere.manifest, elsewhere.model.alpha_s) == (None, None)  # no manifest: only what was given


def _ideal_truth() -> dict[str, float]:
    truth = json.loads((SAMPLES / "dp8_ideal.ground_truth.json").read_text(encoding="utf-8"))
    model = truth["model"]
    k, g, r, b, bw = (
        model[key]
        for key in ("workers", "grad_bytes_per_param", "flops_per_s", "local_batch", "bandwidth_Bps")
    )
    steps = truth["steps"]
    measured = sum(s["t_comm_us"] for s in steps) / sum(s["t_comp_us"] for s in steps)
    break_even = 1 + 3 * (k * b) * bw / (g * r)  # gamma(K) = (K-1) g R / (3 G B) = 1 at G = k b
    return {
        "closed_form": 2 * (k - 1) / k * g * r / (6 * b * bw),
        "measured": measured,
        "break_even": break_even,
    }


def test_dp8_ideal_with_no_flags_predicts_its_gamma() -> None:
    expected = _ideal_truth()
    prediction = summary(str(SAMPLES / "dp8_ideal"))["prediction"]
    assert isinstance(prediction, dict)
    assert prediction["gamma_pred"] == pytest.approx(expected["closed_form"], rel=1e-6)
    assert prediction["gamma_ratio"] == pytest.approx(
        expected["measured"] / expected["closed_form"], rel=1e-3
    )
    assert abs(prediction["gamma_ratio"] - 1) < 0.25
    assert prediction["link_known"] is True
    assert prediction["missing_input"] is None
    assert prediction["defaulted_inputs"] == []
    assert "agree" in prediction["sentence"]
    assert prediction["dominant_factor"] is None  # no gap to explain
    what_if = prediction["what_if"]
    assert isinstance(what_if, dict)
    assert what_if["break_even_workers"] == pytest.approx(expected["break_even"], rel=1e-9)
    sources = {a["name"]: a["source"] for a in prediction["assumptions"]}
    assert sources["B inside a node"] == sources["b (local batch)"] == sources["GPUs per node"] == "manifest"


def test_dp8_ideal_without_its_manifest_says_the_link_is_assumed(tmp_path: Path) -> None:
    for path in (SAMPLES / "dp8_ideal").glob("*.pt.trace.json.gz"):
        shutil.copy(path, tmp_path / path.name)
    prediction = summary(str(tmp_path))["prediction"]
    assert isinstance(prediction, dict)
    assert prediction["link_known"] is False
    assert prediction["dominant_factor"] == "bandwidth_eff"
    assert "B is assumed, not known" in prediction["sentence"]
    assert any("from the hardware table, assumed" in line for line in prediction["assumed_links"])
    # the table's NVLink (300 GB/s) against the simulated 25 GB/s: the ratio is far from 1
    assert prediction["gamma_ratio"] > 5


def test_the_samples_manifests_are_what_make_samples_writes() -> None:
    for name, (build, _) in make_samples.SAMPLES.items():
        folder = SAMPLES / name
        files = sorted(
            folder.glob("*.pt.trace.json.gz"), key=lambda p: int(p.name.split("-")[1].split(".")[0])
        )
        expected = scenario_manifest(name, build(), files)
        assert load_manifest(folder / "run.json") == expected, name


def test_a_folder_holding_two_runs_is_not_analysed_as_one(tmp_path: Path) -> None:
    """A 4-rank run and a 2-rank run written into one folder: the larger job is analysed, the other's files
    are set apart by their world size (load.one_job), each named, exit 4."""
    four = write_run(data_parallel_scenario(4, 1_000_000, 8, 10e12, 10e9, steps=1), tmp_path / "four")
    two = write_run(data_parallel_scenario(2, 1_000_000, 8, 10e12, 10e9, steps=1), tmp_path / "two")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for prefix, truth in (("a", four), ("b", two)):
        for path in truth.files:
            shutil.copy(path, mixed / f"{prefix}-{path.name}")
    run = load_run(mixed, workers=1)
    assert run.rank_ids == [0, 1, 2, 3]
    assert sorted(Path(s.path).name for s in run.skipped) == sorted(f"b-{p.name}" for p in two.files)
    assert all("another job (world size)" in s.reason and "world size 2" in s.reason for s in run.skipped)
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "summary", str(mixed), "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 4
    assert sum("another job" in line for line in done.stderr.splitlines()) == len(two.files)
