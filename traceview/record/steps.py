"""Where an unmodified job's steps end, for the drop-in recorder (docs/run-manifest.md, "Drop-in recording").

- `OptimizerSteps`: PyTorch's global optimizer step hooks (`torch.optim.Optimizer`). A step ends when the
  optimizer that stepped first returns from an outermost `step()`: an optimizer stepping inside another's
  step (ZeRO's inner optimizer, a wrapper) is not a step of its own, nor is a second optimizer of the same
  iteration (a GAN's other half); under gradient accumulation a step is an optimizer step.
- `FunctionSteps` (`--step-on MODULE:FUNCTION`): each return of a function is a step's end. A function of an
  importable module is wrapped once the module is imported; one of the script itself (`__main__`, or the
  script's name) is found at its first call, through a profile hook that is on only until then.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from traceview.core.errors import UsageError

StepEnd = Callable[[], None]


class OptimizerSteps:
    """Calls `on_step_end` after each outermost step of the leading optimizer; `describe()` names it.

    Each step in progress is kept with the frame of PyTorch's step wrapper that runs it: a step is inside
    another when that one's frame is among its callers (a subclass's `super().step()` included), and a step
    whose frame is no longer there raised. The step ends when that wrapper has returned."""

    def __init__(self, torch: Any, on_step_end: StepEnd) -> None:
        self._on_step_end = on_step_end
        self._stepping: list[FrameType] = []
        self._leader: weakref.ref[Any] | None = None
        self._leader_name = ""
        optim = importlib.import_module("torch.optim.optimizer")  # not an attribute of torch.optim
        self._handles = [
            optim.register_optimizer_step_pre_hook(self._before),
            optim.register_optimizer_step_post_hook(self._after),
        ]

    def _before(self, optimizer: Any, *_: Any) -> None:
        wrapper = sys._getframe(1)
        callers: set[int] = set()
        frame = wrapper.f_back
        while frame is not None:
            callers.add(id(frame))
            frame = frame.f_back
        self._stepping = [*(f for f in self._stepping if id(f) in callers), wrapper]

    def _after(self, optimizer: Any, *_: Any) -> None:
        wrapper = sys._getframe(1)
        while self._stepping and self._stepping.pop() is not wrapper:
            pass
        if self._stepping:
            return  # inside another optimizer's step
        if self._leader is None or self._leader() is None:
            self._leader, self._leader_name = weakref.ref(optimizer), type(optimizer).__name__
        if self._leader() is optimizer:
            self._end_after(wrapper)

    def _end_after(self, wrapper: FrameType) -> None:
        """End the step once PyTorch's step wrapper has returned: outside its `record_function`, which the
        profiler must never start or stop inside (a session stopped within an open range can abort the
        process at its exit). A one-shot profile hook sees the return; where the job profiles Python
        itself (`sys.getprofile()`), the step ends here."""
        if sys.getprofile() is not None:
            self._on_step_end()
            return

        def returned(frame: FrameType, event: str, _: Any) -> None:
            if event == "return" and frame is wrapper:
                sys.setprofile(None)
                self._on_step_end()

        sys.setprofile(returned)

    def optimizer_params(self) -> set[int]:
        """The ids of the leading optimizer's parameters (none before its first step)."""
        leader = self._leader() if self._leader is not None else None
        groups = getattr(leader, "param_groups", [])
        return {id(p) for group in groups for p in group.get("params", [])}

    def describe(self) -> str:
        """How steps are found, for run.json."""
        return f"optimizer steps (torch.optim global step hooks; {self._leader_name or 'no optimizer'}.step)"

    def close(self) -> None:
        """Remove the hooks (and the frames of steps that raised)."""
        for handle in self._handles:
            handle.remove()
        self._stepping = []


def parse_step_on(text: str) -> tuple[str, str]:
    """`MODULE:FUNCTION` (FUNCTION may be `Class.method`) as (module, qualified name)."""
    module, _, name = text.partition(":")
    if (
        not module
        or not name
        or not all(part.isidentifier() for part in [*module.split("."), *name.split(".")])
    ):
        raise UsageError(
            f"--step-on {text!r}: give MODULE:FUNCTION, e.g. train:train_step or mypkg.loop:Trainer.step"
        )
    return module, name


def is_main_script(module: str) -> bool:
    """Whether `module` names what Python runs as `__main__`: `__main__` itself, the script's file name
    (`train` for `python train.py`), or the module of `python -m` (once it runs)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    script = sys.argv[0] if sys.argv else ""
    named = script.endswith(".py") and Path(script).stem == module.rpartition(".")[2]
    return module == "__main__" or named or getattr(spec, "name", None) == module


class FunctionSteps:
    """Calls `on_step_end` after each outermost return (or raise) of the function `--step-on` names."""

    def __init__(self, step_on: str, on_step_end: StepEnd) -> None:
        self.module, self.name = parse_step_on(step_on)
        self._on_step_end = on_step_end
        self._depth = 0
        self.wrapped = False
        self._watching = False
        self._watched: FrameType | None = None

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`original`, ending a step at each outermost return."""

        @functools.wraps(original)
        def step(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._on_step_end()

        return step

    def patch(self, namespace: dict[str, Any] | ModuleType) -> bool:
        """Wrap the function in `namespace` (a module, or a module's globals); False when it is not there."""
        owner: Any = namespace
        *path, last = self.name.split(".")
        for part in path:
            owner = owner.get(part) if isinstance(owner, dict) else getattr(owner, part, None)
        original = owner.get(last) if isinstance(owner, dict) else getattr(owner, last, None)
        if self.wrapped or owner is None or not callable(original):
            return False
        if isinstance(owner, dict):
            owner[last] = self.wrap(original)
        else:
            setattr(owner, last, self.wrap(original))
        self.wrapped = True
        return True

    def watch_main(self) -> None:
        """Find the function of the script at its first call (a profile hook until then)."""
        self._watching = True
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)

    def _profile(self, frame: FrameType, event: str, _: Any) -> None:
        if event == "return" and frame is self._watched:
            self._stop_watching()
            self._on_step_end()  # the first call, which ran before the function was wrapped
        elif event == "call" and self._watched is None and self._is_target(frame):
            if self.patch(frame.f_globals):
                self._watched = frame
            else:
                self._stop_watching()

    def _is_target(self, frame: FrameType) -> bool:
        code = frame.f_code
        return code.co_qualname == self.name and frame.f_globals.get("__name__") == "__main__"

    def _stop_watching(self) -> None:
        self._watching, self._watched = False, None
        sys.setprofile(None)
        threading.setprofile(None)

    def describe(self) -> str:
        """How steps are found, for run.json."""
        return f"returns of {self.module}:{self.name} (--step-on)"

    def close(self) -> None:
        """Stop watching (a wrapped function stays wrapped: the recorder ignores it once done)."""
        if self._watching:
            self._stop_watching()
