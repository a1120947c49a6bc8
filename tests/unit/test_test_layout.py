"""The tests keep their own layering: a test module imports shared helpers from
tests/support (or the stand-in, tests/standin) and otherwise only from its own directory,
so changing one kind of test never breaks another, and a helper has one home."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SHARED = {"support", "standin"}
KINDS = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in SHARED | {"data"})


def imported_kinds(path: Path) -> set[str]:
    """The tests/ directories `path` imports from (`from tests.X ...`, `import tests.X`)."""
    kinds = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        kinds |= {name.split(".")[1] for name in names if name.startswith("tests.")}
    return kinds


def other_kinds(path: Path) -> set[str]:
    return imported_kinds(path) - SHARED - {path.relative_to(TESTS).parts[0]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_of_test_imports_only_support_and_its_own_directory(kind: str) -> None:
    crossing = {
        str(path.relative_to(TESTS)): sorted(other_kinds(path))
        for path in sorted((TESTS / kind).rglob("*.py"))
        if other_kinds(path)
    }
    assert crossing == {}


def test_the_check_sees_a_crossing(tmp_path: Path) -> None:
    """Positive control: an import from another kind's module is found."""
    (tmp_path / "security").mkdir()
    probe = tmp_path / "security" / "test_x.py"
    probe.write_text("from tests.unit.test_redact_shapes import PEM\nimport tests.support.cli\n")
    assert imported_kinds(probe) == {"unit", "support"}


def test_the_readme_map_names_every_test_file() -> None:
    """tests/README.md's map is where a reader finds the tests of a behaviour: a test file
    it does not name is one nobody finds (add a row, or the file to the row it belongs to)."""
    named = set(re.findall(r"`(\w+/test_\w+\.py)`", (TESTS / "README.md").read_text()))
    files = {str(path.relative_to(TESTS)) for path in TESTS.glob("*/test_*.py")}
    assert sorted(files - named) == []
