"""The command base: every command is a class with its own options and what it does; the options the analysis
commands share are defined once and their "load, analyse, render" sequence has one call site.

- `Command`: a command's name, its help (the class docstring) and `run(**own options)`. Its own options are
  the typed keyword parameters of `run` (`Annotated[..., typer.Option(...)]`).
- `AnalysisCommand`: a command that analyses a run. Its own options are the keyword parameters of `render`;
  the shared ones (every `UserOptions` field, `--quiet`, `--fail-on`) are added by `register` from their one
  definition (`traceview.options.user.UserOptions` and `SHARED_DISPLAY` here). `invoke` checks the gates,
  builds the run's options once (`traceview.options.run.build_options`), analyses, names what was skipped,
  renders, then applies the gates.

`register(app, command)` turns a command into a typer command: one signature made of its own parameters and
the shared ones, and a callback that hands each its part.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import Field, fields, replace
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer

from traceview.options.user import Flag, UserOptions, flag_of

RunsArg = Annotated[
    list[str],
    typer.Argument(
        metavar="RUN...",
        help=(
            "A trace file, a folder of per-rank traces, a glob or a run.json; several files (an unquoted "
            "glob the shell expanded) are read as one run."
        ),
    ),
]

_CLI_TYPES: dict[str, Any] = {
    "texts": list[str] | None,
    "paths": list[Path] | None,
    "count": int | None,
    "number": float | None,
    "quantity": str | None,
    "text": str | None,
    "choice": str,
}
"""The command-line type of each kind of `UserOptions` field (lists are repeatable options)."""


def user_option(name: str) -> Any:
    """The typer option of the `UserOptions` field `name`, from its `Flag` (for a command that takes one of
    the shared options on its own)."""
    flag = flag_of(name)
    bounded = flag.kind == "count"
    return typer.Option(
        flag.flag,
        help=flag.help,  # plain text: the help is click's, never read as rich markup
        min=flag.low if bounded else None,
        max=flag.high if bounded else None,
    )


def _typer_parameter(spec: Field[Any]) -> inspect.Parameter:
    """The typer parameter of one `UserOptions` field."""
    flag: Flag = spec.metadata["flag"]
    default = spec.default if spec.default not in ((), None) else None
    kind = int if flag.kind == "count" and default is not None else _CLI_TYPES[flag.kind]
    annotation = Annotated[kind, user_option(spec.name)]  # type: ignore[valid-type]  # built from the table
    return inspect.Parameter(
        spec.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar on stderr.")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Show every table column, however wide the terminal.")]
FailOnOpt = Annotated[
    list[str] | None,
    typer.Option("--fail-on", help="Exit 1 when a figure crosses it, e.g. 'exposed_gamma>0.5'; repeatable."),
]
SHARED_DISPLAY: tuple[inspect.Parameter, ...] = (
    inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=QuietOpt),
    inspect.Parameter("fail_on", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=FailOnOpt),
)
"""The command line's own shared options: the progress bar and the gates."""

SHARED_ANALYSIS: tuple[inspect.Parameter, ...] = (
    *map(_typer_parameter, fields(UserOptions)),
    *SHARED_DISPLAY,
)
"""Every option the analysis commands share, each defined once."""


class Command:
    """A command: its name, its help (the class docstring) and `run`, whose keyword parameters are its
    options."""

    name: ClassVar[str]
    context_settings: ClassVar[dict[str, Any] | None] = None
    run: Callable[..., None]
    """Do the command's work; its parameters are the command's arguments and options."""

    def parameters(self) -> list[inspect.Parameter]:
        """The command line's parameters: those of `run`."""
        return _own_parameters(self.run)

    def callback(self, **values: Any) -> None:
        """What typer calls: `run` with the parsed values."""
        self.run(**values)


class AnalysisCommand(Command):
    """A command that analyses a run: the shared options, then `render` with its own."""

    prints_warnings: ClassVar[bool] = False  # the run's warnings on stderr: its output has no place for them
    outputs: ClassVar[tuple[str, ...]] = ()  # own options naming output files: never one of the run's inputs
    render: Callable[..., None]
    """Show the analysis (the first parameter) with the command's own options (the keyword parameters)."""

    def check(self, **own: Any) -> None:
        """Refuse a bad own option before any file is read (default: nothing to check)."""

    def gate_names(self) -> frozenset[str]:
        """The figures `--fail-on` may name (checked before any file is read)."""
        from traceview.reduce.results import GATE_FIGURES

        return GATE_FIGURES

    def parameters(self) -> list[inspect.Parameter]:
        """`runs`, the command's own options (those of `render`), then the shared ones."""
        runs = inspect.Parameter("runs", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunsArg)
        return [runs, *_own_parameters(self.render, skip=1), *SHARED_ANALYSIS]

    def callback(self, **values: Any) -> None:
        """Split the parsed values into the shared ones and the command's own, then `invoke`."""
        shared = {p.name: values.pop(p.name) for p in SHARED_ANALYSIS}
        runs = values.pop("runs")
        fail_on, quiet = shared.pop("fail_on") or [], shared.pop("quiet")
        self.invoke(runs, UserOptions(**shared), quiet=quiet, fail_on=fail_on, own=values)

    def invoke(
        self,
        runs: Sequence[str],
        user: UserOptions,
        *,
        quiet: bool,
        fail_on: Sequence[str],
        own: dict[str, Any],
    ) -> None:
        """Gates checked, options built once, the run analysed, skipped inputs named, rendered, gates
        applied."""
        from traceview.cli.app import (
            analyse,
            check_thresholds,
            finish,
            report_skipped,
            report_warnings,
            run_inputs,
        )
        from traceview.core.output import refuse_inputs
        from traceview.options.run import build_options

        check_thresholds(fail_on, self.gate_names())
        self.check(**own)
        spec = runs[0] if len(runs) == 1 else list(runs)
        options = build_options(spec, user)
        for name in self.outputs:
            if own.get(name) is not None:
                refuse_inputs(own[name], run_inputs(spec, options))
        analysis = analyse(spec, options, quiet)
        report_skipped(analysis)
        if self.prints_warnings and not quiet:
            report_warnings(analysis)
        if quiet and not own.get("json_output"):  # --quiet: no warnings on the terminal (the JSON keeps them)
            analysis = replace(analysis, header=replace(analysis.header, warnings=()))
        self.render(analysis, **own)
        finish(analysis, fail_on)


def _resolved(annotation: Any, namespace: dict[str, Any]) -> Any:
    """An annotation written as text (`from __future__ import annotations`) as the object it names."""
    return eval(annotation, namespace) if isinstance(annotation, str) else annotation


def _own_parameters(method: Callable[..., Any], skip: int = 0) -> list[inspect.Parameter]:
    """The keyword parameters of a bound method after the first `skip`, their annotations resolved (typer
    reads them; the skipped ones, such as `render`'s analysis, are never imported at start-up)."""
    namespace = getattr(method, "__globals__", None) or method.__func__.__globals__  # type: ignore[attr-defined]
    found = list(inspect.signature(method).parameters.values())[skip:]
    return [
        p.replace(annotation=_resolved(p.annotation, namespace)) for p in found if p.kind != p.VAR_KEYWORD
    ]


def register(app: typer.Typer, command: Command) -> None:
    """Add `command` to `app` under its name, with its help and its parameters."""

    def callback(**values: Any) -> None:
        command.callback(**values)

    parameters = command.parameters()
    callback.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    callback.__annotations__ = {p.name: p.annotation for p in parameters}
    callback.__name__ = command.name
    app.command(name=command.name, help=inspect.getdoc(command), context_settings=command.context_settings)(
        callback
    )
