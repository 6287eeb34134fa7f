"""Saved summaries of every schema version written so far stay readable by `compare` and `trend`; a document
that is not a traceview summary, or lacks a field the command needs, is refused in one line naming the file
and the field (exit 2, never 0 or 3); a thresholds file with an unknown key, a wrong type or a non-finite
value is refused (docs/json-schema.md, "Versioning"; docs/compare.md).

The older versions are today's document with the keys later versions added taken away (the version table of
docs/json-schema.md, read as data below)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"

ADDED: dict[str, list[str]] = {
    "1.24": [],  # a correction: no key added
    "1.23": [
        f"recommendations.{where}.{stake}_saved_us"
        for where in ("facts", "items[].facts")
        for stake in ("straggler", "slow_rank", "dimension", "volume", "moe", "suspected")
    ],
    "1.22": ["roofline.measured_efficiency"],
    "1.21": ["flight_recorder.kineto_last_calls"],
    "1.20": ["timeline.steps[].since_run_start_us"],
    "1.19": ["critical_path.per_rank[].median_step"],
    "1.18": ["verdict.gamma_pred_source"],
    "1.17": ["run.ignored", "verdict.withheld"],
    "1.16": ["replay"],
    "1.15": ["flight_recorder"],
    "1.14": ["dimensions.lines", "dimensions.zero", "roofline.flops_doubt", "roofline.host_note"],
    "1.13": ["critical_path", "bubbles.idle_by_path", "recommendations.items[].saved_us"],
    "1.12": [
        "across_ranks.per_rank[].median_lead_us",
        "across_ranks.per_rank[].lead_jitter_us",
        "across_ranks.per_rank[].lead_floor_us",
        "across_ranks.per_rank[].late_by_size",
    ],
    "1.11": [
        "nccl.inspector",
        "distributions.algorithms[].algorithm_source",
        "distributions.algorithms[].kernel_specialization",
    ],
    "1.10": [
        "run.recorded_at",
        "run.recorded_at_source",
        "run.job",
        "run.commit",
        "run.label",
        "run.sources",
        "collectives.per_collective[].size_min_bytes",
        "collectives.per_collective[].size_max_bytes",
        "collectives.per_collective[].median_transfer_busbw_Bps",
        "nccl.problems",
    ],
    "1.9": ["dimensions", "moe", "roofline", "links_measured"],
    "1.8": ["kernels"],
    "1.7": [
        "time_budget.per_step[].comm_device_us",
        "time_budget.per_step[].comm_copy_us",
        "time_budget.per_step[].comm_host_us",
        "time_budget.per_step[].host_comm_wait_us",
        "verdict.run_shape",
        "across_ranks.per_rank[].last_p_value",
        "across_ranks.per_rank[].launch_delay_us",
        "across_ranks.per_rank[].launch_delay_excess_us",
        "prediction.achieved_over_peak",
        "prediction.headline_doubt",
    ],
    "1.6": [
        "across_ranks.instances_total",
        "distributions.crossrank_skew",
        "time_budget.outliers",
        "bubbles.outliers",
        "across_ranks.outliers",
        "timeline.drilldown",
    ],
    "1.5": [
        "run.base_shifts_us",
        "prediction.gamma_pred",
        "prediction.gamma_ratio",
        "prediction.missing_input",
        "prediction.link_known",
        "prediction.assumed_links",
        "prediction.defaulted_inputs",
        "prediction.caveats",
        "prediction.topology",
        "across_ranks.per_rank[].host_entry_excess_us",
        "across_ranks.per_rank[].clock_uncertainty_us",
        "across_ranks.per_rank[].resolvable",
        "across_ranks.per_rank[].spans_hosts",
        "across_ranks.per_rank[].lateness_cost_us",
        "across_ranks.per_rank[].lateness_cost_share",
        "across_ranks.instances[].dtype",
    ],
    "1.4": [
        "verdict.prediction",
        "verdict.gamma",
        "verdict.gamma_pred",
        "verdict.gamma_ratio",
        "verdict.notes",
        "distributions.collective_calls",
        "run.timelines",
        "run.manifest",
    ],
    "1.3": ["distributions"],
    "1.2": [
        "bubbles",
        "nccl",
        "prediction",
        "across_ranks",
        "time_budget.per_step[].transfer_us",
        "time_budget.per_step[].transfer_gamma",
    ],
    "1.1": ["recommendations", "timeline", "collectives"],
}
"""What each version added (docs/json-schema.md); `[]` reaches into every row of a list."""
VERSIONS = ["1.0", *sorted(ADDED, key=lambda version: tuple(int(part) for part in version.split(".")))]


def traceview(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "traceview", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def _drop(document: Any, path: list[str]) -> None:
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        for row in document.get(head[:-2]) or []:
            _drop(row, rest)
    elif not rest:
        document.pop(head, None)
    elif isinstance(document.get(head), dict):
        _drop(document[head], rest)


def as_version(current: dict[str, Any], version: str) -> dict[str, Any]:
    """`current` as version `version` wrote it: every key a later version added removed."""
    older = copy.deepcopy(current)
    for later in VERSIONS[VERSIONS.index(version) + 1 :]:
        for dotted in ADDED[later]:
            _drop(older, dotted.split("."))
    older["schema_version"] = version
    return older


@pytest.fixture(scope="module")
def current(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    done = traceview("summary", str(SAMPLE), "--json", "-q")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    assert document["schema_version"] == VERSIONS[-1]
    return document


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_compares_against_todays(current: dict[str, Any], tmp_path: Path, version: str) -> None:
    old = tmp_path / f"v{version}.json"
    old.write_text(json.dumps(as_version(current, version)), encoding="utf-8")
    new = tmp_path / "today.json"
    new.write_text(json.dumps(current), encoding="utf-8")
    for pair in ((old, new), (new, old), (old, old)):
        done = traceview("compare", *map(str, pair), "--json")
        assert done.returncode == 0, (version, done.stderr)  # the same run: no regression
        assert json.loads(done.stdout)["different_jobs"] == []


def test_every_version_in_one_trend(current: dict[str, Any], tmp_path: Path) -> None:
    for version in VERSIONS:
        (tmp_path / f"v{version}.json").write_text(json.dumps(as_version(current, version)), encoding="utf-8")
    done = traceview("trend", str(tmp_path), "--json")
    assert done.returncode in (0, 1), done.stderr
    assert len(json.loads(done.stdout)["runs"]) == len(VERSIONS)


REFUSED: list[tuple[str, Any, str]] = [
    (
        "another major version",
        {"schema_version": "2.0", "run": {}, "time_budget": {}},
        r"schema 2\.0 is not 1\.x",
    ),
    ("no run section", "drop:run", r"without field 'run'"),
    ("every section null", "nulls", r"without field 'run'"),
    ("no per-step rows", "drop:time_budget.per_step", r"without field 'time_budget\.per_step'"),
    ("per-step rows not a list", "set:time_budget.per_step={}", r"field 'time_budget\.per_step' is a dict"),
    ("schema_version a number", "set:schema_version=1.6", r"'schema_version' is 1\.6, not MAJOR\.MINOR"),
    ("a section of the wrong type", "set:verdict=[]", r"'verdict' is a list, not an object"),
    (
        "another tool's JSON with our keys",
        {"schema_version": "1.0", "time_budget": {}},
        r"without field 'run'",
    ),
    ("not JSON", 'text:{"schema_version": "1.6", ', r"not a traceview summary: not JSON"),
]


def _damaged(current: dict[str, Any], how: Any) -> str:
    if not isinstance(how, str):
        return json.dumps(how)
    if how.startswith("text:"):
        return how[5:]
    document = copy.deepcopy(current)
    if how == "nulls":
        return json.dumps({k: (None if isinstance(v, dict) else v) for k, v in document.items()})
    action, _, target = how.partition(":")
    dotted, _, value = target.partition("=")
    *parents, leaf = dotted.split(".")
    holder = document
    for part in parents:
        holder = holder[part]
    if action == "drop":
        holder.pop(leaf)
    else:
        holder[leaf] = json.loads(value)
    return json.dumps(document)


@pytest.mark.parametrize(("case", "how", "says"), REFUSED, ids=[case for case, _, _ in REFUSED])
def test_a_summary_compare_cannot_read_is_refused_naming_file_and_field(
    current: dict[str, Any], tmp_path: Path, case: str, how: Any, says: str
) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(current), encoding="utf-8")
    bad.write_text(_damaged(current, how), encoding="utf-8")
    done = traceview("compare", str(good), str(bad))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "bad.json" in lines[0]
    assert re.search(says, lines[0]), lines[0]


def test_a_summary_with_invalid_utf8_is_refused_in_one_line(current: dict[str, Any], tmp_path: Path) -> None:
    """Invalid UTF-8 inside a string (msgspec raises one exception or another for it by release) is a summary
    that is not JSON, said in one line naming the file, never a traceback."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(current), encoding="utf-8")
    bad.write_bytes(json.dumps(current).encode().replace(b'"kind"', b'"ki\xffnd"', 1))
    done = traceview("compare", str(good), str(bad))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "bad.json" in lines[0], lines[0]
    assert "not JSON" in lines[0], lines[0]


THRESHOLDS: list[tuple[str, str, str]] = [
    ("unknown key", "[compare]\nthreshhold_pct = 3\n", r"unknown key compare\.threshhold_pct"),
    ("unknown table", "[comparison]\nalpha = 0.1\n", r"unknown table \[comparison\]"),
    ("a string for a number", '[compare]\nalpha = "0.05"\n', r"compare\.alpha takes a number"),
    ("a float for a count", "[compare]\nmin_samples = 2.5\n", r"compare\.min_samples takes a whole number"),
    ("NaN", "[compare]\nthreshold_pct = nan\n", r"threshold_pct = nan is not in"),
    ("infinity per metric", "[compare.metric_threshold_pct]\nskew_us = inf\n", r"skew_us = inf is not in"),
    ("a bad per-metric value", '[compare.metric_threshold_pct]\nskew_us = "x"\n', r"skew_us takes a number"),
    (
        "an unknown trend metric",
        '[trend]\nmetrics = ["step_us", "stepp_us"]\n',
        r"unknown metric\(s\) \['stepp_us'\]",
    ),
    ("not TOML", "[compare\n", r"not valid TOML"),
]


@pytest.mark.parametrize(("case", "text", "says"), THRESHOLDS, ids=[case for case, _, _ in THRESHOLDS])
def test_a_bad_thresholds_file_is_refused(
    current: dict[str, Any], tmp_path: Path, case: str, text: str, says: str
) -> None:
    saved = tmp_path / "s.json"
    saved.write_text(json.dumps(current), encoding="utf-8")
    thresholds = tmp_path / "t.toml"
    thresholds.write_text(text, encoding="utf-8")
    for command in (["compare", str(saved), str(saved)], ["trend", str(saved)]):
        done = traceview(*command, "--thresholds", str(thresholds))
        assert done.returncode == 2, done.stderr
        assert re.search(says, done.stderr), done.stderr
        assert done.stdout == ""  # refused before anything was compared


def test_fail_on_is_checked_before_any_file_is_read(tmp_path: Path) -> None:
    for command in (["summary", str(tmp_path / "missing")], ["compare", "a", "b"], ["nccl", "x.log"]):
        done = traceview(*command, "--fail-on", "regresions>0")
        assert done.returncode == 2
        assert "unknown metric 'regresions'" in done.stderr
        assert "missing" not in done.stderr.replace("'regresions'", "")
