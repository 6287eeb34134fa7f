"""`traceview compare` and `traceview trend`: thin parse -> compare -> render commands (docs/compare.md).

Each side of a comparison is a run (file, folder, glob, run.json) or a JSON summary written earlier by
`traceview summary RUN --json`. Exit codes as elsewhere: 0 no significant regression, 1 a regression (or a
`--fail-on` threshold crossed), 2 bad input, 4 compared without inputs either run could not read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from traceview.cli.app import (
    analyse,
    check_thresholds,
    gate,
    print_json,
    report_skipped,
    say,
    size_text,
    stdout_console,
    write_text,
)
from traceview.cli.base import Command, FailOnOpt, WideOpt, user_option
from traceview.compare.saved_summary import (
    COMPARE_NEEDS,
    TREND_NEEDS,
    is_summary,
    read_documents,
    read_summary,
    summary_files,
)
from traceview.core.errors import (
    InputError,
    PartialRun,
    RunError,
    ThresholdCrossed,
    TraceviewError,
    UsageError,
    reason_of,
)
from traceview.core.location import Location, location
from traceview.core.sanitize import printable

ThresholdOpt = Annotated[
    float | None,
    typer.Option("--threshold", help="Relative change (percent) a regression must exceed (default 5)."),
]
ThresholdsFileOpt = Annotated[
    Path | None, typer.Option("--thresholds", help="TOML file of thresholds (docs/compare.md, 'Thresholds').")
]


def summary_from_file(spec: str) -> dict[str, Any] | None:
    """The summary document `spec` names, checked for what a comparison needs; None when it is not a saved
    summary (a run: a trace, a folder, a run.json)."""
    path = location(spec)
    if not is_summary(path):
        return None
    return read_summary(path, COMPARE_NEEDS)


def summary_of(spec: str, workers: int | None) -> dict[str, Any]:
    """The summary document of a run spec or a saved summary: a run is analysed as `traceview summary RUN
    --json` would (the map/reduce pipeline, its NCCL logs), quietly."""
    found = summary_from_file(spec)
    if found is not None:
        found.setdefault("run", {}).setdefault("source", spec)
        return found
    import msgspec

    from traceview.options.run import build_options
    from traceview.options.user import UserOptions
    from traceview.reports.json.encode import json_bytes
    from traceview.reports.json.summary import summary_document

    analysis = analyse(spec, build_options(spec, UserOptions(workers=workers)), quiet=True)
    report_skipped(analysis)
    document: dict[str, Any] = msgspec.json.decode(json_bytes(summary_document(analysis, full=True)))
    document["run"]["source"] = spec  # as given (a run.json, not the files it lists)
    return document


def _local_files(*specs: str) -> list[str | Path]:
    """The local input files of the compared runs (their traces, NCCL logs and run.json, or the saved
    summary), for the `-o` check; nothing for URLs."""
    from traceview.cli.app import run_inputs
    from traceview.options.run import build_options

    found: list[str | Path] = []
    for spec in specs:
        try:
            found += run_inputs(spec, build_options(spec))
        except TraceviewError:
            continue
    return found


def _show_comparison(
    comparison: Any, json_output: bool, markdown: bool, output: Path | None, wide: bool = False
) -> None:
    """The comparison on stdout (tables, `--json` or `--markdown`) and, with `-o`, as its page."""
    if output is not None:  # the page first: a page that cannot be written is refused before anything is said
        from traceview.reports.html.compare import render_compare_html

        size = write_text(output, render_compare_html(comparison))
        say(f"wrote {printable(output)} ({size_text(size)})")
    if json_output:
        from traceview.reports.json.compare import compare_document

        print_json(compare_document(comparison))
    elif markdown:
        from traceview.reports.text.compare_markdown import render_markdown

        sys.stdout.write(render_markdown(comparison))
    else:
        from traceview.reports.text.compare import render_comparison

        render_comparison(comparison, stdout_console(200, wide=wide))


def raise_exit_status(comparison: Any, sides: tuple[dict[str, Any], ...], fail_on: list[str] | None) -> None:
    """The comparison's exit, in the README's order: a regression (or a `--fail-on` crossed) is 1; then
    inputs a run could not read, a regression uncertain for the ranks not read, or a `--fail-on` figure not
    evaluated, are 4 (`PartialRun`)."""
    unevaluated: list[str] = []
    if fail_on:
        unevaluated = gate(comparison.gate_figures(), fail_on)
    elif comparison.failing:
        raise ThresholdCrossed(f"regression: {comparison.verdict}")
    skipped = sum(len(side.get("run", {}).get("skipped") or ()) for side in sides)
    if skipped:
        raise PartialRun(f"compared without {skipped} input(s) that could not be read (named in the runs)")
    if any(f.partial for f in comparison.regressions):
        unevaluated.append(f"uncertain: {'; '.join(comparison.structure.partial_notes)}")
    if unevaluated:
        raise PartialRun("; ".join(unevaluated))


class Compare(Command):
    """Compare two runs: significant regressions and improvements, with their cause; exit 1 on a
    regression."""

    name = "compare"

    def run(
        self,
        baseline: Annotated[
            str, typer.Argument(help="Baseline: a run (file, folder, glob, run.json) or a summary JSON.")
        ],
        candidate: Annotated[str, typer.Argument(help="Candidate: a run or a summary JSON.")],
        json_output: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
        output: Annotated[
            Path | None, typer.Option("-o", "--output", help="Write the HTML diff report here.")
        ] = None,
        markdown: Annotated[
            bool, typer.Option("--markdown", help="Print a short Markdown summary (CI comment).")
        ] = False,
        threshold: ThresholdOpt = None,
        thresholds: ThresholdsFileOpt = None,
        fail_on: FailOnOpt = None,
        wide: WideOpt = False,
        workers: Annotated[int | None, user_option("workers")] = None,
        allow_different_jobs: Annotated[
            bool,
            typer.Option(
                "--allow-different-jobs",
                help="Compare runs of different jobs (parameters, world size, process groups or model shapes "
                "differ); without it they are refused (exit 2). One model at two sizes: `traceview scaleup`.",
            ),
        ] = False,
    ) -> None:
        """Compare two runs: significant regressions and improvements, with their cause; exit 1 on a
        regression."""
        from traceview.compare.settings import load_settings
        from traceview.compare.two_runs import COMPARE_GATE_FIGURES
        from traceview.compare.two_runs import compare as compare_runs
        from traceview.core.output import refuse_inputs

        check_thresholds(fail_on, COMPARE_GATE_FIGURES)
        settings, _ = load_settings(thresholds, threshold)
        if output is not None:
            given: list[str | Path] = [baseline, candidate, *([thresholds] if thresholds else [])]
            refuse_inputs(output, [*given, *_local_files(baseline, candidate)])
        sides = summary_of(baseline, workers), summary_of(candidate, workers)
        comparison = read_documents(
            [(baseline, sides[0]), (candidate, sides[1])],
            lambda docs: compare_runs(docs[0], docs[1], settings),
        )
        if comparison.different_jobs and not allow_different_jobs:
            raise RunError(
                f"{printable(baseline)} and {printable(candidate)} are different jobs: "
                f"{printable('; '.join(comparison.different_jobs))} (compare them anyway with "
                f"--allow-different-jobs; one model at two sizes: traceview scaleup SMALL LARGE)"
            )
        _show_comparison(comparison, json_output, markdown, output, wide)
        raise_exit_status(comparison, sides, fail_on)


HistoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--history",
        help="Parquet file of the series: the summaries given are added to it (atomically, one writer at a "
        "time) and the trend is drawn over all of it.",
    ),
]


def _file_time_us(path: Location) -> float | None:
    try:
        return None if not isinstance(path, Path) else path.stat().st_mtime * 1e6
    except OSError:
        return None


def _series(path: Location) -> Any:
    """The run a saved summary at `path` is (`traceview.compare.series.run_series`); `InputError` names
    it."""
    from traceview.compare.findings import CompareSettings
    from traceview.compare.series import run_series
    from traceview.compare.two_runs import compare

    document = read_summary(path, TREND_NEEDS)
    file_time = _file_time_us(path)

    def series(docs: list[Any]) -> Any:  # what trend's compare pass reads of it, read once here
        compare(docs[0], docs[0], CompareSettings())
        return run_series(path.name, docs[0], file_time)

    return read_documents([(str(path), document)], series)


def read_series(specs: list[str]) -> tuple[list[Any], list[tuple[str, str]]]:
    """The runs the summaries `specs` name (files, folders, globs, URLs), and those skipped (path, reason):
    a file that is not a readable traceview summary is skipped and named."""
    runs, skipped = [], []
    for path in [found for spec in specs for found in summary_files(spec)]:
        try:
            runs.append(_series(path))
        except InputError as exc:
            skipped.append((str(path), reason_of(exc)))
    return runs, skipped


def _trend_runs(
    summaries: list[str], history: Path | None, lock_timeout_s: float = 60.0
) -> tuple[list[Any], list[tuple[str, str]]]:
    """The runs of the trend: the summaries given (those unreadable skipped, each named on stderr), added to
    the history when one is kept and then every run it holds; an error when summaries were given and none
    could be read."""
    from traceview.compare.history import read_history, runs_of, update_history

    runs, skipped = read_series(summaries)
    if summaries and not runs:  # one line: the refusal names the first and counts the others
        first = skipped[0]
        if len(skipped) == 1:
            raise InputError(first[0], first[1])
        raise InputError(first[0], f"none of the {len(skipped)} summaries could be read; first: {first[1]}")
    for path, reason in skipped:
        say(f"traceview: warning: skipped {printable(path)}: {printable(reason)}")
    if history is not None:
        if runs:
            runs, replaced = update_history(history, runs, lock_timeout_s)
            for line in replaced:
                say(f"traceview: note: {printable(line)}")
        else:
            runs = runs_of(read_history(history))
    return runs, skipped


def _show_trend(result: Any, json_output: bool, output: Path | None, wide: bool = False) -> None:
    """The trend's warnings on stderr, the trend on stdout (tables or `--json`) and, with `-o`, its page."""
    if output is not None:  # the page first: a page that cannot be written is refused before anything is said
        from traceview.reports.html.compare import render_trend_html

        size = write_text(output, render_trend_html(result))
        say(f"wrote {printable(output)} ({size_text(size)})")
    for warning in result.warnings:
        say(f"traceview: warning: {printable(warning)}")
    if json_output:
        from traceview.reports.json.compare import trend_document

        print_json(trend_document(result))
    else:
        from traceview.reports.text.compare import render_trend

        render_trend(result, stdout_console(200, wide=wide))


class Trend(Command):
    """Metrics over a series of nightly summaries, ordered by run time: change points, the latest run against
    the history; exit 1 on a regression of the latest run."""

    name = "trend"

    def run(
        self,
        summaries: Annotated[
            list[str] | None,
            typer.Argument(
                help="JSON summaries of the nightly runs (summary --json): files, folders, globs or URLs.",
                show_default=False,
            ),
        ] = None,
        json_output: Annotated[bool, typer.Option("--json", help="Print the trend as JSON.")] = False,
        output: Annotated[
            Path | None, typer.Option("-o", "--output", help="Write the HTML trend page here.")
        ] = None,
        history: HistoryOpt = None,
        threshold: ThresholdOpt = None,
        thresholds: ThresholdsFileOpt = None,
        lock_timeout: Annotated[
            float,
            typer.Option(
                "--lock-timeout",
                min=0,
                max=86_400,
                help="Seconds to wait for the --history lock another writer holds; then exit 2 naming it.",
            ),
        ] = 60.0,
        wide: WideOpt = False,
    ) -> None:
        """Metrics over a series of nightly summaries, ordered by run time: change points, the latest run
        against the history; exit 1 on a regression of the latest run."""
        from traceview.compare.settings import load_settings
        from traceview.compare.trend import trend_of_runs
        from traceview.core.output import refuse_inputs

        if not summaries and history is None:
            raise UsageError("give summaries (files, folders, globs, URLs) or --history FILE, or both")
        compare_settings, settings = load_settings(thresholds, threshold)
        if output is not None:
            inputs = [str(p) for spec in summaries or () for p in summary_files(spec)]
            named = [*([history] if history else []), *([thresholds] if thresholds else [])]
            refuse_inputs(output, [*inputs, *named])
        runs, skipped = _trend_runs(list(summaries or ()), history, lock_timeout)
        result = trend_of_runs(runs, settings, compare_settings)
        _show_trend(result, json_output, output, wide)
        if result.latest_regressions:
            raise ThresholdCrossed(f"regression: {result.verdict}")
        if skipped:
            raise PartialRun(
                f"trend drawn without {len(skipped)} summar(ies) that could not be read (named above)"
            )
