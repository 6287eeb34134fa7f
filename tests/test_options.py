"""The options layer: built once from the command line, the API or run.json, with the source of each value;
`run.json` read once per command; the API's keywords are the command line's shared options."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import pytest

import traceview
from traceview.cli.main import main
from traceview.core.errors import UsageError
from traceview.options import manifest as manifest_module
from traceview.options import run as run_module
from traceview.options.run import build_options
from traceview.options.user import UserOptions

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_run_json_is_read_once_per_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reads: list[Path] = []
    real = manifest_module.load_manifest

    def counted(path: str | Path) -> manifest_module.RunManifest:
        reads.append(Path(path))
        return real(path)

    for module in (manifest_module, run_module):  # every name the reader is bound to in the options layer
        monkeypatch.setattr(module, "load_manifest", counted)
    argv = ["traceview", "report", str(SAMPLES / "dp8_straggler"), "-o", str(tmp_path / "r.html"), "-q"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0, capsys.readouterr().err
    assert reads == [SAMPLES / "dp8_straggler" / "run.json"]


def test_the_api_keywords_are_the_shared_options() -> None:
    keywords = {
        name: p
        for name, p in inspect.signature(traceview.analyze).parameters.items()
        if p.kind == inspect.Parameter.KEYWORD_ONLY
    }
    assert list(keywords) == [f.name for f in fields(UserOptions)]
    defaults = {f.name: f.default for f in fields(UserOptions)}
    assert {name: p.default for name, p in keywords.items()} == defaults


def test_each_value_carries_its_source(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(
        '{"kind": "traceview-run", "schema_version": "1.0", "model": {"local_batch": 8, "params": 1000},'
        ' "hardware": {"gpus_per_node": 4}}',
        encoding="utf-8",
    )
    options = build_options(tmp_path, UserOptions(params=2000.0, bandwidth="300G,25G"))
    model = options.model
    assert (model.params, model.source_of("params")) == (2000.0, "command line")
    assert (model.local_batch, model.source_of("local_batch")) == (8, "manifest")
    assert (model.bandwidth_Bps, model.inter_bandwidth_Bps) == (300e9, 25e9)
    assert (options.ranks_per_host, options.ranks_per_host_source) == (4, "run.json")
    assert options.manifest == tmp_path / "run.json"


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"local_batch": "abc"}, "--local-batch"),
        ({"workers": 0}, "--workers"),
        ({"workers": 2.5}, "--workers"),
        ({"executor": "spark"}, "--executor"),
        ({"comm_patterns": [3]}, "--comm-pattern"),
        ({"virtual_stages": True}, "--virtual-stages"),
        ({"bandwidth": "fast"}, "--bandwidth"),
        ({"efficiency": 2.0}, "--efficiency"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_the_option(given: dict[str, object], named: str) -> None:
    with pytest.raises(UsageError, match=named):
        build_options(SAMPLES / "dp8_ideal", UserOptions(**given))  # type: ignore[arg-type]
