"""The start-up hook of `traceview record` (docs/run-manifest.md, "Drop-in recording").

`traceview record` puts this folder first on the command's PYTHONPATH, so every Python process the command
starts (torchrun's workers included) imports this module at start-up, as Python's `site` imports any
`sitecustomize`. It first runs the `sitecustomize` this one hides (the next one on `sys.path`, as if this one
were not there), then, only where `traceview record` armed it (`TRACEVIEW_RECORD=1` and a run folder in
`TRACEVIEW_RUN_DIR`), waits for the process to import PyTorch and then arms the drop-in recorder
(`traceview.record.auto.start`). Until PyTorch is imported it costs one meta-path finder; a process that never
imports PyTorch is never touched. With `--step-on MODULE:FUNCTION` it also watches for that module, whose
function the recorder wraps. Nothing here may break the process: a failure is one line on stderr.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

HOOK_DIR = os.path.dirname(os.path.abspath(__file__))
ARMED_ENV = "TRACEVIEW_RECORD"
RUN_DIR_ENV = "TRACEVIEW_RUN_DIR"
STEP_ON_ENV = "TRACEVIEW_STEP_ON"


def _say(message: str) -> None:
    sys.stderr.write(f"traceview record: {message}\n")


def chain(path: Sequence[str] | None = None) -> ModuleType | None:
    """Run the `sitecustomize` this one hides: the next on `sys.path` outside this folder, under its name."""
    others = [p for p in (sys.path if path is None else path) if os.path.abspath(p or os.curdir) != HOOK_DIR]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)
    return module


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls `callbacks[name](module)` once the module `name` has been imported (executed whole)."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = callbacks

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        """Find `name` with the other finders, and have its loader call back once it has run."""
        if name not in self.callbacks:
            return None
        for finder in sys.meta_path:
            found = getattr(finder, "find_spec", None) if finder is not self else None
            spec = found(name, path, target) if found is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            self._announce(spec.loader, self.callbacks.pop(name))
        return spec

    @staticmethod
    def _announce(loader: Any, callback: Callable[[ModuleType], None]) -> None:
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            del loader.exec_module  # the loader's own method again
            run(module)
            _safely(callback, module)

        loader.exec_module = exec_module


def _safely(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception as error:  # never break the job
        _say(f"drop-in recording is off in this process ({type(error).__name__}: {error})")


def _on_torch(torch: ModuleType) -> None:
    try:
        from traceview.record import auto
    except ImportError as error:
        _say(f"{sys.executable} imports torch but not traceview ({error}): this process is not recorded")
        return
    auto.start(torch)


def _on_step_module(module: ModuleType) -> None:
    from traceview.record import auto

    auto.step_module_imported(module)


def arm(environ: Mapping[str, str] = os.environ) -> AfterImport | None:
    """Watch for PyTorch (and the `--step-on` module) where `traceview record` armed this process."""
    if environ.get(ARMED_ENV) != "1" or not environ.get(RUN_DIR_ENV):
        return None
    callbacks: dict[str, Callable[[ModuleType], None]] = {"torch": _on_torch}
    module = environ.get(STEP_ON_ENV, "").partition(":")[0]
    if module and module != "__main__":
        callbacks[module] = _on_step_module
    watcher = AfterImport(callbacks)
    sys.meta_path.insert(0, watcher)
    for name in [n for n in callbacks if n in sys.modules]:  # imported before us (by a .pth file)
        _safely(callbacks.pop(name), sys.modules[name])
    return watcher


if __name__ == "sitecustomize":
    try:
        chain()
    finally:
        try:
            arm()
        except Exception as error:  # never break the job
            _say(f"drop-in recording is off in this process ({type(error).__name__}: {error})")
