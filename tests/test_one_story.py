"""One fact, one value, on every surface (docs/metrics.md sections 4 and 5): a property test over every sample
run and every real trace of ../shared/data/real/kineto.

- T_comm never exceeds the step, its split (device / copy engine / host) adds up to it, and the window's
  identity step = busy + host wait + idle holds;
- on the gloo and NCCL traces, T_comm of every (rank, step) equals a plain-Python union of the communication
  intervals read from the raw JSON (NCCL kernels, copies launched inside a collective call or on an NCCL
  kernel's stream, gloo ops on the host; nothing at world size 1), counted once;
- the collectives' rows agree with the budget: clipped to the windows, their union is the budget's T_comm;
- every rank, "last in k of n" and time the rendered text claims about stragglers and slow ranks is the
  JSON's, and a straggler run has at least one such claim checked;
- every matched instance has its flows in the export (one per member after the first to arrive).

Expected values come from the raw JSON or the JSON summary, never from the figure under test.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from traceview.reports.json.summary import summary_document
from traceview.reports.text.stragglers import render_crossrank
from traceview.reports.text.summary import render_summary

from tests.shared_data import REAL_KINETO, real_dirs
from traceview.export.perfetto import export_run
from traceview.reduce.pipeline import analyze_files
from traceview.reduce.results import RunAnalysis

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
RUNS = [p for p in sorted(SAMPLES.iterdir()) if p.is_dir()] + real_dirs(REAL_KINETO)
IDS = [p.name for p in RUNS]
EXACT = 1e-3  # us: timestamps have ns resolution


_ANALYSES: dict[Path, RunAnalysis] = {}


def analysed(run: Path) -> RunAnalysis:
    """The analysis of `run` (its run.json read, as `traceview report RUN` does), once per test session."""
    if run not in _ANALYSES:
        _ANALYSES[run] = analyze_files(run, parallel_min_bytes=1 << 62)
    return _ANALYSES[run]


# ------------------------------------------------------------------------------------------- raw JSON


def raw_events(path: str) -> list[dict[str, Any]]:
    """The complete events of a trace file, read with the standard library."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    events = document["traceEvents"] if isinstance(document, dict) else document
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e]


def world_size(path: str) -> int | None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    info = document.get("distributedInfo", {}) if isinstance(document, dict) else {}
    return info.get("world_size")


DEVICE_COMM = re.compile(r"nccl|rccl", re.IGNORECASE)
HOST_COMM = re.compile(r"^(?:gloo|mpi):")
CALL = re.compile(r"^(?:c10d::|record_param_comms$|nccl:|gloo:|mpi:)")
RUNTIME = {"cuda_runtime", "cuda_driver", "Runtime"}
HOST_CATEGORIES = {"cpu_op", "user_annotation", "Operator"}


def comm_intervals(events: list[dict[str, Any]], world: int | None) -> list[tuple[float, float]]:
    """Every communication interval of a rank, by a second, plain reading of docs/metrics.md section 2: NCCL
    kernels; at world size above 1, copies whose launch lies inside a collective call on its thread or that
    run on an NCCL kernel's stream, and gloo/MPI ops on the host."""
    spans = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") in ("kernel", "Kernel") and DEVICE_COMM.search(e.get("name", ""))
    ]
    if world == 1:
        return spans
    comm_streams = {
        e.get("args", {}).get("stream")
        for e in events
        if e.get("cat") in ("kernel", "Kernel") and DEVICE_COMM.search(e.get("name", ""))
    }
    calls: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.get("cat") in HOST_CATEGORIES and CALL.match(e.get("name", "")):
            calls[(e.get("pid"), e.get("tid"))].append((e["ts"], e["ts"] + e["dur"]))
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in RUNTIME and "correlation" in e.get("args", {})
    }
    for e in events:
        if e.get("cat") in ("gpu_memcpy", "Memcpy"):
            launch = launches.get(e.get("args", {}).get("correlation"))
            inside = launch is not None and any(
                start <= launch["ts"] <= end for start, end in calls[(launch.get("pid"), launch.get("tid"))]
            )
            if inside or e.get("args", {}).get("stream") in comm_streams:
                spans.append((e["ts"], e["ts"] + e["dur"]))
        elif e.get("cat") in HOST_CATEGORIES and HOST_COMM.match(e.get("name", "")):
            spans.append((e["ts"], e["ts"] + e["dur"]))
    return spans


def union_in(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Length of the union of `spans` clipped to [start, end), by a sort and a running end."""
    clipped = sorted((max(s, start), min(e, end)) for s, e in spans if e > start and s < end)
    total, reach = 0.0, start
    for s, e in clipped:
        total += max(0.0, e - max(s, reach))
        reach = max(reach, e)
    return total


# ------------------------------------------------------------------------------------------- invariants


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_the_budget_holds_together(run: Path) -> None:
    rows = summary_document(analysed(run))["time_budget"]["per_step"]
    for row in rows:
        where = f"rank {row['rank']} step {row['step']}"
        assert row["comm_us"] <= row["step_us"] + EXACT, where
        split = row["comm_device_us"] + row["comm_copy_us"] + row["comm_host_us"]
        assert split == pytest.approx(row["comm_us"], abs=EXACT), where
        assert row["busy_us"] + row["host_comm_wait_us"] + row["idle_us"] == pytest.approx(
            row["step_us"], abs=EXACT
        )


def _gloo_or_nccl(analysis: RunAnalysis) -> bool:
    backends = {b.lower() for b in analysis.header.backends}
    return bool(backends & {"gloo", "nccl"})


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_comm_time_is_the_union_of_the_raw_communication_intervals(run: Path) -> None:
    analysis = analysed(run)
    if not _gloo_or_nccl(analysis):
        pytest.skip("neither a gloo nor an NCCL run")
    document = summary_document(analysis)
    shifts = dict(zip(document["run"]["ranks"], document["run"]["base_shifts_us"], strict=True))
    files = dict(zip(document["run"]["ranks"], document["run"]["files"], strict=True))
    windows = defaultdict(list)
    for row in document["time_budget"]["per_step"]:
        windows[row["rank"]].append(row)
    checked = 0
    for rank, rows in windows.items():
        spans = comm_intervals(raw_events(files[rank]), world_size(files[rank]))
        moved = [(s + shifts[rank], e + shifts[rank]) for s, e in spans]
        for row in rows:
            expected = union_in(moved, row["window_start_us"], row["window_end_us"])
            assert row["comm_us"] == pytest.approx(expected, abs=EXACT), f"rank {rank} step {row['step']}"
            checked += 1
    assert checked == len(document["time_budget"]["per_step"])


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_the_collectives_agree_with_the_budget(run: Path) -> None:
    analysis = analysed(run)
    assert analysis.collectives is not None
    kernels = analysis.collectives.kernels
    moving = kernels.filter(kernels["moves_data"]).select("rank", "start_us", "end_us").rows()
    by_rank: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for rank, start, end in moving:
        by_rank[rank].append((start, end))
    for row in analysis.budget.per_step.iter_rows(named=True):
        expected = union_in(by_rank.get(row["rank"], []), row["window_start_us"], row["window_end_us"])
        assert row["comm_us"] == pytest.approx(expected, abs=EXACT), f"rank {row['rank']} step {row['step']}"
    per_rank = {r["rank"]: r["comm_us"] for r in analysis.collectives.per_rank.iter_rows(named=True)}
    for rank, spans in by_rank.items():  # the tables' T_comm is the same union over the whole trace
        assert per_rank[rank] == pytest.approx(union_in(spans, float("-inf"), float("inf")), abs=EXACT)


# ------------------------------------------------------------------------------------------- claims


def rendered(analysis: RunAnalysis) -> str:
    """The terminal summary and the across-ranks tables as plain text, one line per sentence."""
    console = Console(record=True, width=100_000, color_system=None)
    render_summary(analysis, console)
    if analysis.crossrank is not None:
        render_crossrank(analysis.crossrank, console)
    return console.export_text()


CLAIMS = (
    # (pattern, the named groups it claims)
    re.compile(
        r"Rank (?P<rank>\d+) sets the pace: it arrives last in (?P<last>\d+) of its (?P<of>\d+) "
        r"collectives .*?its lateness costs (?P<cost>[\d.]+ m?s|[\d.]+ us) per step"
    ),
    re.compile(
        r"Rank (?P<rank>\d+)'s late arrival costs (?P<cost>[\d.]+ m?s|[\d.]+ us) per step .*? last in "
        r"(?P<last>\d+) of the (?P<of>\d+) collectives it joins .*?median lateness "
        r"(?P<lateness>[\d.]+ m?s|[\d.]+ us)"
    ),
    re.compile(
        r"[Rr]ank (?P<rank>\d+) is a straggler: last in (?P<last>\d+) of its (?P<of>\d+) collectives"
        r"(?: \(its peers wait a median (?P<lead>[\d.]+ ms) for it[^)]*\))?, "
        r"median (?P<lateness>[\d.]+ ms) late, costing (?P<cost>[\d.]+ ms) per step"
    ),
    re.compile(
        r"Rank (?P<rank>\d+) computes (?P<comp>[\d.]+ m?s|[\d.]+ us) per median step, \d+% more than the "
        r"median over ranks[^,;]*, (?:but|and) it is last in (?P<last>\d+) of its (?P<of>\d+) collectives "
        r".*?(?:its peers do not wait for it|too few times to tell that its peers wait for it); "
        r"(?:the peers wait for rank (?P<waited>\d+)|no rank is last beyond chance)"
    ),
)
LAST_IN = re.compile(r"last in \d+ of (?:its|the) \d+")
UNRESOLVED = re.compile(
    r"[Rr]ank (?P<rank>\d+) arrives late \(median (?P<lateness>[\d.]+ ms)\) but the clock alignment is "
    r"uncertain by "
    r"(?P<uncertainty>[\d.]+ ms): not resolvable"
)
MISMATCH = re.compile(
    r"mismatch\(es\), the first in process group (?P<group>.+?), step (?P<step>-?\d+), rank (?P<rank>\d+)"
)
MORE = re.compile(r"and \d+ more (?P<kind>stragglers|ranks not resolvable) \(ranks (?P<ranks>[\d, .]+);")
EXPLAINED = re.compile(
    r"Rank (?P<rank>\d+) computes (?P<excess>[\d.]+ m?s|[\d.]+ us) (?:more|less) per step than "
    r"rank (?P<reference>\d+) "
    r"\(the median of the other ranks, (?P<comp>[\d.]+ m?s|[\d.]+ us)\)"
)
RANK = re.compile(r"\b[Rr]ank (\d+)|\bfor rank (\d+)")


def _us(text: str) -> float:
    value, unit = text.split()
    return float(value) * (1000.0 if unit == "ms" else 1.0)


def _close(said: str, value: float) -> bool:
    """`said` (as printed: 2 or 3 decimals of ms, 1 of us) is `value` (us) rounded."""
    decimals = len(said.split(maxsplit=1)[0].partition(".")[2])
    unit = 1000.0 if said.endswith("ms") else 1.0
    return abs(_us(said) - value) <= 0.5 * unit * 10**-decimals + 1e-9


def _check_claim(claim: dict[str, str], per_rank: dict[int, Any], budget: dict[int, Any], said: str) -> None:
    """One straggler or slow-rank claim against the JSON's per-rank rows."""
    row = per_rank[int(claim["rank"])]
    assert (row["times_last"], row["instances"]) == (int(claim["last"]), int(claim["of"])), said
    if claim.get("cost"):
        assert row["straggler"], said
        assert _close(claim["cost"], row["lateness_cost_us"]), said
    if claim.get("lateness"):
        assert _close(claim["lateness"], row["median_lateness_us"]), said
    if claim.get("lead"):
        assert row["late_by_size"], said
        assert _close(claim["lead"], row["median_lead_us"]), said
    if claim.get("comp"):
        assert not row["straggler"], said
        assert _close(claim["comp"], budget[int(claim["rank"])]["comp_us"]), said
        waited, flagged = claim.get("waited"), [r for r, v in per_rank.items() if v["straggler"]]
        assert (int(waited) in flagged) if waited else not flagged, said


def _check_other(text: str, document: dict[str, Any], per_rank: dict[int, Any]) -> list[tuple[int, int]]:
    """The ranks not resolvable, the first mismatch and the lists of further ranks; their spans in `text`."""
    spans = []
    for found in UNRESOLVED.finditer(text):
        row = per_rank[int(found["rank"])]
        assert row["cause"] == "not resolvable", found[0]
        assert _close(found["lateness"], row["median_lateness_us"]), found[0]
        assert _close(found["uncertainty"], row["clock_uncertainty_us"]), found[0]
        spans.append(found.span())
    for found in MISMATCH.finditer(text):
        first = min(document["across_ranks"]["mismatches"], key=lambda m: (m["step"], m["group"], m["rank"]))
        assert (first["group"], first["step"], first["rank"]) == (
            found["group"],
            int(found["step"]),
            int(found["rank"]),
        )
        spans.append(found.span())
    explained = {row["rank"]: row for row in (document.get("kernels") or {}).get("slow_ranks", [])}
    for found in EXPLAINED.finditer(text):
        row = explained[int(found["rank"])]
        assert row["reference_rank"] == int(found["reference"]), found[0]
        assert _close(found["excess"], abs(row["excess_us"])), found[0]
        assert _close(found["comp"], row["reference_comp_us"]), found[0]
        spans.append(found.span())
    for found in MORE.finditer(text):
        cause = "not resolvable" if found["kind"] == "ranks not resolvable" else None
        for rank in re.findall(r"\d+", found["ranks"]):
            row = per_rank[int(rank)]
            assert row["straggler"] if cause is None else row["cause"] == cause, found[0]
        spans.append(found.span())
    return spans


def checked_claims(text: str, document: dict[str, Any]) -> int:
    """Check every claim of `text` against `document` and that every rank the verdict, the advice and the
    straggler sentence name lies in a checked claim; return how many claims were checked."""
    per_rank = {r["rank"]: r for r in (document["across_ranks"] or {}).get("per_rank", [])}
    budget = {r["rank"]: r for r in document["time_budget"]["per_rank"]}
    spans: list[tuple[int, int]] = []
    for pattern in CLAIMS:
        for found in pattern.finditer(text):
            _check_claim(found.groupdict(), per_rank, budget, found[0])
            spans.append(found.span())
    checked = len(spans)
    assert checked >= len(LAST_IN.findall(text)), "a 'last in k of n' claim no pattern checks"
    spans += _check_other(text, document, per_rank)
    sentences = [
        document["verdict"]["sentence"],
        *(i["sentence"] for i in document["recommendations"]["items"]),
    ]
    sentences += [(document["across_ranks"] or {}).get("sentence", "")]
    for sentence in sentences:  # each as rendered: its rank mentions lie in checked claims
        start = text.find(sentence)
        assert start >= 0, sentence[:80]
        for mention in RANK.finditer(sentence):
            at = start + mention.start()
            assert any(a <= at < b for a, b in spans), (
                f"unchecked rank claim: {sentence[mention.start() :][:80]}"
            )
    return checked


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_every_claim_of_the_text_is_the_json(run: Path) -> None:
    analysis = analysed(run)
    document = summary_document(analysis)
    checked = checked_claims(rendered(analysis), document)
    stragglers = (document["across_ranks"] or {}).get("stragglers", [])
    if stragglers:
        assert checked >= 1, "a straggler run without a checked claim"


# ------------------------------------------------------------------------------------------- export


def _flows(path: Path) -> Iterator[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for event in json.load(handle)["traceEvents"]:
            if event.get("ph") == "s":
                yield event["name"]


def _kinds(path: Path) -> dict[str, int]:
    """How many exported events say they are communication of each kind."""
    counted: dict[str, int] = defaultdict(int)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for event in json.load(handle)["traceEvents"]:
            kind = event.get("args", {}).get("comm_kind") if event.get("ph") == "X" else None
            if kind:
                counted[kind] += 1
    return dict(counted)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_every_matched_instance_has_its_flows_in_the_export(run: Path, tmp_path: Path) -> None:
    analysis = analysed(run)
    if analysis.crossrank is None or analysis.crossrank.usable_instances == 0:
        pytest.skip("no instance matched on two ranks")
    usable = analysis.crossrank.instances.filter(analysis.crossrank.instances["skew_us"].is_not_null())
    out = tmp_path / "run.perfetto.json.gz"
    export_run(analysis, out)
    per_instance: dict[int, int] = defaultdict(int)
    for name in _flows(out):
        per_instance[int(name.rsplit(" ", 1)[1])] += 1
    for row in usable.iter_rows(named=True):
        assert per_instance[row["instance"]] == row["members"] - 1, f"instance {row['instance']}"
    assert analysis.collectives is not None  # every communication row is exported with where it ran
    rows = analysis.collectives.kernels.filter(analysis.collectives.kernels["moves_data"])
    assert _kinds(out) == dict(rows.group_by("comm_kind").len().rows())
