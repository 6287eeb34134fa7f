"""Terminal summary with rich: the verdict first, the recommendations, then the run and the time budget."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from traceview.reports.text.dimensions import print_dimensions
from traceview.reports.text.fit import print_table

from traceview.core.durations import duration_cell
from traceview.core.sanitize import listed, printable
from traceview.reduce.analysis import RunAnalysis


def _ms(value: float | None) -> str:
    return duration_cell(value)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def text(value: object) -> str:
    """Input-derived text as rich markup that prints it literally, without control characters."""
    return escape(printable(value))


def render_summary(analysis: RunAnalysis, console: Console) -> None:
    """Print the verdict panel, the recommendations, the run header and the per-rank time budget."""
    verdict = analysis.verdict
    lines = (verdict.sentence, verdict.prediction, *verdict.run_shape, *verdict.notes)
    body = "\n".join(text(line) for line in lines if line)
    console.print(Panel(body, title=f"verdict: {analysis.verdict.label}", expand=False))
    _print_recommendations(analysis, console)
    header = analysis.header
    console.print(
        f"run [bold]{text(header.source)}[/bold]: {len(header.ranks)} rank(s) of world size "
        f"{header.world_size or '?'}; devices: {text(listed(header.devices)) or 'unknown'}; "
        f"{_step_sources(header.step_sources)}; "
        f"{analysis.budget.steps_analysed} (rank, step) windows analysed{_host_note(header.timelines)}",
        highlight=False,
        markup=True,
    )
    for path, reason in header.skipped:
        console.print(f"[yellow]skipped[/yellow] {text(path)}: {text(reason)}", markup=True, highlight=False)
    for warning in header.warnings:
        console.print(f"[yellow]warning[/yellow] {text(warning)}", markup=True, highlight=False)
    _print_inspector(analysis, console)
    print_table(console, _budget_table(analysis), BUDGET_DROP_FIRST)
    print_dimensions(analysis, console)


def _step_sources(sources: Sequence[str]) -> str:
    """Where the steps came from: `steps from gpu annotations`, or, where no rank has any (step source
    `none`), each rank one window."""
    named = [source for source in sources if source != "none"]
    if not named:
        return "no step annotations (one window a rank)"
    unnamed = " (a rank without any: one window)" if len(named) < len(sources) else ""
    return f"steps from {', '.join(named)} annotations{unnamed}"


def _print_inspector(analysis: RunAnalysis, console: Console) -> None:
    """NCCL Inspector's records joined to the trace, and where its busbw disagrees (no computation)."""
    found = analysis.inspector
    if found is None:
        return
    share = "" if found.joined_share is None else f" ({found.joined_share:.0%})"
    console.print(
        f"NCCL Inspector ({found.format_version}): {found.records} record(s) from {len(found.files)} "
        f"file(s), {found.joined.height} joined to the trace's calls{share}",
        markup=False,
        highlight=False,
    )
    for path, reason in found.skipped:
        console.print(f"[yellow]skipped[/yellow] {text(path)}: {text(reason)}", markup=True, highlight=False)
    for line in found.disagreements:
        console.print(f"[yellow]Inspector disagrees[/yellow] {text(line)}", markup=True, highlight=False)


def _host_note(timelines: tuple[str, ...]) -> str:
    """The timeline fact when some rank was analysed on its host operators (docs/metrics.md, "Host
    timeline")."""
    if "host" not in timelines:
        return ""
    return (
        "; timeline: host (no device activity: host operators are the compute, host collective ops the "
        "communication)"
    )


def _print_recommendations(analysis: RunAnalysis, console: Console) -> None:
    advice = analysis.recommendations
    if advice is None or not advice.items:
        return
    console.print("[bold]What to change[/bold] (highest stake first):", markup=True, highlight=False)
    for index, item in enumerate(advice.items, start=1):
        console.print(f"  {index}. {text(item.sentence)}", markup=True, highlight=False)


BUDGET_COLUMNS = (
    ("step", "step_us"),
    ("T_comp", "comp_us"),
    ("T_comm", "comm_us"),
    ("overlap", "overlap_us"),
    ("exposed comm", "exposed_comm_us"),
    ("idle", "idle_us"),
)
"""(header, column) of the budget table's times (ms); the ratios follow."""
SPLIT_COLUMNS = (
    ("comm: device", "comm_device_us"),
    ("copy engine", "comm_copy_us"),
    ("host", "comm_host_us"),
    ("host wait", "host_comm_wait_us"),
)
"""Where T_comm ran, and the device's wait inside host collectives: shown when some rank has any."""


BUDGET_DROP_FIRST = ("overlap", "overlap ratio", "steps", "T_comm", "gamma", "idle")
"""The time budget's columns hidden first on a narrow terminal (the step, compute, exposed communication
and exposed gamma stay longest)."""


def _budget_table(analysis: RunAnalysis) -> Table:
    title = "Time budget per rank (median over steps; ms)"
    if analysis.budget.comm_off_device:
        title += "; T_comm split by where it ran; host wait: the device idle inside a host collective"
    table = Table(title=title)
    split = SPLIT_COLUMNS if analysis.budget.comm_off_device else ()
    headers = ["rank", "steps", *(h for h, _ in BUDGET_COLUMNS), *(h for h, _ in split)]
    for column in (*headers, "overlap ratio", "gamma", "exposed gamma"):
        table.add_column(column, justify="right")
    for row in analysis.budget.per_rank.iter_rows(named=True):
        table.add_row(
            str(row["rank"]),
            str(row["steps"]),
            *(_ms(row[c]) for _, c in BUDGET_COLUMNS),
            *(_ms(row.get(c)) for _, c in split),
            _ratio(row["overlap_ratio"]),
            _ratio(row["gamma"]),
            _ratio(row["exposed_gamma"]),
        )
    return table
