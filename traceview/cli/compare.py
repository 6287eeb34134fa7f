"""`traceview compare` and `traceview trend`: thin parse -> compare -> render commands (docs/compare.md).

Each side of a comparison is a run (file, folder, glob, run.json) or a JSON summary written earlier by
`traceview summary RUN --json`. Exit codes as elsewhere: 0 no significant regression, 1 a regression (or a
`--fail-on` threshold crossed), 2 bad input, 4 compared without inputs either run could not read.
"""

from __future__ import annotations

import json
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
    stdout_console,
    write_text,
)
from traceview.cli.base import Command, FailOnOpt, user_option
from traceview.compare.saved_summary import check_sections, read_documents
from traceview.core.errors import InputError, PartialRun, ThresholdCrossed
from traceview.core.sanitize import printable

SUMMARY_KEYS = ("schema_version", "time_budget")
SUPPORTED_MAJOR = "1"

ThresholdOpt = Annotated[
    float | None,
    typer.Option("--threshold", help="Relative change (percent) a regression must exceed (default 5)."),
]
ThresholdsFileOpt = Annotated[
    Path | None, typer.Option("--thresholds", help="TOML file of thresholds (docs/compare.md, 'Thresholds').")
]


def summary_from_file(path: Path) -> dict[str, Any] | None:
    """The summary document in `path`, None when the file is not a traceview summary (a trace, run.json)."""
    if path.suffix != ".json" or not path.is_file():
        return None
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
        if b'"schema_version"' not in head:
            return None
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"cannot read the JSON summary: {exc}") from None
    if not isinstance(document, dict) or not all(key in document for key in SUMMARY_KEYS):
        return None
    if str(document["schema_version"]).split(".")[0] != SUPPORTED_MAJOR:
        raise InputError(
            path, f"summary schema {document['schema_version']} is not 1.x: written by another traceview"
        )
    check_sections(path, document)
    return document


def summary_of(spec: str, workers: int | None) -> dict[str, Any]:
    """The summary document of a run spec or a saved summary: a run is analysed as `traceview summary RUN
    --json` would (the map/reduce pipeline, its NCCL logs), quietly."""
    found = summary_from_file(Path(spec))
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
    document: dict[str, Any] = msgspec.json.decode(json_bytes(summary_document(analysis)))
    document["run"]["source"] = spec  # as given (a run.json, not the files it lists)
    return document


class Compare(Command):
    """Compare two runs: significant regressions and improvements, with their cause; exit 1 on a regression."""

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
        workers: Annotated[int | None, user_option("workers")] = None,
    ) -> None:
        """Compare two runs: significant regressions and improvements, with their cause; exit 1 on a regression."""
        from traceview.compare.two_runs import compare as compare_runs
        from traceview.compare.two_runs import load_settings

        check_thresholds(fail_on)
        settings, _ = load_settings(thresholds, threshold)
        sides = summary_of(baseline, workers), summary_of(candidate, workers)
        comparison = read_documents(
            [(baseline, sides[0]), (candidate, sides[1])],
            lambda docs: compare_runs(docs[0], docs[1], settings),
        )
        if json_output:
            from traceview.reports.json.compare import compare_document

            print_json(compare_document(comparison))
        elif markdown:
            from traceview.reports.text.compare_markdown import render_markdown

            typer.echo(render_markdown(comparison), nl=False)
        else:
            from traceview.reports.text.compare import render_comparison

            render_comparison(comparison, stdout_console(200))
        if output is not None:
            from traceview.reports.html.compare import render_compare_html

            write_text(output, render_compare_html(comparison))
            say(f"wrote {printable(output)}")
        if fail_on:
            gate(comparison.gate_figures(), fail_on)
        elif comparison.failing:
            raise ThresholdCrossed(f"regression: {comparison.verdict}")
        skipped = sum(len(side.get("run", {}).get("skipped") or ()) for side in sides)
        if skipped:
            raise PartialRun(
                f"compared without {skipped} input(s) that could not be read (named in the runs)"
            )


class Trend(Command):
    """Metrics over a series of summaries, change points, and the latest run against the history."""

    name = "trend"

    def run(
        self,
        summaries: Annotated[
            list[Path], typer.Argument(help="JSON summaries of the nightly runs (summary --json).")
        ],
        json_output: Annotated[bool, typer.Option("--json", help="Print the trend as JSON.")] = False,
        output: Annotated[
            Path | None, typer.Option("-o", "--output", help="Write the HTML trend page here.")
        ] = None,
        threshold: ThresholdOpt = None,
        thresholds: ThresholdsFileOpt = None,
    ) -> None:
        """Metrics over a series of summaries, change points, and the latest run against the history."""
        from traceview.compare.trend import trend as trend_of
        from traceview.compare.two_runs import load_settings

        _, settings = load_settings(thresholds, threshold)
        documents = []
        for path in summaries:
            found = summary_from_file(path)
            if found is None:
                raise InputError(
                    path, "not a traceview JSON summary (write one with `traceview summary RUN --json`)"
                )
            documents.append((path.name, found))
        sources = [(str(path), document) for path, (_, document) in zip(summaries, documents, strict=True)]
        names = [name for name, _ in documents]
        result = read_documents(sources, lambda docs: trend_of(list(zip(names, docs, strict=True)), settings))
        if json_output:
            from traceview.reports.json.compare import trend_document

            print_json(trend_document(result))
        else:
            from traceview.reports.text.compare import render_trend

            render_trend(result, stdout_console(200))
        if output is not None:
            from traceview.reports.html.compare import render_trend_html

            write_text(output, render_trend_html(result))
            say(f"wrote {printable(output)}")
        if result.latest_regressions:
            raise ThresholdCrossed(f"regression: {result.verdict}")
