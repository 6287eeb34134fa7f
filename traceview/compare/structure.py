"""What differs in shape between two runs: ranks, process groups, collectives and kernel classes that
appeared or disappeared, NCCL's algorithm/protocol mix, and whether a run was read only in part
(docs/metrics.md, "Compare and trend").

A partial run does not fail a comparison through the findings its gap can explain (`PARTIAL_RULES`): files
skipped when parsing and ranks of the world not read (every family that pools ranks, `RANK_COVERAGE`: the
per-rank findings of the ranks read stand; ranks neither run read, the same ranks read in both, mark none),
collective kernels not linked to a call (the `collective` and `collective_calls` families: their bytes and
size bucket are unknown), collective instances not matched across ranks (the `crossrank` family); and,
between the two runs, ranks of one job that only one run read (`RANK_COVERAGE`: every figure that pools
ranks or depends on the ranks absent).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any

import polars as pl

from traceview.compare.prediction_method import method_change
from traceview.compare.samples import CAUSE_FAMILIES, Samples
from traceview.core.ranks import absent_ranks, rank_ranges
from traceview.core.records import record

ALL_FAMILIES = ("*",)
MIX_CHANGE = 0.10
"""An algorithm/protocol's share of its collective's kernels must move by more than this to be listed."""


RANK_COVERAGE = ("step", "budget", "crossrank", "idle", "collective", "collective_calls", "kernel_class")
"""The families a difference in the ranks read makes unreliable: all but the per-rank `rank` family."""


def _skipped(document: Mapping[str, Any]) -> str | None:
    skipped = (document.get("run") or {}).get("skipped") or []
    return f"{len(skipped)} file(s) skipped when parsing" if skipped else None


def _ranks_lacking(document: Mapping[str, Any]) -> str | None:
    """`rank(s) 2-7 not read` when the run read fewer ranks than its world size."""
    run = document.get("run") or {}
    absent = absent_ranks(_ranks(document), run.get("world_size"))
    return f"rank(s) {rank_ranges(absent)} not read" if absent else None


def _unlinked(document: Mapping[str, Any]) -> str | None:
    share = (document.get("collectives") or {}).get("linked_share")
    return (
        None
        if share is None or share >= 1.0
        else f"{1 - share:.0%} of collective kernels not linked to a call"
    )


def _unmatched(document: Mapping[str, Any]) -> str | None:
    mismatches = (document.get("across_ranks") or {}).get("mismatches") or []
    return f"{len(mismatches)} collective instance(s) not matched across ranks" if mismatches else None


PARTIAL_RULES: tuple[
    tuple[Callable[[Mapping[str, Any]], str | None], tuple[str, ...], tuple[str, ...]], ...
] = (
    (_skipped, RANK_COVERAGE, RANK_COVERAGE),
    (_ranks_lacking, RANK_COVERAGE, ()),
    (_unlinked, ("collective", "collective_calls"), ("collective", "collective_calls")),
    (_unmatched, ("crossrank",), ("crossrank",)),
)
"""(detector of a partial reading, the families of findings it makes unreliable, those it makes unreliable
when both runs read the same ranks of one world size). Ranks that neither run read leave the same ranks
pooled on both sides: the paired figures of the ranks read compare like with like (a sampled job profiled on
ranks 0 and 1 every night), so the gap is said but marks no family."""


def _ranks(document: Mapping[str, Any]) -> set[int]:
    return {int(rank) for rank in (document.get("run") or {}).get("ranks") or ()}


def _same_ranks_read(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> bool:
    """Whether both runs read the same ranks (some) of one known world size."""
    sizes = {(doc.get("run") or {}).get("world_size") for doc in (baseline, candidate)}
    read = _ranks(baseline)
    return len(sizes) == 1 and None not in sizes and bool(read) and read == _ranks(candidate)


def rank_coverage(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> str | None:
    """`ranks read differ at world size N: ...` when both runs have one world size and each read ranks the
    other did not (a rank missing from one side, not a new job size)."""
    sizes = {(doc.get("run") or {}).get("world_size") for doc in (baseline, candidate)}
    base, cand = _ranks(baseline), _ranks(candidate)
    if len(sizes) != 1 or None in sizes or not base or not cand or base == cand:
        return None
    return (
        f"ranks read differ at world size {sizes.pop()}: baseline {len(base)}, candidate {len(cand)}, "
        f"{len(base & cand)} in both"
    )


@record
class Structure:
    """Shape differences and partial readings of a comparison."""

    baseline_world_size: int | None
    candidate_world_size: int | None
    appeared: list[str]
    disappeared: list[str]
    algorithm_mix: pl.DataFrame
    partial_notes: list[str]
    partial_families: frozenset[str]
    setup_changes: list[str] = field(default_factory=list)  # devices, NCCL or PyTorch versions that differ
    algorithm_mix_note: str | None = None  # why the algorithm mix was not paired (a summary too old)
    baseline_stragglers: list[int] = field(default_factory=list)  # `across_ranks.stragglers` of each run
    candidate_stragglers: list[int] = field(default_factory=list)

    @property
    def world_size_changed(self) -> bool:
        """Whether both world sizes are known and differ (the comparison becomes a scaling analysis)."""
        sizes = (self.baseline_world_size, self.candidate_world_size)
        return None not in sizes and sizes[0] != sizes[1]

    @property
    def partial(self) -> bool:
        """Whether either run was read only in part."""
        return bool(self.partial_notes)

    def is_partial(self, family: str) -> bool:
        """Whether findings of `family` are unreliable because a run was read only in part."""
        return ALL_FAMILIES[0] in self.partial_families or family in self.partial_families


def _world_size(document: Mapping[str, Any]) -> int | None:
    run = document.get("run") or {}
    size = run.get("world_size")
    return int(size) if size else (len(run["ranks"]) if run.get("ranks") else None)


def _subjects(
    samples: Mapping[tuple[str, str, str], Samples], families: set[str], document: Mapping[str, Any]
) -> set[str]:
    """The cause subjects of `families`, and the ranks the run read."""
    return {subject for family, _, subject in samples if family in families} | {
        f"rank {rank}" for rank in _ranks(document)
    }


def _listed(subjects: set[str]) -> list[str]:
    """`subjects` sorted, the ranks among them last and joined into runs: `rank 3`, `ranks 8-63`."""
    ranks = sorted(int(s.split(" ", 1)[1]) for s in subjects if s.startswith("rank "))
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    joined = [f"rank {run[0]}" if len(run) == 1 else f"ranks {run[0]}-{run[-1]}" for run in runs]
    return sorted(s for s in subjects if not s.startswith("rank ")) + joined


def _families(samples: Mapping[tuple[str, str, str], Samples]) -> set[str]:
    return {family for family, _, _ in samples if family in CAUSE_FAMILIES}


MIX_SOURCES: tuple[tuple[str, str, dict[str, str]], ...] = (
    (
        "nccl",
        "algorithms",
        {"op": "collective", "algo": "algorithm", "proto": "protocol", "choices": "kernels"},
    ),
    ("distributions", "algorithms", {}),
)
"""Where NCCL's algorithm/protocol choices are read, first found in both runs first: the NCCL logs' TUNING
lines (`nccl.algorithms`, counts of choices), else the kernel names (`distributions.algorithms`)."""


def _mix_rows(document: Mapping[str, Any], source: tuple[str, str, dict[str, str]]) -> list[dict[str, Any]]:
    key, table, renames = source
    rows = (document.get(key) or {}).get(table) or []
    return [{renames.get(name, name): value for name, value in row.items()} for row in rows]


def _mix(rows: list[dict[str, Any]], name: str) -> pl.DataFrame:
    schema = {"collective": pl.Utf8, "algorithm": pl.Utf8, "protocol": pl.Utf8, "kernels": pl.Int64}
    frame = pl.DataFrame([{c: row.get(c) for c in schema} for row in rows], schema=schema)
    frame = (
        frame.with_columns(pl.col("algorithm", "protocol", "collective").fill_null("unknown"))
        .group_by("collective", "algorithm", "protocol")
        .agg(pl.col("kernels").sum())
    )
    share = pl.col("kernels") / pl.col("kernels").sum().over("collective")
    return frame.select("collective", "algorithm", "protocol", share.alias(name))


ALGORITHM_SOURCE_SINCE = (1, 11)
"""The first summary schema whose kernel-name algorithm mix holds only evidence (`algorithm_source`): before
it a NCCL >= 2.19 kernel's specialisation (`RING_LL`) was written as its algorithm and protocol."""


def _schema(document: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of a summary's `schema_version`, None when unreadable."""
    parts = str(document.get("schema_version") or "").split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) == 2 and all(p.isdigit() for p in parts) else None


def algorithm_mix_note(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> str | None:
    """Why the algorithm mix of the kernel names is not paired: a summary older than
    `ALGORITHM_SOURCE_SINCE` (its mix may be specialisations, not choices); None when it is paired or read
    from both runs' NCCL logs."""
    source = _mix_source(baseline, candidate)
    if source is not MIX_SOURCES[-1] or not (_mix_rows(baseline, source) and _mix_rows(candidate, source)):
        return None
    old = [
        f"{side} (schema {doc.get('schema_version')})"
        for side, doc in (("baseline", baseline), ("candidate", candidate))
        if (_schema(doc) or (0, 0)) < ALGORITHM_SOURCE_SINCE
    ]
    if not old:
        return None
    since = ".".join(str(part) for part in ALGORITHM_SOURCE_SINCE)
    return (
        f"NCCL algorithm mix not compared: {' and '.join(old)} predates schema {since}, whose kernel names "
        "give the algorithm only where it is evidence (before it a NCCL >= 2.19 kernel's specialisation was "
        "counted as its algorithm)"
    )


def _mix_source(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> tuple[str, str, dict[str, str]]:
    return next(
        (src for src in MIX_SOURCES if _mix_rows(baseline, src) and _mix_rows(candidate, src)),
        MIX_SOURCES[-1],
    )


def algorithm_mix(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> pl.DataFrame:
    """Per (collective, algorithm, protocol) its share of the collective's kernels in each run, the rows
    whose share moved by more than `MIX_CHANGE` (collectives both runs made); no rows when
    `algorithm_mix_note` says the mixes cannot be paired."""
    keys = ["collective", "algorithm", "protocol"]
    source = _mix_source(baseline, candidate)
    base_rows, cand_rows = _mix_rows(baseline, source), _mix_rows(candidate, source)
    if algorithm_mix_note(baseline, candidate) is not None:
        base_rows, cand_rows = [], []
    joined = _mix(base_rows, "baseline_share").join(
        _mix(cand_rows, "candidate_share"), on=keys, how="full", coalesce=True
    )
    both = {r.get("collective") for r in base_rows} & {r.get("collective") for r in cand_rows}
    return (
        joined.with_columns(pl.col("baseline_share", "candidate_share").fill_null(0.0))
        .filter(pl.col("collective").is_in(sorted(str(c) for c in both if c is not None)))
        .filter((pl.col("candidate_share") - pl.col("baseline_share")).abs() > MIX_CHANGE)
        .sort(keys)
    )


SETUP_FIELDS: tuple[tuple[str, str], ...] = (
    ("devices", "devices"),
    ("nccl_versions", "NCCL"),
    ("pytorch_versions", "PyTorch"),
)
"""Run-header fields whose change is listed: (key of `run`, label)."""


def setup_changes(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[str]:
    """`devices: A -> B` for each header field of `SETUP_FIELDS` whose values differ."""
    runs = [(doc.get("run") or {}) for doc in (baseline, candidate)]
    found = []
    for key, label in SETUP_FIELDS:
        before, after = (", ".join(str(v) for v in run.get(key) or ()) or "unknown" for run in runs)
        if before != after:
            found.append(f"{label}: {before} -> {after}")
    return found


def stragglers(document: Mapping[str, Any]) -> list[int]:
    """The ranks the across-ranks analysis named stragglers."""
    return sorted(int(rank) for rank in (document.get("across_ranks") or {}).get("stragglers") or ())


def _method(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[str]:
    found = method_change(baseline, candidate)
    return [found] if found else []


def structure_changes(
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    base_samples: Mapping[tuple[str, str, str], Samples],
    cand_samples: Mapping[tuple[str, str, str], Samples],
) -> Structure:
    """The shape differences of two summary documents and their partial readings. Subjects appear or
    disappear only within the families both summaries carry (an older summary has no `distributions`)."""
    shared = _families(base_samples) & _families(cand_samples)
    base_subjects = _subjects(base_samples, shared, baseline)
    cand_subjects = _subjects(cand_samples, shared, candidate)
    notes: list[str] = []
    families: set[str] = set()
    same_ranks = _same_ranks_read(baseline, candidate)
    for side, document in (("baseline", baseline), ("candidate", candidate)):
        for detect, unreliable, unreliable_on_same_ranks in PARTIAL_RULES:
            found = detect(document)
            if found:
                notes.append(f"{side}: {found}")
                families.update(unreliable_on_same_ranks if same_ranks else unreliable)
    coverage = rank_coverage(baseline, candidate)
    if coverage:
        notes.append(coverage)
        families.update(RANK_COVERAGE)
    return Structure(
        baseline_world_size=_world_size(baseline),
        candidate_world_size=_world_size(candidate),
        appeared=_listed(cand_subjects - base_subjects),
        disappeared=_listed(base_subjects - cand_subjects),
        algorithm_mix=algorithm_mix(baseline, candidate),
        algorithm_mix_note=algorithm_mix_note(baseline, candidate),
        partial_notes=notes,
        partial_families=frozenset(families),
        setup_changes=[*setup_changes(baseline, candidate), *_method(baseline, candidate)],
        baseline_stragglers=stragglers(baseline),
        candidate_stragglers=stragglers(candidate),
    )
