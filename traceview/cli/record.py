"""`traceview record [options] -- CMD...`: run a training command with every rank recorded into one run folder
(docs/run-manifest.md, "Recording"). The command's processes pick the settings up in `traceview.profile()`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer

from traceview.cli.app import say
from traceview.cli.base import Command
from traceview.core.errors import RunError, UsageError
from traceview.core.sanitize import printable
from traceview.options.manifest import MANIFEST_NAME
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


def record_env(run_dir: Path, settings: RecordSettings, nccl_debug: bool) -> dict[str, str]:
    """The environment of the recorded command: ours on top of the caller's."""
    ours = {RUN_DIR_ENV: str(run_dir.resolve()), MERGED_BY_RECORD_ENV: "1", **settings_env(settings)}
    return {**os.environ, **(nccl_env(run_dir) if nccl_debug else {}), **ours}


def _fresh(run_dir: Path) -> None:
    """Refuse a folder that holds a recorded run already: its parts would mix with the new run's."""
    if run_dir.is_file():
        raise UsageError(f"-o {printable(run_dir)}: is a file, not a folder")
    if run_dir.is_dir() and ((run_dir / MANIFEST_NAME).exists() or part_paths(run_dir)):
        raise UsageError(f"-o {printable(run_dir)}: holds a recorded run already; give a new folder")


def _run(command: list[str], env: dict[str, str]) -> int:
    try:
        return subprocess.run(command, env=env, check=False).returncode
    except OSError as exc:
        raise UsageError(f"{printable(command[0])}: cannot run: {exc.strerror or exc}") from exc


class Record(Command):
    """Run CMD (torchrun ... train.py) with each rank's traceview.profile() recording into one folder, then
    write its run.json."""

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
        no_shapes: Annotated[bool, typer.Option("--no-shapes", help="Do not record input shapes.")] = False,
        no_flops: Annotated[bool, typer.Option("--no-flops", help="Do not record operator FLOPs.")] = False,
        no_nccl_debug: Annotated[
            bool, typer.Option("--no-nccl-debug", help="Leave NCCL_DEBUG alone (no NCCL logs in the folder).")
        ] = False,
        local_batch: Annotated[
            float | None, typer.Option("--local-batch", min=0, help="Local batch b, for run.json.")
        ] = None,
        params: Annotated[float | None, typer.Option("--params", min=0, help="Parameter count P.")] = None,
        flops_per_sample: Annotated[
            float | None,
            typer.Option("--flops-per-sample", min=0, help="Model FLOPs per sample, forward + backward."),
        ] = None,
        nic: Annotated[
            str | None, typer.Option("--nic", help="NIC (hardware-table key, e.g. ib_ndr).")
        ] = None,
        job: Annotated[str | None, typer.Option("--job", help="The job's name, for run.json.")] = None,
    ) -> None:
        """Run CMD (torchrun ... train.py) with each rank's traceview.profile() recording into one folder, then
        write its run.json."""
        _fresh(output)
        for name, value in (
            ("--local-batch", local_batch),
            ("--params", params),
            ("--flops-per-sample", flops_per_sample),
        ):
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be a positive number, got {value}")
        settings = RecordSettings(
            wait=wait, warmup=warmup, active=active, record_shapes=not no_shapes, with_flops=not no_flops,
            local_batch=local_batch, params=params, flops_per_sample=flops_per_sample, nic=nic, job=job,
        )  # fmt: skip
        output.mkdir(parents=True, exist_ok=True)
        code = _run(command, record_env(output, settings, not no_nccl_debug))
        written = merge_parts(output)
        if written is None:
            raise RunError(
                f"{printable(output)}: no rank recorded anything (exit code {code}); "
                "does the command use traceview.profile()?"
            )
        manifest = recorded(written)
        say(
            f"wrote {printable(written)}: {len(manifest.traces)} rank trace(s), {len(manifest.nccl_logs)} NCCL "
            f"log(s); analyse it with: traceview report {printable(written)}"
        )
        if code != 0:
            raise RunError(
                f"{printable(command[0])} exited with code {code}; run.json lists what was recorded"
            )
