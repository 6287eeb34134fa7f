"""The first screen as a user sees it, read from the page a real browser rendered (headless Chromium through
the DevTools protocol, tests/browser.py): the verdict, the first recommendation and the tiles of the
README's sample and of real multi-rank runs of `../shared`, each checked against `traceview summary --json`
of the same run. Both come from the command line as a user runs it (`traceview report RUN -o page.html`,
`traceview summary RUN --json`). The expected tiles are stated from the JSON's own sections, not from the
figures the page reads: gamma, exposed gamma and the shares from `time_budget.run_median`, the predicted
gamma and the ratio from the method `verdict.gamma_pred_source` names (`replay`: the `comm_model` lever's
gamma of `replay.levers`, the ratio the `as_recorded` lever's gamma over it; `closed form`: measured over
predicted gamma of `prediction.run`), the straggler from `across_ranks.stragglers`; a
figure the verdict withholds (`verdict.withheld`) must read `withheld`, one no analysis produced `not
measured`.

Skipped when /usr/bin/chromium is absent, except under CI (`CI` set), where a missing browser is a failure.
What each page showed goes to test-artifacts/first-screen-NAME.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import Browser, assert_clean, chromium_or_skip, page_state
from tests.shared_data import REAL_KINETO, requires_shared

CHROMIUM = Path(os.environ.get("TRACEVIEW_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "dp8_straggler"
REAL_RUNS = {
    "gloo_dp2": REAL_KINETO / "h200_pt211_gloo_dp2",  # 2 ranks, the prediction withheld (FLOP/s past peak)
    "sampled_2rank": REAL_KINETO / "hta_sampled_2rank",  # 2 ranks of a 128-rank job (exit 4: partial)
}

FIRST_SCREEN = """(function () {
  function text(el) { return el ? el.innerText.replace(/\\s+/g, ' ').trim() : null; }
  var verdict = document.getElementById('verdict');
  return {
    heading: text(verdict.querySelector('h2')),
    sentence: text(document.getElementById('verdict-sentence')),
    prediction: text(document.getElementById('verdict-prediction')),
    run_shape: Array.prototype.map.call(verdict.querySelectorAll('p.run-shape'), text),
    top: text(document.getElementById('top-recommendation')),
    tiles: Array.prototype.map.call(document.querySelectorAll('#verdict-figures .fact'), function (tile) {
      return [text(tile.querySelector('.label')), text(tile.querySelector('.value'))];
    }),
    top_visible: document.getElementById('top-recommendation').getBoundingClientRect().top < innerHeight
  };
})()"""
"""What the first screen shows, as rendered text (innerText: what CSS leaves visible, whitespace folded)."""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    running = Browser(chromium_or_skip(CHROMIUM), tmp_path_factory.mktemp("profile"))
    yield running
    running.close()


def _traceview(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "traceview", *args, "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 4), done.stderr  # 4: a run holding some ranks of a larger job
    return done


def _rendered(browser: Browser, run: Path, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the first screen as the browser shows it, the JSON summary) of `run`."""
    page = tmp_path / "report.html"
    _traceview("report", str(run), "-o", str(page))
    document: dict[str, Any] = json.loads(_traceview("summary", str(run), "--json").stdout)
    browser.open("about:blank")
    browser.problems()
    browser.open(page.as_uri())
    browser.wait_for("document.documentElement.dataset.drawn === 'true'", timeout=120)
    assert_clean(page_state(browser))
    screen: dict[str, Any] = browser.evaluate(FIRST_SCREEN)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"first-screen-{run.name}.json").write_text(json.dumps(screen, indent=1), encoding="utf-8")
    return screen, document


def _fold(text: str) -> str:
    return " ".join(text.split())


def expected_tiles(document: dict[str, Any]) -> dict[str, str]:
    """Each tile's text as the JSON states it (module docstring), by label."""
    median = document["time_budget"]["run_median"]
    step = median["step_us"]
    pooled = (document.get("prediction") or {}).get("run") or {}
    withheld = {name for name, _ in document["verdict"]["withheld"]}
    stragglers = document["across_ranks"]["stragglers"] if document.get("across_ranks") else []
    predicted, measured = pooled.get("gamma_pred"), pooled.get("gamma")
    if document["verdict"].get("gamma_pred_source") == "replay":
        levers = {row["lever"]: row["gamma"] for row in document["replay"]["levers"]}
        predicted, measured = levers["comm_model"], levers["as_recorded"]
    stated: dict[str, tuple[str, str | None]] = {
        "measured gamma": ("gamma", f"{median['gamma']:.2f}"),
        "predicted gamma": ("gamma_pred", None if predicted is None else f"{predicted:.2f}"),
        "measured / predicted": (
            "gamma_ratio",
            None if not predicted else f"{measured / predicted:.2f}x",
        ),
        "exposed communication": (
            "exposed_comm_share",
            f"{median['exposed_comm_us'] / step:.0%}",
        ),
        "exposed gamma": ("exposed_gamma", f"{median['exposed_gamma']:.2f}"),
        "GPU idle": ("idle_share", f"{median['idle_us'] / step:.0%}"),
        "top straggler": ("straggler_rank", f"rank {stragglers[0]}" if stragglers else "none"),
    }
    return {
        label: "withheld" if name in withheld else "not measured" if value is None else value
        for label, (name, value) in stated.items()
    }


def check_first_screen(screen: dict[str, Any], document: dict[str, Any]) -> None:
    """The rendered verdict, first recommendation and tiles say what the JSON says."""
    verdict = document["verdict"]
    assert screen["heading"] == f"Verdict: {verdict['label']}"
    assert screen["sentence"] == _fold(verdict["sentence"])
    assert screen["prediction"] == (_fold(verdict["prediction"]) if verdict["prediction"] else None)
    assert screen["run_shape"] == [_fold(line) for line in verdict["run_shape"]]
    items = document["recommendations"]["items"]
    assert items, "a first recommendation is expected on these runs"
    assert screen["top"].startswith(f"What to change first: {_fold(items[0]['sentence'])}")
    assert screen["top_visible"]
    assert dict(screen["tiles"]) == expected_tiles(document)


def test_the_readme_sample_first_screen(browser: Browser, tmp_path: Path) -> None:
    screen, document = _rendered(browser, SAMPLE, tmp_path)
    check_first_screen(screen, document)
    # the sample's ground truth, independently: rank 5 is the planted compute straggler
    truth = json.loads(SAMPLE.with_suffix(".ground_truth.json").read_text())
    assert dict(screen["tiles"])["top straggler"] == f"rank {truth['straggler_rank']}"


@requires_shared
@pytest.mark.parametrize("name", sorted(REAL_RUNS))
def test_a_real_multi_rank_run_first_screen(browser: Browser, tmp_path: Path, name: str) -> None:
    run = REAL_RUNS[name]
    screen, document = _rendered(browser, run, tmp_path)
    check_first_screen(screen, document)
    assert len(document["run"]["ranks"]) == len(list(run.iterdir())) > 1  # a multi-rank run, every rank read
    if document["verdict"]["withheld"]:  # withheld on the tiles, stated in the verdict's prediction line
        assert "withheld" in screen["prediction"]
    if document["run"]["world_size"] > len(document["run"]["ranks"]):  # some ranks of a larger job
        assert screen["run_shape"], "the absent peers are said beside the verdict"
