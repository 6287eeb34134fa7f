"""One big rank, read whole (the baseline) and streamed (issue 11, part 4): wall time and peak RSS of the
process tree of `traceview summary RANK --json`, and of the parse alone, as the rank grows.

The rank is built from a real one (`hta_df_index_resolver`, 54 MB of text) repeated `copies` times one after
another: each copy's times moved past the previous copy's end, its step numbers, correlation and external ids
moved past the previous copy's, so that the result reads as one long profile of the same job (written plain,
or gzip with `--gzip`). "whole" sets `ParseLimits.stream_above_bytes` beyond the file's size (the text held
whole, as before streaming existed); "streamed" uses the defaults. Both runs of a size read the same file, one
after the other, in fresh processes; their JSON documents are checked equal.

    python benchmarks/big_rank.py [--copies 1 10 40] [--gzip] [--folder /tmp/big]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import psutil
from _bytecode import compile_sources

ROOT = Path(__file__).resolve().parents[1]
REAL_TRACE = ROOT.parent / "shared/data/real/kineto/hta_df_index_resolver/df_index_resolver.json.gz"
STEP = re.compile(r"ProfilerStep#(\d+)$")
IDS = ("correlation", "External id")
RUN = """
import sys
from dataclasses import replace
from traceview.map import executors
from traceview.cli.main import main
if sys.argv[1] == "whole":  # the map runs in this process (one rank, `--workers 1`)
    executors.DEFAULT_LIMITS = replace(executors.DEFAULT_LIMITS, stream_above_bytes=1 << 50)
sys.argv = ["traceview", *sys.argv[2:]]
main()
"""
PARSE = """
import sys
from dataclasses import replace
from traceview.parsers import kineto
from traceview.parsers.kineto.limits import DEFAULT_LIMITS
limits = replace(DEFAULT_LIMITS, stream_above_bytes=1 << 50) if sys.argv[1] == "whole" else DEFAULT_LIMITS
trace = kineto.parse(sys.argv[2], limits)
print(trace.gpu.height, trace.cpu.height)
"""


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    peak_mib: float
    output: bytes


def measure(command: list[str]) -> Measurement:
    """Wall time and the peak RSS of the process tree (sampled every 20 ms) of one command."""
    with tempfile.TemporaryFile() as output:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.DEVNULL)
        process, peak = psutil.Process(child.pid), 0
        while child.poll() is None:
            try:
                tree = [process, *process.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.02)
        wall = time.perf_counter() - start
        output.seek(0)
        text = output.read()
    if child.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}")
    return Measurement(wall, peak / 2**20, text)


def copied_events(events: list[dict[str, Any]], copies: int) -> Iterator[dict[str, Any]]:
    """The events `copies` times, each copy moved past the previous one in time, steps and ids."""
    times = [e["ts"] for e in events if isinstance(e.get("ts"), int | float)]
    span = max(times) - min(times) + 1000.0
    steps = [int(m[1]) for e in events if (m := STEP.match(str(e.get("name", ""))))]
    step_count = max(steps) - min(steps) + 1 if steps else 0
    ids = [e["args"][k] for e in events if isinstance(e.get("args"), dict) for k in IDS if k in e["args"]]
    id_span = max((i for i in ids if isinstance(i, int)), default=0) + 1
    for copy in range(copies):
        for event in events:
            yield _moved(event, copy, span, step_count, id_span) if copy else event


def _moved(event: dict[str, Any], copy: int, span: float, step_count: int, id_span: int) -> dict[str, Any]:
    moved = dict(event)
    if isinstance(moved.get("ts"), int | float):
        moved["ts"] = moved["ts"] + copy * span
    if step := STEP.match(str(moved.get("name", ""))):
        moved["name"] = f"ProfilerStep#{int(step[1]) + copy * step_count}"
    if isinstance(moved.get("args"), dict):
        args = moved["args"] = dict(moved["args"])
        for key in IDS:
            if isinstance(args.get(key), int):
                args[key] += copy * id_span
    return moved


def write_rank(folder: Path, copies: int, gzipped: bool) -> Path:
    document = json.loads(gzip.decompress(REAL_TRACE.read_bytes()))
    events = document.pop("traceEvents")
    path = folder / f"rank_x{copies}.json{'.gz' if gzipped else ''}"
    encoder = msgspec.json.Encoder()
    with gzip.open(path, "wb", compresslevel=1) if gzipped else path.open("wb") as out:
        out.write(encoder.encode(document)[:-1] + b', "traceEvents": [\n')
        for index, event in enumerate(copied_events(events, copies)):
            out.write((b",\n" if index else b"") + encoder.encode(event))
        out.write(b"\n]}\n")
    return path


def text_mib(path: Path) -> float:
    if path.suffix != ".gz":
        return path.stat().st_size / 2**20
    with gzip.open(path, "rb") as stream:
        return sum(len(piece) for piece in iter(lambda: stream.read(1 << 24), b"")) / 2**20


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 10, 40])
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args(argv)
    compile_sources(ROOT)  # timed as installed (benchmarks/_bytecode.py)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="big_rank_"))
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"{'text MiB':>9} {'step':>8} {'whole s':>8} {'MiB':>7} {'streamed s':>10} {'MiB':>7} {'memory':>7}"
    )
    for copies in args.copies:
        path = write_rank(folder, copies, args.gzip)
        size = text_mib(path)
        for label, script, extra in (
            ("parse", PARSE, [str(path)]),
            ("summary", RUN, ["summary", str(path), "--json", "--quiet", "--workers", "1"]),
        ):
            whole = measure([sys.executable, "-c", script, "whole", *extra])
            streamed = measure([sys.executable, "-c", script, "streamed", *extra])
            if whole.output != streamed.output:
                raise SystemExit(f"{label} of {path}: the streamed output differs from the whole one")
            ratio = streamed.peak_mib / whole.peak_mib
            print(
                f"{size:9.0f} {label:>8} {whole.wall_s:8.2f} {whole.peak_mib:7.0f} {streamed.wall_s:10.2f} "
                f"{streamed.peak_mib:7.0f} {ratio:6.2f}x",
                flush=True,
            )
        path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
