"""Terminal rendering of `traceview compare` and `traceview trend` (rich). Renders only: every figure comes
from `traceview.compare.two_runs`, `traceview.compare.scaling` and `traceview.compare.trend`."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from traceview.reports.text.fit import print_table
from traceview.reports.text.safe import safe

from traceview.compare.findings import Finding
from traceview.compare.scaling import Scaling
from traceview.compare.trend import Trend
from traceview.compare.two_runs import Comparison

MAX_ROWS = 15
TEXT_COLUMNS = ("subject", "note", "metric", "run", "file", "first run after", "collective", "factor")
"""Columns of names and sentences: they wrap within the room the figures leave (`reports/text/fit.py`)."""
DROP_FIRST = ("n", "p (Holm)", "p", "history runs", "from", "file", "recorded at (UTC)", "share", "baseline")
"""The columns hidden first on a narrow terminal, in this order (then from the right): the subject, the
metric, the candidate's value, the change, the outcome and the note stay longest."""


def _print(console: Console, table: Table) -> None:
    print_table(console, table, DROP_FIRST, TEXT_COLUMNS)


def value_text(metric: str, value: float | None) -> str:
    """A figure with its unit: times (`_us`) in ms, bandwidths (`_Bps`) in GB/s, shares in percent."""
    if value is None:
        return "-"
    if metric.endswith("_us") or metric == "step_us_p90":
        return f"{value / 1000:.3f} ms"
    if metric.endswith("_Bps"):
        return f"{value / 1e9:.2f} GB/s"
    if metric.endswith("_share"):
        return f"{value:.1%}"
    return f"{value:.3g}"


def change_text(change_pct: float | None) -> str:
    """A relative change in percent with its sign, or `-`."""
    return "-" if change_pct is None else f"{change_pct:+.1f}%"


def p_text(p_value: float | None) -> str:
    """A p-value in two significant digits, or `-`."""
    return "-" if p_value is None else f"{p_value:.2g}"


def note_text(finding: Finding) -> str:
    """What a finding's row says beside its figures: partial, beyond its peers, explained, its
    likely cause."""
    parts = ["partial run"] if finding.partial else []
    if finding.beyond_peers_pct is not None:
        parts.append(f"beyond its peers {change_text(finding.beyond_peers_pct)}")
    if finding.explained_by:
        parts.append(f"explained by {finding.explained_by}")
    if finding.likely_cause:
        parts.append(f"likely cause: {finding.likely_cause}")
    return "; ".join(parts)


def _note(finding: Finding) -> str:
    return safe(note_text(finding))


def finding_change(finding: Finding) -> str:
    """The change as a percentage where the baseline has a value to divide by; else the absolute change
    (`new +12.770 ms`: a new straggler's cost, a problem the baseline did not have)."""
    return judged_change(finding.metric, finding.change_pct, finding.baseline, finding.candidate)


def judged_change(metric: str, change_pct: float | None, before: float | None, after: float | None) -> str:
    """The change in percent where there is a baseline to divide by; else the absolute change, `new` (a
    new straggler's cost per step over none); `-` when a side is unknown."""
    if change_pct is not None:
        return change_text(change_pct)
    if before is None or after is None:
        return "-"
    if after == before:
        return "no change"
    delta = value_text(metric, after - before)
    return f"new {'' if delta.startswith('-') else '+'}{delta}"


def _findings_table(title: str, findings: Sequence[Finding]) -> Table:
    table = Table(title=title, title_justify="left")
    for header in ("subject", "metric", "baseline", "candidate", "change", "p (Holm)", "n", "note"):
        table.add_column(header)
    for f in findings[:MAX_ROWS]:
        table.add_row(
            safe(f.subject),
            f.metric,
            value_text(f.metric, f.baseline),
            value_text(f.metric, f.candidate),
            finding_change(f),
            p_text(f.p_adjusted),
            f"{f.test.baseline_n}/{f.test.candidate_n}",
            _note(f),
        )
    if len(findings) > MAX_ROWS:
        table.caption = f"{len(findings) - MAX_ROWS} more (--json lists all)"
    return table


def _budgets(comparison: Comparison) -> Table:
    table = Table(title="Time budget (run medians)", title_justify="left")
    for header in ("figure", "baseline", "share", "candidate", "share"):
        table.add_column(header)
    for row in comparison.budgets.iter_rows(named=True):
        table.add_row(
            row["figure"],
            value_text("_us", row["baseline_us"]),
            value_text("_share", row["baseline_share"]),
            value_text("_us", row["candidate_us"]),
            value_text("_share", row["candidate_share"]),
        )
    return table


def _scaling(comparison: Comparison, console: Console) -> None:
    scaling = comparison.scaling
    if scaling is None:
        return
    console.print(f"[bold]{escape(scaling.sentence)}[/bold]")
    table = Table(title="Where the efficiency went (per median step)", title_justify="left")
    for header in ("factor", "change", "efficiency points"):
        table.add_column(header)
    for row in scaling.factors.iter_rows(named=True):
        table.add_row(row["factor"], f"{row['delta_us'] / 1000:+.3f} ms", f"{row['efficiency_points']:+.1%}")
    _print(console, table)
    if scaling.busbw.height == 0:
        console.print(
            "Bus bandwidth per collective and group: unknown in both runs (no group sizes or bytes)"
        )
    else:
        _print(console, _busbw_table(scaling))
    if scaling.new_stragglers:
        console.print(f"New stragglers: {', '.join(f'rank {r}' for r in scaling.new_stragglers)}")
    for note in scaling.notes:
        console.print(f"note: {escape(note)}")


def _busbw_table(scaling: Scaling) -> Table:
    bandwidth = Table(title="Bus bandwidth per collective and group", title_justify="left")
    for header in ("collective", "group", "baseline", "candidate", "ratio"):
        bandwidth.add_column(header)
    for row in scaling.busbw.iter_rows(named=True):
        bandwidth.add_row(
            safe(row["collective"]),
            safe(row["pg_key"]),
            value_text("_Bps", row["baseline_busbw_Bps"]),
            value_text("_Bps", row["candidate_busbw_Bps"]),
            "-" if row["ratio"] is None else f"{row['ratio']:.2f}",
        )
    return bandwidth


def _structure(comparison: Comparison, console: Console) -> None:
    structure = comparison.structure
    for label, subjects in (("appeared", structure.appeared), ("disappeared", structure.disappeared)):
        if subjects:
            console.print(f"{label}: {safe(', '.join(subjects))}")
    for row in structure.algorithm_mix.iter_rows(named=True):
        console.print(
            safe(
                f"NCCL mix: {row['collective']} {row['algorithm']}/{row['protocol']} "
                f"{row['baseline_share']:.0%} -> {row['candidate_share']:.0%} of kernels"
            )
        )
    if structure.algorithm_mix_note:
        console.print(safe(structure.algorithm_mix_note))
    if structure.baseline_stragglers != structure.candidate_stragglers:
        console.print(
            f"stragglers: {structure.baseline_stragglers or 'none'} -> "
            f"{structure.candidate_stragglers or 'none'}"
        )
    for change in structure.setup_changes:
        console.print(f"setup changed: {safe(change)}")
    for note in structure.partial_notes:
        console.print(f"[yellow]partial: {safe(note)}[/yellow]")


def render_comparison(comparison: Comparison, console: Console) -> None:
    """The verdict first, then regressions, improvements, structure changes, budgets and scaling."""
    console.print(f"[bold]{safe(comparison.verdict)}[/bold]")
    console.print(safe(f"baseline {comparison.baseline_source}  candidate {comparison.candidate_source}"))
    for title, findings in (
        ("Regressions", comparison.regressions),
        ("Improvements", comparison.improvements),
    ):
        if findings:
            _print(console, _findings_table(title, findings))
    noise = comparison.not_significant
    if noise:
        _print(console, _findings_table("Beyond the threshold but within the runs' spread", noise))
    if comparison.explained:
        _print(console, _findings_table("Explained by the ranks that moved", comparison.explained))
    _structure(comparison, console)
    _print(console, _budgets(comparison))
    _scaling(comparison, console)


def render_trend(found: Trend, console: Console) -> None:
    """The verdict, the change points and the latest run's judgement."""
    console.print(f"[bold]{safe(found.verdict)}[/bold]")
    console.print(f"{len(found.runs)} runs, ordered by {found.ordered_by}")
    runs = Table(title="Runs", title_justify="left")
    for header in ("#", "run", "recorded at (UTC)", "from", "file"):
        runs.add_column(header)
    for index, run in enumerate(found.runs):
        runs.add_row(str(index), safe(run.shown), run.date or "-", run.time_source or "-", safe(run.name))
    _print(console, runs)
    changes = Table(title="Change points", title_justify="left")
    for header in ("metric", "first run after", "before", "after", "change", "p"):
        changes.add_column(header)
    for c in found.changes:
        changes.add_row(
            c.metric,
            safe(c.label or c.run),
            value_text(c.metric, c.before),
            value_text(c.metric, c.after),
            change_text(c.change_pct),
            p_text(c.p_value),
        )
    _print(console, changes)
    latest = Table(title="Latest run against the history", title_justify="left")
    for header in ("metric", "outcome", "change", "latest", "history", "history runs", "p (Holm)"):
        latest.add_column(header)
    for j in found.latest:
        latest.add_row(
            safe(j.metric),
            j.outcome,
            judged_change(j.metric, j.change_pct, j.history, j.latest),
            value_text(j.metric, j.latest),
            value_text(j.metric, j.history),
            str(j.history_runs),
            p_text(j.p_adjusted),
        )
    _print(console, latest)
