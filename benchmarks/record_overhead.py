"""What drop-in recording costs a job: the step time of the CI job (tests/jobs/unmodified_train.py, two
ranks over gloo under torchrun, the plain loop) run as it is and under `traceview record`, in one run of this
script.

    python benchmarks/record_overhead.py [STEPS [REPEATS]]      # defaults: 60 steps, 3 repeats

Each repeat runs the job bare, then recorded with the window in the middle of the run (`--wait STEPS/3
--warmup 1 --active 5`), and reads the step times the job prints itself (wall time per optimizer step, both
ranks). Printed, as medians over every rank, step and repeat (steps 0 and 1 left out: start-up), for three
phases of the recorded run:

- armed: before the window (the start-up hook's optimizer and forward hooks, the profiler idle);
- profiling: the window's active steps (the PyTorch profiler on, shapes and FLOPs recorded);
- after: after the window (every hook removed: the same code as bare, so its ratio is the noise floor);

each against the bare run's same steps, with the ratio; and the whole command's wall time bare and recorded
(start-up, the trace written and run.json merged included). Bare and recorded runs alternate in order.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "jobs" / "unmodified_train.py"
ACTIVE = 5


def _run(command: list[str]) -> tuple[float, dict[int, list[float]]]:
    """Run the command; (wall seconds, step -> the step times both ranks printed)."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])} ... exited {done.returncode}:\n{done.stderr[-4000:]}")
    wall = time.perf_counter() - started
    steps: dict[int, list[float]] = {}
    for line in done.stdout.splitlines():
        printed = json.loads(line)
        if "step" in printed:
            steps.setdefault(printed["step"], []).append(printed["step_s"])
    return wall, steps


def _job(steps: int) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return [*launcher, "--monitor-interval", "0.1", str(JOB), "--loop", "plain", "--steps", str(steps)]


def _recorded(steps: int, wait: int, folder: Path) -> list[str]:
    schedule = ["--wait", str(wait), "--warmup", "1", "--active", str(ACTIVE)]
    return [sys.executable, "-m", "traceview", "record", "-o", str(folder), *schedule, "--", *_job(steps)]


def _pick(steps: dict[int, list[float]], chosen: range) -> list[float]:
    return [t for step in chosen for t in steps.get(step, [])]


def main(argv: list[str]) -> None:
    """Run the repeats and print the figures (module doc)."""
    total = int(argv[0]) if argv else 60
    repeats = int(argv[1]) if len(argv) > 1 else 3
    wait = total // 3
    window = range(wait + 1, wait + 1 + ACTIVE)
    phases = {"armed": range(2, wait), "profiling": window, "after": range(window.stop, total)}
    bare: dict[str, list[float]] = {name: [] for name in phases}
    recorded: dict[str, list[float]] = {name: [] for name in phases}
    walls: dict[str, list[float]] = {"bare": [], "recorded": []}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(repeats):
            runs = [
                ("bare", _job(total)),
                ("recorded", _recorded(total, wait, Path(scratch, f"run{repeat}"))),
            ]
            for kind, command in runs[
                :: 1 if repeat % 2 == 0 else -1
            ]:  # alternate the order: no drift favoured
                wall, steps = _run(command)
                walls[kind].append(wall)
                for name, chosen in phases.items():
                    (bare if kind == "bare" else recorded)[name] += _pick(steps, chosen)
    print(
        f"record_overhead: {total} steps x {repeats} repeats, 2 ranks (gloo, CPU), the window's active steps "
        f"{window.start}-{window.stop - 1}; median step time, bare and recorded, over the same steps"
    )
    for name, chosen in phases.items():
        base, with_recorder = statistics.median(bare[name]), statistics.median(recorded[name])
        print(
            f"  {name:9s} steps {chosen.start:2d}-{chosen.stop - 1:2d}: bare {base * 1e3:7.3f} ms, recorded "
            f"{with_recorder * 1e3:7.3f} ms, x{with_recorder / base:5.2f} ({len(recorded[name])} rank-steps)"
        )
    bare_wall, recorded_wall = statistics.median(walls["bare"]), statistics.median(walls["recorded"])
    print(
        f"  command wall time: bare {bare_wall:.2f} s, recorded {recorded_wall:.2f} s "
        f"(x{recorded_wall / bare_wall:.2f})"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
