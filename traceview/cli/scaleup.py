"""`traceview scaleup SMALL LARGE`: the scale-up post-mortem (docs/compare.md, "scaleup")."""

from __future__ import annotations

from typing import Annotated

import typer

from traceview.cli.app import print_json, stdout_console
from traceview.cli.base import Command, WideOpt, user_option
from traceview.cli.compare import summary_of
from traceview.core.errors import RunError
from traceview.core.sanitize import printable


class Scaleup(Command):
    """One model at two sizes: measured scaling efficiency against the model's, the loss by factor."""

    name = "scaleup"

    def run(
        self,
        small: Annotated[str, typer.Argument(help="The smaller run: a run or a summary JSON.")],
        large: Annotated[str, typer.Argument(help="The larger run: a run or a summary JSON.")],
        workers: Annotated[int | None, user_option("workers")] = None,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the post-mortem as versioned JSON.")
        ] = False,
        wide: WideOpt = False,
    ) -> None:
        """Measured scaling efficiency against the alpha-beta model's, the loss split by factor in absolute
        times; refused (exit 2) only on evidence of two different models."""
        from traceview.compare.scaleup import model_differences, scaleup
        from traceview.reports.text.scaleup import render_scaleup

        documents = summary_of(small, workers), summary_of(large, workers)
        differences = model_differences(*documents)
        if differences:
            raise RunError(
                f"{printable(small)} and {printable(large)} are different models: "
                f"{printable('; '.join(differences))}"
            )
        found = scaleup(*documents)
        if json_output:
            from traceview.reports.json.scaleup import scaleup_document

            print_json(scaleup_document(found, small, large))
        else:
            render_scaleup(found, stdout_console(200, wide=wide))
