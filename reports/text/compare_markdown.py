"""`traceview compare --markdown`: a summary short enough for a CI comment (verdict, top findings, partial
readings, scaling). Renders only; every string from an input goes through `markdown_text` (printable,
Markdown and HTML escaped, no link of its own); the only links are none: the comment links nowhere."""

from __future__ import annotations

from collections.abc import Sequence

from traceview.reports.text.compare import finding_change, note_text, p_text, value_text

from traceview.compare.findings import Finding
from traceview.compare.two_runs import Comparison
from traceview.core.sanitize import markdown_text

TOP = 5


def _cell(text: object) -> str:
    return markdown_text(text)


def _rows(findings: Sequence[Finding]) -> list[str]:
    lines = [
        "| subject | metric | baseline | candidate | change | p (Holm) | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in findings[:TOP]:
        lines.append(
            f"| {_cell(f.subject)} | {f.metric} | {value_text(f.metric, f.baseline)} | "
            f"{value_text(f.metric, f.candidate)} | {finding_change(f)} | {p_text(f.p_adjusted)} | "
            f"{_cell(note_text(f))} |"
        )
    if len(findings) > TOP:
        lines.append(f"\n{len(findings) - TOP} more: see the HTML report or `--json`.")
    return lines


def render_markdown(comparison: Comparison) -> str:
    """The CI comment as Markdown text."""
    failing = bool(comparison.failing)
    lines = [
        f"### traceview compare: {'regression' if failing else 'no significant regression'}",
        "",
        f"**{_cell(comparison.verdict)}**",
        "",
    ]
    for title, findings in (
        ("Regressions", comparison.regressions),
        ("Improvements", comparison.improvements),
    ):
        if findings:
            lines += [f"#### {title}", "", *_rows(findings), ""]
    structure = comparison.structure
    if structure.appeared or structure.disappeared:
        lines.append(
            f"Appeared: {_cell(', '.join(structure.appeared) or '-')}; "
            f"disappeared: {_cell(', '.join(structure.disappeared) or '-')}"
        )
    if structure.baseline_stragglers != structure.candidate_stragglers:
        lines.append(
            f"- stragglers: {structure.baseline_stragglers or 'none'} -> "
            f"{structure.candidate_stragglers or 'none'}"
        )
    lines += [f"- setup changed: {_cell(change)}" for change in structure.setup_changes]
    lines += [f"- partial: {_cell(note)}" for note in structure.partial_notes]
    if comparison.scaling is not None:
        lines.append(f"- {_cell(comparison.scaling.sentence)}")
        factors = [
            f"{row['factor']} {row['efficiency_points'] * 100:+.1f}"
            for row in comparison.scaling.factors.iter_rows(named=True)
            if abs(row["efficiency_points"]) >= 0.0005
        ]
        lines.append(f"- efficiency points lost by factor: {'; '.join(factors) or 'none'}")
    return "\n".join(lines).rstrip() + "\n"
