"""traceview side by side with two peers, HolisticTraceAnalysis (HTA) and AMD's TraceLens: CPU seconds of the
whole process tree and its peak RSS for each tool on three runs, and each peer's cost over traceview's,
paired per round.

    python benchmarks/peers.py --hta-python ../peers/hta/bin/python \\
        --tracelens-python ../peers/tracelens/bin/python --dlrm ../peers/dlrm_kineto
    python benchmarks/peers.py --hta-python ../peers/hta/bin/python --runs B --pairs 1 \\
        --dlrm ../peers/dlrm_kineto
    python benchmarks/peers.py --tracelens-python ../peers/tracelens/bin/python --before HEAD~1 --runs A

The runs:

- A: the one 54 MB rank of `hta_df_index_resolver` (shared/data/real/kineto);
- B: 8 real DLRM ranks of about 60 KB each, the folder given as `--dlrm`: the eight
  `worker<r>_step_12.*.pt.trace.json` of `et_replay/tests/inputs/dlrm_kineto.tar.gz` in
  facebookresearch/param, each gzipped (`gzip -9 -n`);
- C: 32 copies of the 1.76 MB rank `hta_sampled_2rank/sampled_rank-0.json.gz`, each with its own rank and
  timestamps (`rank_cost.replicate`), built into a temporary folder and written with the profiler's spacing
  (HTA reads a rank only from `"rank": N` with the space).

The tools, each a fresh process whose stdout is discarded:

- traceview: `python -P -m traceview summary FOLDER --json --quiet`, the working tree assembled as installed
  (`paired_revisions.assemble`: the package folders where `pyproject.toml` puts them, compiled) and put first
  on `PYTHONPATH`; with `--before REV`, that revision assembled the same way is a second column;
- HTA: `TraceAnalysis(trace_dir=...)` + `get_comm_comp_overlap()` + `get_temporal_breakdown()`
  (`parse_bench.HTA_SCRIPT`) on a folder of links to the run's traces, under `--hta-python`;
- TraceLens collective report: `python -m TraceLens.Reporting.generate_multi_rank_collective_report_pytorch
  --trace_pattern DIR/rank*_trace.json.gz --world_size N --output_xlsx_path OUT`, the traces linked as
  `rank<i>_trace.json.gz` in the order of their own `distributedInfo.rank`, under `--tracelens-python`;
- TraceLens perf + collective: `python -m TraceLens.Reporting.generate_perf_report_pytorch --profile_json_path
  TRACE --output_xlsx_path OUT` on each trace in turn, then the collective report, all under one `/bin/sh`.

The peers run from their own virtual environments (any `PYTHONPATH` removed), their modules compiled to
bytecode when installed; each writes its workbooks into the temporary folder, the inputs are never written.
A peer whose flag is missing is left out.

Each figure is of the whole process tree: CPU seconds are the user + system time of the command and of every
process it reaped (`os.wait4`: HTA's pool, traceview's workers, TraceLens's per-trace reports), the peak RSS
the larger of the tree's resident sets summed every 50 ms from /proc (`rank_cost._sampled`, psutil) and the
largest single process's `ru_maxrss`. Each round runs every tool once, the order rotated by one tool between
rounds, so a drift of the machine touches every tool. Printed: per run and tool the median and range of the
CPU seconds and of the peak MiB, and for each other tool its ratio over traceview (of the working tree) taken
in the same round, median and range. traceview may exit 0 or 4 (one rank of a larger job is partial); a peer
that exits non-zero is shown as "fails" with the last line it wrote on stderr, and is not run again on that
run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import msgspec
from paired_revisions import archived, assemble, check_imported_from
from parse_bench import HTA_SCRIPT
from rank_cost import _sampled, replicate

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared/data/real/kineto"
RUN_A = REAL / "hta_df_index_resolver"
RUN_C_RANK = REAL / "hta_sampled_2rank/sampled_rank-0.json.gz"
RUN_C_RANKS = 32
TRACEVIEW, BEFORE, HTA = "traceview", "traceview before", "HTA"
TL_COLLECTIVE, TL_BOTH = "TraceLens collective report", "TraceLens perf + collective"
TL_REPORTS = "TraceLens.Reporting"
TRACEVIEW_OK = frozenset({0, 4})  # 4: partial, e.g. one rank of a two-rank job
PEER_OK = frozenset({0})


@dataclass(frozen=True)
class Run:
    """One input: the folder traceview reads, its rank files in their own rank order, their text bytes."""

    name: str
    folder: Path
    traces: list[Path]
    text_bytes: int


@dataclass(frozen=True)
class Tool:
    """One column: the command line, its environment and the exit codes that count as success."""

    label: str
    command: list[str]
    environment: dict[str, str]
    accepted: frozenset[int]


@dataclass(frozen=True)
class Outcome:
    """One measured process tree: CPU seconds, peak MiB, and the failure's one line (None on success)."""

    cpu_s: float
    peak_mib: float
    error: str | None = None


class _Head(msgspec.Struct):
    distributedInfo: dict[str, object] | None = None  # noqa: N815 (the trace's key)


def _head(trace: Path) -> tuple[int | None, int]:
    """The trace's own rank (None when it names none) and the bytes of its JSON text."""
    raw = trace.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    info = msgspec.json.decode(text, type=_Head).distributedInfo or {}
    rank = info.get("rank")
    return (rank if isinstance(rank, int) else None), len(text)


def _traces(name: str, folder: Path) -> Run:
    """The run of the trace files in `folder` (`.json`, `.json.gz`, not `run.json`), in their rank order
    (the files' order where their ranks are missing or repeated)."""
    files = sorted(
        p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != "run.json"
    )
    if not files:
        raise SystemExit(f"run {name}: no trace in {folder}")
    heads = [_head(f) for f in files]
    ranks = [rank for rank, _ in heads]
    if None not in ranks and len(set(ranks)) == len(ranks):
        files = [f for _, f in sorted(zip(ranks, files, strict=True))]
    return Run(name, folder, files, sum(size for _, size in heads))


def prepare(name: str, scratch: Path, dlrm: Path | None) -> Run:
    """The files of run A, B or C (module docstring); C's copies are written under `scratch`."""
    if name == "A":
        return _traces(name, RUN_A)
    if name == "B":
        if dlrm is None or not dlrm.is_dir():
            raise SystemExit("run B needs --dlrm FOLDER: the 8 DLRM ranks (module docstring)")
        return _traces(name, dlrm)
    folder = scratch / "c_ranks"
    folder.mkdir()
    replicate(RUN_C_RANK, RUN_C_RANKS, folder)
    for copy in folder.iterdir():
        _spaced(copy)
    return _traces(name, folder)


def _spaced(copy: Path) -> None:
    """`copy` (a gzip'd JSON trace written compactly) written again with a space after each colon and comma,
    as the profiler writes it: HTA finds a trace's rank by `"rank":` followed by whitespace, and without it
    reads every copy as rank 0 (one rank loaded)."""
    document = json.loads(gzip.decompress(copy.read_bytes()))
    copy.write_bytes(gzip.compress(json.dumps(document).encode(), 1))


def _linked(run: Run, into: Path, names: list[str]) -> Path:
    """`into`, holding a link named `names[i]` to each of the run's traces."""
    into.mkdir(parents=True)
    for trace, name in zip(run.traces, names, strict=True):
        (into / name).symlink_to(trace.resolve())
    return into


def _suffix(trace: Path) -> str:
    return ".json.gz" if trace.name.endswith(".json.gz") else ".json"


def tracelens_tools(python: str, run: Run, scratch: Path, environment: dict[str, str]) -> list[Tool]:
    """The collective report alone, and each trace's perf report followed by the collective report."""
    suffix = _suffix(run.traces[0])
    names = [f"rank{i}_trace{suffix}" for i in range(len(run.traces))]
    folder = _linked(run, scratch / "tracelens_in", names)
    out = scratch / "tracelens_out"
    out.mkdir()
    collective = [
        *(python, "-P", "-m", f"{TL_REPORTS}.generate_multi_rank_collective_report_pytorch"),
        *("--trace_pattern", str(folder / f"rank*_trace{suffix}"), "--world_size", str(len(names))),
        *("--output_xlsx_path", str(out / "collective.xlsx")),
    ]
    perf = [
        [
            *(python, "-P", "-m", f"{TL_REPORTS}.generate_perf_report_pytorch"),
            *("--profile_json_path", str(folder / name), "--output_xlsx_path", str(out / f"perf_{i}.xlsx")),
        ]
        for i, name in enumerate(names)
    ]
    script = " && ".join(shlex.join(command) for command in [*perf, collective])
    return [
        Tool(TL_COLLECTIVE, collective, environment, PEER_OK),
        Tool(TL_BOTH, ["/bin/sh", "-c", script], environment, PEER_OK),
    ]


def tools_for(run: Run, scratch: Path, options: argparse.Namespace, copies: dict[str, Path]) -> list[Tool]:
    """Every column for `run`: traceview (and its `--before`), then the peers whose interpreter was given."""

    def traceview(label: str, packages: Path) -> Tool:
        command = [sys.executable, "-P", "-m", "traceview", "summary", str(run.folder), "--json", "--quiet"]
        return Tool(label, command, {**os.environ, "PYTHONPATH": str(packages)}, TRACEVIEW_OK)

    tools = [traceview(label, packages) for label, packages in copies.items()]
    peers = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if options.hta_python:
        folder = _linked(run, scratch / "hta_in", [trace.name for trace in run.traces])
        tools.append(Tool(HTA, [options.hta_python, "-P", "-c", HTA_SCRIPT, str(folder)], peers, PEER_OK))
    if options.tracelens_python:
        tools += tracelens_tools(options.tracelens_python, run, scratch, peers)
    return tools


def measure(tool: Tool, where: Path) -> Outcome:
    """One fresh process tree of `tool`, run in `where`: CPU seconds and peak RSS (module docstring)."""
    with tempfile.TemporaryFile(dir=where) as errors:
        child = subprocess.Popen(
            tool.command, env=tool.environment, cwd=where, stdout=subprocess.DEVNULL, stderr=errors
        )
        peaks, stop = {"tree": 0.0, "parent": 0.0}, threading.Event()
        sampler = threading.Thread(target=_sampled, args=(child.pid, peaks, stop), daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        stop.set()
        sampler.join()
        child.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        said = errors.read().decode(errors="replace")
    cpu, peak = usage.ru_utime + usage.ru_stime, max(peaks["tree"], usage.ru_maxrss / 1024)
    if child.returncode in tool.accepted:
        return Outcome(cpu, peak)
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    last = lines[-1] if lines else "(nothing on stderr)"
    return Outcome(cpu, peak, f"exit {child.returncode}: {last[:160]}")


def rounds(tools: list[Tool], pairs: int, where: Path) -> dict[str, list[Outcome]]:
    """`pairs` rounds of every tool, the order rotated by one each round; a tool that failed is not rerun."""
    outcomes: dict[str, list[Outcome]] = {tool.label: [] for tool in tools}
    for index in range(pairs):
        shift = index % len(tools)
        done = []
        for tool in tools[shift:] + tools[:shift]:
            past = outcomes[tool.label]
            if past and past[-1].error:
                continue
            past.append(measure(tool, where))
            last = past[-1]
            done.append(
                f"{tool.label} " + ("fails" if last.error else f"{last.cpu_s:.2f} s {last.peak_mib:.0f} MiB")
            )
        print(f"  round {index}: " + "; ".join(done), flush=True)
    return outcomes


def _spread(values: list[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def cell(outcomes: list[Outcome], base: list[Outcome] | None, figure: str, digits: int) -> str:
    """One table cell: the figure's median (range), and its ratio over `base` paired per round."""
    failed = next((o.error for o in outcomes if o.error), None)
    if failed or not outcomes:
        return "fails: " + (failed or "not run").replace("|", "/")
    text = _spread([getattr(o, figure) for o in outcomes], digits)
    if base is None or any(o.error for o in base):
        return text
    ratios = [getattr(o, figure) / getattr(b, figure) for o, b in zip(outcomes, base, strict=True)]
    return f"{text}; x{_spread(ratios, 2)}"


def table(results: dict[str, dict[str, list[Outcome]]], labels: list[str], figure: str, digits: int) -> None:
    """The markdown table of one figure: a row per run, a column per tool."""
    print(f"| run | {' | '.join(labels)} |")
    print("|---" * (len(labels) + 1) + "|")
    for run, outcomes in results.items():
        base = outcomes.get(TRACEVIEW)
        cells = [
            cell(outcomes[label], None if label == TRACEVIEW else base, figure, digits)
            if label in outcomes
            else "-"
            for label in labels
        ]
        print(f"| {run} | {' | '.join(cells)} |")


def _copies(scratch: Path, before: str | None) -> dict[str, Path]:
    """traceview of the working tree (and of `before`) assembled as installed, each checked to be imported."""
    copies = {TRACEVIEW: assemble(ROOT, scratch / "after")}
    if before:
        copies[BEFORE] = assemble(archived(before, scratch / "src_before"), scratch / "before")
    for packages in copies.values():
        check_imported_from(packages)
    return copies


def measure_runs(options: argparse.Namespace) -> tuple[dict[str, dict[str, list[Outcome]]], list[str]]:
    """Every chosen run prepared and measured in its rounds; the outcomes per run title, and the columns."""
    results: dict[str, dict[str, list[Outcome]]] = {}
    labels: list[str] = []
    with tempfile.TemporaryDirectory(prefix="peers_") as tmp:
        scratch = Path(tmp)
        copies = _copies(scratch, options.before)
        for name in options.runs:
            where = scratch / f"run_{name}"
            where.mkdir()
            run = prepare(name, where, options.dlrm)
            count = len(run.traces)
            title = f"{name}: {count} rank{'s' * (count > 1)}, {run.text_bytes / 1e6:.2f} MB"
            print(f"run {title} ({run.folder})", flush=True)
            tools = tools_for(run, where, options, copies)
            labels = [tool.label for tool in tools]
            results[title] = rounds(tools, options.pairs, where)
    return results, labels


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hta-python", help="HTA's interpreter (its virtual environment's bin/python)")
    parser.add_argument("--tracelens-python", help="TraceLens's interpreter")
    parser.add_argument("--before", help="git revision of traceview to run as 'traceview before'")
    parser.add_argument("--pairs", type=int, default=5, help="rounds (each tool once per round)")
    parser.add_argument("--runs", nargs="+", choices=["A", "B", "C"], default=["A", "B", "C"])
    parser.add_argument("--dlrm", type=Path, help="run B's folder of 8 DLRM ranks (module docstring)")
    options = parser.parse_args()
    results, labels = measure_runs(options)
    rounds_said = f"median (range); over traceview, paired per round ({options.pairs} rounds)"
    print(f"\nCPU seconds of the process tree, {rounds_said}\n")
    table(results, labels, "cpu_s", 2)
    print(f"\npeak RSS of the process tree in MiB, {rounds_said}\n")
    table(results, labels, "peak_mib", 0)


if __name__ == "__main__":
    main()
