"""A rented node installs swjob with --no-deps plus agent/closure.py's list: that list
must be exactly what agent/ imports from outside the standard library, and each entry
must be one of the product's declared dependencies (so the pins exist here)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from agent.closure import DISTRIBUTIONS
from engine.providers.agent_source import agent_bundle, agent_closure
from engine.providers.base import Bootstrap
from engine.providers.vast_boot import onstart_command

REPO = Path(__file__).resolve().parents[2]


def third_party_imports(package: Path) -> set[str]:
    """Top-level modules imported anywhere under `package` that are neither stdlib nor its own."""
    found: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {package.name, "__future__"}


def test_the_closure_is_what_the_agent_imports() -> None:
    by_module = metadata.packages_distributions()
    imported = {
        dist.lower() for module in third_party_imports(REPO / "agent") for dist in by_module[module]
    }
    assert imported == set(DISTRIBUTIONS)


def test_each_closure_entry_is_a_declared_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {
        dep.split("=")[0].split(">")[0].split("<")[0].strip() for dep in project["dependencies"]
    }
    assert set(DISTRIBUTIONS) <= declared


def test_the_node_installs_swjob_and_the_pinned_closure_in_one_step() -> None:
    boot = Bootstrap(run_id="r1", ticket="t", orchestrator_id="o", token="tok")
    command = onstart_command(boot, "swjob==0.1.0")
    pins = agent_closure()
    names = {pin.split("==")[0] for pin in pins}
    assert set(DISTRIBUTIONS) <= names and {"pydantic-core", "typing-extensions"} <= names
    assert all(metadata.version(pin.split("==")[0]) == pin.split("==")[1] for pin in pins)
    assert f"--no-deps swjob==0.1.0 {' '.join(pins)}" in command
    for heavy in ("textual", "vastai", "rich", "tomlkit"):
        assert heavy not in command


def test_without_agent_install_the_node_installs_the_closure_and_fetches_the_agent() -> None:
    boot = Bootstrap(run_id="r1", ticket="t", orchestrator_id="o", token="tok-5e3a9")
    command = onstart_command(boot, None)
    assert f"--no-deps {' '.join(agent_closure())};" in command
    assert f"' {agent_bundle()[1]} --run-id r1" in command  # the code's SHA-256, then the args
    assert "tok-5e3a9" not in command  # the token travels in the instance's env


def test_no_closure_requirement_depends_on_the_platform() -> None:
    """The closure is pinned on the operator's machine (maybe a Mac) and installed with
    --no-deps on a Linux node: a requirement only some platforms need would be missed."""
    for pin in agent_closure():
        for text in metadata.requires(pin.split("==")[0]) or []:
            marker = Requirement(text).marker
            if marker is not None and "extra" not in str(marker):
                assert not re.search(r"sys_platform|platform_|os_name", str(marker)), text


def test_every_agent_module_imports_without_the_rest_of_the_product() -> None:
    """In a fresh interpreter where swjob's other dependencies (textual, rich, the Vast SDK, …)
    cannot be imported, every agent module still imports: a node with only the closure runs."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    others = {
        dep.split("=")[0].split(">")[0].split("<")[0].strip() for dep in project["dependencies"]
    } - set(DISTRIBUTIONS)
    by_module = metadata.packages_distributions()
    blocked = sorted(m for m, dists in by_module.items() if {d.lower() for d in dists} & others)
    modules = sorted(
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for p in (REPO / "agent").rglob("*.py")
        if p.name != "__main__.py"
    )
    code = (
        "import importlib, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}:\n"
        "            raise ImportError(f'not on a node: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
    )
    assert "textual" in blocked and "vastai" in blocked  # the fence holds something
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=REPO)
