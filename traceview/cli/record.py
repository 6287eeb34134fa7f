"""`traceview record [options] -- CMD...`: run a training command with every rank recorded into one run
folder, and `traceview record-merge FOLDER...`: one run.json of a job recorded per node (docs/run-manifest.md,
"Recording"). Every Python process of CMD that imports PyTorch records itself (the drop-in recorder, armed by
the start-up hook on its PYTHONPATH), or through `traceview.profile()` where the script calls it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer

from traceview.cli.app import say
from traceview.cli.base import Command
from traceview.core.errors import RunError, UsageError
from traceview.core.sanitize import printable
from traceview.options.manifest import MANIFEST_NAME
from traceview.record.launch import end_like, hook_env, run_command
from traceview.record.nodes import default_output, merge_folders, node_folders
from traceview.record.parts import (
    MERGED_BY_RECORD_ENV,
    RUN_DIR_ENV,
    RecordSettings,
    merge_parts,
    nccl_env,
    part_paths,
    recorded,
    settings_env,
)
from traceview.record.steps import parse_step_on

NOTHING_RECORDED = (
    "no process reached its profiler window: run more steps or lower --wait/--warmup; a loop without "
    "torch.optim needs --step-on MODULE:FUNCTION; a command that resets PYTHONPATH or runs `python -I` "
    "hides the start-up hook (then call traceview.profile() in the script)"
)


def record_env(run_dir: Path, settings: RecordSettings, nccl_debug: bool) -> dict[str, str]:
    """The environment of the recorded command: ours on top of the caller's, the start-up hook first on
    PYTHONPATH."""
    ours = {RUN_DIR_ENV: str(run_dir.resolve()), MERGED_BY_RECORD_ENV: "1", **settings_env(settings)}
    return {**os.environ, **(nccl_env(run_dir) if nccl_debug else {}), **hook_env(os.environ), **ours}


def _fresh(run_dir: Path) -> None:
    """Refuse a folder that holds a recorded run already: its parts would mix with the new run's."""
    if run_dir.is_file():
        raise UsageError(f"-o {printable(run_dir)}: is a file, not a folder")
    if run_dir.is_dir() and ((run_dir / MANIFEST_NAME).exists() or part_paths(run_dir)):
        raise UsageError(f"-o {printable(run_dir)}: holds a recorded run already; give a new folder")


def _stated(local_batch: float | None, params: float | None, flops_per_sample: float | None) -> None:
    for name, value in (
        ("--local-batch", local_batch),
        ("--params", params),
        ("--flops-per-sample", flops_per_sample),
    ):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be a positive number, got {value}")


def _ended(command: str, status: int, output: Path) -> None:
    """Merge the parts, say what was written, and end as the command ended."""
    written = merge_parts(output)
    if written is None and status == 0:
        raise RunError(f"{printable(output)}: no rank recorded anything: {NOTHING_RECORDED}")
    if written is None:
        say(f"traceview: {printable(output)}: no rank recorded anything")
    else:
        manifest = recorded(written)
        say(
            f"wrote {printable(written)}: {len(manifest.traces)} rank trace(s), "
            f"{len(manifest.nccl_logs)} NCCL log(s); analyse it with: traceview report {printable(written)}"
        )
    if status != 0:
        how = f"was killed by signal {-status}" if status < 0 else f"exited with code {status}"
        say(f"traceview: {printable(command)} {how}; traceview record ends the same way")
        end_like(status)
        raise typer.Exit(status)


StepOnOpt = Annotated[
    str | None,
    typer.Option(
        "--step-on",
        metavar="MODULE:FUNCTION",
        help="A step ends at each return of this function (default: at each optimizer step).",
    ),
]


class Record(Command):
    """Run CMD (torchrun ... train.py, unmodified) with every rank recorded into one folder, then write its
    run.json; exits as CMD did."""

    name = "record"
    context_settings: ClassVar[dict[str, Any] | None] = {"allow_interspersed_args": False}

    def run(
        self,
        command: Annotated[
            list[str], typer.Argument(help="The training command, after --.", metavar="-- CMD...")
        ],
        output: Annotated[Path, typer.Option("-o", "--output", help="The run folder to write.")] = Path(
            "traceview-run"
        ),
        wait: Annotated[int, typer.Option("--wait", min=0, help="Steps skipped before profiling.")] = 1,
        warmup: Annotated[int, typer.Option("--warmup", min=0, help="Steps profiled and discarded.")] = 1,
        active: Annotated[int, typer.Option("--active", min=1, help="Steps recorded.")] = 3,
        step_on: StepOnOpt = None,
        no_shapes: Annotated[bool, typer.Option("--no-shapes", help="Do not record input shapes.")] = False,
        no_flops: Annotated[bool, typer.Option("--no-flops", help="Do not record operator FLOPs.")] = False,
        no_nccl_debug: Annotated[
            bool, typer.Option("--no-nccl-debug", help="Leave NCCL_DEBUG alone (no NCCL logs in the folder).")
        ] = False,
        local_batch: Annotated[
            float | None, typer.Option("--local-batch", min=0, help="Local batch b (default: measured).")
        ] = None,
        params: Annotated[
            float | None, typer.Option("--params", min=0, help="Parameter count P (default: measured).")
        ] = None,
        flops_per_sample: Annotated[
            float | None,
            typer.Option("--flops-per-sample", min=0, help="Model FLOPs per sample, forward + backward."),
        ] = None,
        nic: Annotated[
            str | None, typer.Option("--nic", help="NIC (hardware-table key, e.g. ib_ndr).")
        ] = None,
        job: Annotated[str | None, typer.Option("--job", help="The job's name, for run.json.")] = None,
    ) -> None:
        """Run CMD (torchrun ... train.py, unmodified) with every rank recorded into one folder, then write
        its run.json; exits as CMD did."""
        _fresh(output)
        _stated(local_batch, params, flops_per_sample)
        if step_on is not None:
            parse_step_on(step_on)
        settings = RecordSettings(
            wait=wait,
            warmup=warmup,
            active=active,
            record_shapes=not no_shapes,
            with_flops=not no_flops,
            local_batch=local_batch,
            params=params,
            flops_per_sample=flops_per_sample,
            nic=nic,
            job=job,
            step_on=step_on,
        )
        output.mkdir(parents=True, exist_ok=True)
        status = run_command(command, record_env(output, settings, not no_nccl_debug))
        _ended(command[0], status, output)


class RecordMerge(Command):
    """Merge the run folders of a job recorded per node into one run.json."""

    name = "record-merge"

    def run(
        self,
        folders: Annotated[
            list[Path],
            typer.Argument(
                help="The node folders (each `traceview record -o DIR` of one node), or one folder holding "
                "them.",
                metavar="FOLDER...",
            ),
        ],
        output: Annotated[
            Path | None,
            typer.Option("-o", "--output", help="Where run.json goes (default: the folders' common parent)."),
        ] = None,
    ) -> None:
        """Merge the run folders of a job recorded per node into one run.json."""
        found = node_folders(folders)
        written = merge_folders(found, output or default_output(folders))
        manifest = recorded(written)
        say(
            f"wrote {printable(written)}: {len(manifest.traces)} rank trace(s) from {len(found)} "
            f"folder(s); analyse it with: traceview report {printable(written)}"
        )
