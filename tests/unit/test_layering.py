"""Dependencies point one way: tui → engine → agent. Checked in a fresh interpreter, so an
import done by another test cannot hide a violation (harlequin's approach)."""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = {
    "agent": ("engine", "tui", "textual"),
    "engine": ("tui", "textual", "swjob"),
    "swjob": ("tui", "textual"),
}

MODULES = {
    "agent": [
        "agent.protocol",
        "agent.endpoint",
        "agent.redact",
        "agent.supervisor",
        "agent.node",
        "agent.main",
        "agent.transfer",
    ],
    "engine": [
        "engine.engine",
        "engine.cli.main",
        "engine.run.fsm",
        "engine.run.orchestrator",
        "engine.providers.registry",
        "engine.providers.vastai",
        "engine.jobs.plan",
        "engine.providers.gc",
        "engine.sweep.runner",
    ],
    "swjob": ["swjob", "swjob.session", "swjob.sync"],
}


@pytest.mark.parametrize("layer", sorted(MODULES))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES[layer]!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN[layer]!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "", f"{layer} pulled in: {out.stdout.strip()}"


# ---- the import graph, read from the source (imports under `if TYPE_CHECKING:` aside) ----

import ast  # noqa: E402
import functools  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "engine", "swjob", "tui")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test)


def runtime_imports(path: Path) -> set[str]:
    """Every project module `path` imports at run time, at any depth of its code."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                for orelse in child.orelse:  # type: ignore[attr-defined]
                    visit(orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - child.level + 1])
                    base = f"{base}.{child.module}" if child.module else base
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """The project's import graph, parsed once for the four tests that read it (none
    changes it)."""
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    modules = {module_name(p): p for p in files}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {t for t in runtime_imports(path) if t in modules and t != name}
        edges[name] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def test_no_import_cycles_between_modules() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """Positive control: the test above would see one."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("front", ["tui", "swjob"])
def test_the_front_ends_use_only_the_engine_api(front: str) -> None:
    """tui/ (the console) and swjob/ (the Python API) import `engine.api` and nothing else
    of the engine, and nothing of the agent: one surface for every front-end."""
    bad = {
        name: sorted(t for t in targets if t.split(".")[0] in ("engine", "agent"))
        for name, targets in graph().items()
        if name.startswith(front)
    }
    bad = {
        name: [t for t in targets if t != "engine.api" and not t.startswith("engine.api.")]
        for name, targets in bad.items()
    }
    assert {name: targets for name, targets in bad.items() if targets} == {}


# Which engine rooms may import which (engine/__init__.py says why).
ROOMS_MAY_NOT = {
    "engine.jobs": (
        "engine.run",
        "engine.providers",
        "engine.report",
        "engine.cli",
        "engine.engine",
        "engine.core",
    ),
    "engine.report": (
        "engine.run",
        "engine.state",
        "engine.providers",
        "engine.cli",
        "engine.engine",
        "engine.core",
        "engine.jobs",
    ),
    "engine.state": (
        "engine.run",
        "engine.providers",
        "engine.cli",
        "engine.engine",
        "engine.core",
        "engine.jobs",
    ),
    "engine.providers": ("engine.run", "engine.cli", "engine.engine", "engine.core", "engine.api"),
    "engine.run": (
        "engine.cli",
        "engine.engine",
        "engine.core",
        "engine.core",
        "engine.api",
        "engine.providers.vastai",
        "engine.providers.local",
        "engine.providers.gc",
    ),
    "engine.watch": (
        "engine.run",
        "engine.providers",
        "engine.cli",
        "engine.engine",
        "engine.core",
    ),
    "engine.core": ("engine.cli", "engine.api", "engine.sweep", "engine.engine"),
    "engine.engine": ("engine.cli", "engine.api", "engine.sweep"),
    "engine.sweep": ("engine.cli", "engine.api", "engine.run", "engine.providers"),
}


def test_engine_rooms_import_only_downwards() -> None:
    edges = graph()
    broken = [
        f"{name} imports {target}"
        for room, forbidden in ROOMS_MAY_NOT.items()
        for name, targets in edges.items()
        if name == room or name.startswith(room + ".")
        for target in targets
        if any(target == f or target.startswith(f + ".") for f in forbidden)
    ]
    assert broken == []
