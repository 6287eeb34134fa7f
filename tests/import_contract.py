"""The layers of the installed package and the check that imports run only downward (tests/test_layers.py).

A unit is a subpackage of `traceview`, `traceview.parsers` or `traceview.reports` (or a module directly under
`traceview`). `LAYERS` lists every unit once, from the ground up; a unit may import a unit of a lower layer
and never one of its own layer or a higher one. Every import counts: module level, inside functions, under
`TYPE_CHECKING`, and `importlib.import_module("...")` with a literal name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS: Mapping[str, Path] = {
    "traceview": ROOT / "traceview",
    "traceview.parsers": ROOT / "parsers",
    "traceview.reports": ROOT / "reports",
}
"""Where each installed package's files are in the repository (pyproject's `package-dir`)."""

LAYERS: tuple[tuple[str, ...], ...] = (
    ("traceview.core",),
    ("traceview.model",),
    (
        "traceview.options",
        "traceview.parsers",
        "traceview.parsers.kineto",
        "traceview.parsers.nccl_log",
        "traceview.parsers.nccl_inspector",
        "traceview.parsers.flight_recorder",
    ),
    ("traceview.load",),
    ("traceview.events", "traceview.steps"),
    ("traceview.budget", "traceview.collectives", "traceview.critical_path"),
    (
        "traceview.bubbles",
        "traceview.across_ranks",
        "traceview.nccl",
        "traceview.timeline",
        "traceview.kernels",
    ),
    ("traceview.distributions", "traceview.prediction", "traceview.flight_recorder"),
    ("traceview.dimensions", "traceview.moe", "traceview.links_measured"),
    ("traceview.roofline", "traceview.replay"),
    ("traceview.verdict",),
    ("traceview.map",),
    ("traceview.reduce",),
    ("traceview.compare", "traceview.export", "traceview.record"),
    ("traceview.reports", "traceview.reports.text", "traceview.reports.json"),
    ("traceview.reports.html",),
    ("traceview.cli", "traceview.api"),
    ("traceview", "traceview.__main__"),
)
"""Every unit, from the ground up (docs/metrics.md's data flow: parsers -> map -> reduce -> renderers)."""

RESTRICTED_NAMES: Mapping[str, tuple[str, ...]] = {
    # run.json is read by the options layer alone (once per command, `build_options`); the recorder reads the
    # per-rank parts it merges.
    "traceview.options.manifest.load_manifest": ("traceview.options", "traceview.record"),
    "traceview.options.manifest.find_manifest": ("traceview.options",),
}
"""Names only the listed units may import."""


@dataclass(frozen=True)
class Violation:
    """One import that runs against the layers: `importer` (file:line, unit) imports `imported` (its unit)."""

    where: str
    importer: str
    imported: str

    def __str__(self) -> str:
        return f"{self.where}: {self.importer} imports {self.imported}"


def module_name(path: Path, roots: Mapping[str, Path]) -> str:
    """The dotted name `path` installs as."""
    for package, folder in sorted(roots.items(), key=lambda item: -len(item[0])):
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            return ".".join([package, *parts])
    raise ValueError(f"{path} is under no source root")


def unit_of(module: str, roots: Mapping[str, Path]) -> str | None:
    """The unit a module belongs to: its package one level below the longest root that holds it; None when
    the module is outside the project."""
    root = max((r for r in roots if module == r or module.startswith(r + ".")), key=len, default=None)
    if root is None:
        return None
    rest = module.removeprefix(root).lstrip(".").split(".")
    return root if rest == [""] else f"{root}.{rest[0]}"


def project_files(roots: Mapping[str, Path]) -> list[Path]:
    """Every Python file of the installed package."""
    return sorted(path for folder in roots.values() for path in folder.rglob("*.py"))


def units(roots: Mapping[str, Path]) -> set[str]:
    """Every unit the files make."""
    found = {unit_of(module_name(path, roots), roots) for path in project_files(roots)}
    return {unit for unit in found if unit is not None}


def _literal_import(node: ast.Call) -> str | None:
    func = node.func
    named = isinstance(func, ast.Attribute) and func.attr == "import_module"
    named = named or (isinstance(func, ast.Name) and func.id == "import_module")
    if named and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def imports_of(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) of every import in `path`, wherever it stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Call) and (literal := _literal_import(node)):
            yield node.lineno, literal


def violations(roots: Mapping[str, Path], layers: Sequence[Sequence[str]]) -> list[Violation]:
    """Every import from a unit to a unit of its own layer or a higher one."""
    level = {unit: index for index, layer in enumerate(layers) for unit in layer}
    known = set(level)
    found: set[Violation] = set()
    for path in project_files(roots):
        module = module_name(path, roots)
        importer = unit_of(module, roots)
        for line, imported in imports_of(path, module):
            target = unit_of(imported, roots)
            if target is None or importer is None or target == importer or target not in known:
                continue
            if level[target] >= level[importer]:
                found.add(Violation(f"{path}:{line}", importer, target))
    return sorted(found, key=str)


def name_violations(roots: Mapping[str, Path], restricted: Mapping[str, Sequence[str]]) -> list[Violation]:
    """Every import of a restricted name by a unit outside those allowed to."""
    found: set[Violation] = set()
    for path in project_files(roots):
        module = module_name(path, roots)
        importer = unit_of(module, roots)
        for line, imported in imports_of(path, module):
            allowed = restricted.get(imported)
            if allowed is not None and importer not in allowed:
                found.add(Violation(f"{path}:{line}", str(importer), imported))
    return sorted(found, key=str)
