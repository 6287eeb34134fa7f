"""The import contract: every unit of the package in exactly one layer, and imports only downward
(tests/import_contract.py; DEVELOPERS.md draws the layers)."""

from __future__ import annotations

from pathlib import Path

from tests.import_contract import (
    LAYERS,
    RESTRICTED_NAMES,
    SOURCE_ROOTS,
    name_violations,
    units,
    violations,
)


def test_every_unit_is_in_exactly_one_layer() -> None:
    listed = [unit for layer in LAYERS for unit in layer]
    assert len(listed) == len(set(listed)), "a unit listed twice"
    assert set(listed) == units(SOURCE_ROOTS)


def test_no_import_runs_sideways_or_up() -> None:
    found = violations(SOURCE_ROOTS, LAYERS)
    assert not found, "\n".join(map(str, found))


def test_run_json_is_read_only_by_the_options_layer() -> None:
    found = name_violations(SOURCE_ROOTS, RESTRICTED_NAMES)
    assert not found, "\n".join(map(str, found))


def _plant(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return {"pkg": root / "pkg"}


def test_the_check_finds_a_planted_upward_import(tmp_path: Path) -> None:
    roots = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "def f() -> None:\n    from pkg.high.b import g\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "from pkg.low import a\n",
        },
    )
    found = violations(roots, [("pkg.low",), ("pkg.high",), ("pkg",)])
    assert [(v.importer, v.imported) for v in found] == [("pkg.low", "pkg.high")]
    assert found[0].where.endswith("a.py:2")


def test_the_check_finds_siblings_and_literal_module_names(tmp_path: Path) -> None:
    roots = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/left/__init__.py": "import importlib\nimportlib.import_module('pkg.right.x')\n",
            "pkg/right/__init__.py": "",
            "pkg/right/x.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..left import y\n"
            ),
            "pkg/left/y.py": "",
        },
    )
    found = violations(roots, [("pkg.left", "pkg.right"), ("pkg",)])
    assert {(v.importer, v.imported) for v in found} == {("pkg.left", "pkg.right"), ("pkg.right", "pkg.left")}


def test_the_check_finds_a_restricted_name_imported_elsewhere(tmp_path: Path) -> None:
    roots = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/opts/__init__.py": "",
            "pkg/opts/reader.py": "def read() -> None: ...\n",
            "pkg/cli/__init__.py": "def f() -> None:\n    from pkg.opts.reader import read\n",
        },
    )
    found = name_violations(roots, {"pkg.opts.reader.read": ("pkg.opts",)})
    assert [(v.importer, v.imported) for v in found] == [("pkg.cli", "pkg.opts.reader.read")]
