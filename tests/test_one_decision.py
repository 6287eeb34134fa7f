"""The first screen from one source: a figure the verdict withholds is withheld on every surface (tiles,
card, `figures`, `--fail-on`: `not evaluated`, exit 4); a run holding some ranks of a larger job says so
beside the verdict and withholds the claim that needs the absent peers; warnings several ranks share are one
line; `--quiet` prints none."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import traceview
from tests.shared_data import REAL_KINETO, requires_shared

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def traceview_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
    )


@pytest.fixture(scope="module")
def doubted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ideal sample's traces without its run.json: the model prices them on defaults and guesses, 10x
    off the measurement, so the verdict withholds the prediction."""
    folder = tmp_path_factory.mktemp("doubted")
    for path in (SAMPLES / "dp8_ideal").glob("rank-*.pt.trace.json.gz"):
        shutil.copy(path, folder / path.name)
    return folder


def test_a_withheld_prediction_is_withheld_everywhere(doubted: Path) -> None:
    result = traceview.analyze(str(doubted))
    withheld = dict(result.raw.verdict.withheld)
    assert set(withheld) == {"gamma_pred", "gamma_ratio"}
    assert "Predicted gamma withheld" in result.raw.verdict.prediction
    assert result.figures["gamma_ratio"] is None
    assert result.figures["gamma_pred"] is None
    assert result.raw.verdict.gamma_ratio is None
    assert result.raw.prediction is not None  # its figures stay in the prediction section
    card = result._repr_html_()
    assert "predicted gamma</td><td style='text-align:right'>withheld" in card
    page = doubted / "page.html"
    done = traceview_cli("report", str(doubted), "-q", "-o", str(page), cwd=doubted)
    assert done.returncode == 0, done.stderr
    html = page.read_text(encoding="utf-8")
    assert '<div class="value">withheld</div><div class="label">predicted gamma</div>' in html
    assert '<div class="value">withheld</div><div class="label">measured / predicted</div>' in html


def test_fail_on_a_withheld_figure_is_not_evaluated(doubted: Path) -> None:
    done = traceview_cli("summary", str(doubted), "-q", "--fail-on", "gamma_ratio>2", cwd=doubted)
    assert done.returncode == 4, done.stderr
    assert "not evaluated: gamma_ratio>2 (withheld: measured gamma is" in done.stderr


def test_fail_on_an_absent_figure_is_not_evaluated_and_a_crossing_wins(doubted: Path) -> None:
    absent = traceview_cli("summary", str(doubted), "-q", "--fail-on", "pipeline_bubble>0.5", cwd=doubted)
    assert absent.returncode == 4, absent.stderr
    assert "not evaluated: pipeline_bubble>0.5 (the run has no value for it)" in absent.stderr
    both = ("--fail-on", "pipeline_bubble>0.5", "--fail-on", "step_us>0")
    crossed = traceview_cli("summary", str(doubted), "-q", *both, cwd=doubted)
    assert crossed.returncode == 1, crossed.stderr


def test_warnings_shared_by_ranks_are_one_line_and_quiet_silences_them(tmp_path: Path) -> None:
    for rank in range(8):
        source = SAMPLES / "dp8_straggler" / f"rank-{rank}.pt.trace.json.gz"
        with gzip.open(source, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
        document.pop("baseTimeNanoseconds", None)
        with gzip.open(tmp_path / source.name, "wt", encoding="utf-8") as handle:
            json.dump(document, handle)
    loud = traceview_cli("collectives", str(tmp_path), cwd=tmp_path)
    assert loud.returncode == 0, loud.stderr
    lines = [line for line in loud.stderr.splitlines() if "baseTimeNanoseconds" in line]
    assert len(lines) == 1
    assert lines[0].startswith("traceview: warning: ranks 0-7: no baseTimeNanoseconds")
    quiet = traceview_cli("summary", str(tmp_path), "-q", cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "baseTimeNanoseconds" not in quiet.stdout + quiet.stderr
    assert "verdict" in quiet.stdout


@requires_shared
def test_one_rank_of_sixteen_says_so_beside_the_verdict(tmp_path: Path) -> None:
    [trace] = sorted((REAL_KINETO / "hta_16rank_job_rank0").iterdir())
    result = traceview.analyze(str(trace))
    assert any("holds 1 of the job's 16 ranks" in line for line in result.raw.verdict.run_shape)
    assert "the gap is mostly" not in result.raw.verdict.prediction
    done = traceview_cli("summary", str(trace), "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # a trace given alone: not partial
