"""Golden files: the report page and the JSON summary of the small run, byte for byte.

The page is compared with plotly.js replaced by a marker and the generation time normalised; nothing else may
differ between two renders or two machines (no absolute paths, no random ids). After an intended change, run
`pytest tests/test_report_golden.py --regen-golden` and review the diff of tests/golden/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from traceview.reports.html.page import render_html
from traceview.reports.json.summary import render_json

from tests import report_factory as rf
from traceview.load.inputs import load_run
from traceview.reduce.analysis import RunAnalysis, analyze

GOLDEN = Path(__file__).parent / "golden"
GENERATED = re.compile(r'<span id="generated">[^<]*</span>')
PLOTLY_JS = re.compile(r'<script id="plotly-js">.*?</script>', re.S)


def normalised(page: str) -> str:
    """The page with plotly.js and the generation time replaced by markers."""
    page = GENERATED.sub('<span id="generated">GENERATED</span>', page)
    return PLOTLY_JS.sub('<script id="plotly-js">PLOTLY_JS</script>', page)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> RunAnalysis:
    folder = tmp_path_factory.mktemp("golden")
    rf.write_run(folder / "run")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(
            folder
        )  # the run is named by a relative path, so no machine's temp folder reaches the page
        return analyze(load_run("run", workers=1))


def check(request: pytest.FixtureRequest, name: str, text: str) -> None:
    path = GOLDEN / name
    if request.config.getoption("--regen-golden"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run pytest {__file__} --regen-golden"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"{name} differs from the golden file (intended? --regen-golden, then review the diff)"
    )


def test_html_matches_golden(request: pytest.FixtureRequest, small: RunAnalysis) -> None:
    check(request, "small_run.html", normalised(render_html(small, plotlyjs="inline")))


def test_json_matches_golden(request: pytest.FixtureRequest, small: RunAnalysis) -> None:
    check(request, "small_run.json", render_json(small) + "\n")


def test_same_input_same_bytes_but_the_timestamp(small: RunAnalysis, tmp_path: Path) -> None:
    first, second = render_html(small), render_html(small)
    assert GENERATED.sub("", first) == GENERATED.sub("", second)
    rf.write_run(tmp_path / "run")  # a second parse of an identical run, in another folder
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        again = analyze(load_run("run", workers=1))
    assert normalised(render_html(again)) == normalised(first)


def test_no_absolute_paths_timestamps_or_random_ids(small: RunAnalysis) -> None:
    page = normalised(render_html(small))
    assert "/tmp" not in page
    assert str(Path.cwd()) not in page
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    assert not re.search(uuid, page)  # plotly's to_html would name its divs by uuid
    assert not re.search(r"20\d\d-\d\d-\d\d", page)  # the one timestamp is normalised away
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
