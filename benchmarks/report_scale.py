"""The report's size and its load time in a real browser, from 8 to 1,024 ranks.

    python benchmarks/report_scale.py                      # 8, 64 and 1,024 ranks
    python benchmarks/report_scale.py --ranks 8 64 --loads 5

Per N, the simulator (`tests.simulate.scenario`) writes a run shaped like sample_traces/dp8_straggler at N
ranks (6 steps, 8 all-reduces of 25 MiB over the world per step, 8 ranks per host (4 at N = 8), every other
host's clock 25 ms ahead, rank 5 a compute straggler); `traceview.analyze` reads it (2 workers) and the report
is rendered with plotly.js inline. Headless Chromium (tests/browser.py) then opens the page once (cold:
plotly.js not yet compiled) and `--loads` times more, each after about:blank, and takes the page's own mark
`traceview-drawn` (every figure drawn and painted) since navigation started; printed: the cold load, the
median and max of the others, the page size, and the ratios against the smallest N (the baseline, run in the
same process).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.browser: the DevTools-protocol client the browser tests use

from plotly.offline import get_plotlyjs  # noqa: E402

import traceview  # noqa: E402
from tests.browser import Browser  # noqa: E402

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # the simulator is a test helper: tests/simulate/

from tests.simulate.scenario import CollectiveSpec, ProcessGroupSpec, Scenario, StragglerSpec, write_run  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
MIB = 1 << 20


def scenario(ranks: int) -> Scenario:
    """dp8_straggler's run at `ranks` ranks (module docstring)."""
    per_host = 4 if ranks <= 8 else 8
    world = ProcessGroupSpec("0", "default_pg", tuple(range(ranks)))
    return Scenario(
        ranks=ranks,
        ranks_per_host=per_host,
        steps=6,
        collectives=tuple(CollectiveSpec("AllReduce", 25 * MIB, world, "BFloat16") for _ in range(8)),
        compute_us=60_000.0,
        jitter=0.02,
        optimizer_us=1_500.0,
        bandwidth_Bps=25e9,
        alpha_s=10e-6,
        overlap=True,
        host_offsets_us=tuple(25_000.0 * (host % 2) for host in range(-(-ranks // per_host))),
        straggler=StragglerSpec(rank=5, kind="compute", delay_us_min=8_000.0, delay_us_max=15_000.0),
        seed=1,
    )


def load_seconds(browser: Browser, page: Path) -> float:
    """One load of `page`: navigation start to the page's `traceview-drawn` mark, in seconds."""
    browser.open("about:blank")
    browser.open(page.as_uri())
    browser.wait_for("document.documentElement.dataset.drawn === 'true'", timeout=120)
    drawn: float = browser.evaluate("performance.getEntriesByName('traceview-drawn')[0].startTime")
    problems = [p for p in browser.problems() if "GL Driver Message" not in p]
    if problems:
        raise SystemExit(f"{page}: the page reported {problems[:3]}")
    return drawn / 1000


def measure(ranks: int, work: Path, browser: Browser, loads: int) -> dict[str, float]:
    """Simulate, analyse, render and load one run of `ranks` ranks."""
    run = work / f"run-{ranks}"
    write_run(scenario(ranks), run, gzip=True)
    start = time.perf_counter()
    analysis = traceview.analyze(run, workers=2)
    analysed = time.perf_counter() - start
    page = work / f"report-{ranks}.html"
    analysis.to_html(page)
    cold, *warm = [load_seconds(browser, page) for _ in range(loads + 1)]
    return {
        "ranks": ranks,
        "analyse_s": analysed,
        "mb": page.stat().st_size / 1e6,
        "cold_s": cold,
        "load_s": statistics.median(warm),
        "load_max_s": max(warm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 1024])
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="keep the runs and reports in this folder")
    args = parser.parse_args()
    plotly_mb = len(get_plotlyjs().encode()) / 1e6
    with tempfile.TemporaryDirectory() as folder:
        work = args.keep or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        browser = Browser(CHROMIUM, Path(folder) / "profile")
        try:
            rows = [measure(n, work, browser, args.loads) for n in sorted(args.ranks)]
        finally:
            browser.close()
    base = rows[0]
    print(
        f"plotly.js inline: {plotly_mb:.2f} MB of every page; per page the first load (cold), then "
        f"{args.loads}"
    )
    print("more (median, max): navigation start to every figure drawn and painted, measured in the page")
    print(
        f"{'ranks':>6} {'analyse s':>10} {'report MB':>10} {'cold s':>7} {'load s':>7} {'max s':>6} "
        f"{'MB x':>6}"
        f" {'load x':>7}"
    )
    for row in rows:
        print(
            f"{row['ranks']:>6.0f} {row['analyse_s']:>10.1f} {row['mb']:>10.2f} {row['cold_s']:>7.2f}"
            f" {row['load_s']:>7.2f} {row['load_max_s']:>6.2f} {row['mb'] / base['mb']:>6.2f}"
            f" {row['load_s'] / base['load_s']:>7.2f}"
        )


if __name__ == "__main__":
    main()
