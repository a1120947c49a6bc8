"""A rented node installs swjob with --no-deps plus agent/closure.py's lists: together
they must be exactly what agent/ imports from outside the standard library, and each
entry must be one of the product's declared dependencies (so the pins exist here). A
node installs at most 10 packages; the sink's client only when its run has a sink."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from agent.closure import DISTRIBUTIONS, SINK_DISTRIBUTIONS
from agent.sinkhand import NO_CLIENT
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
    assert imported == {*DISTRIBUTIONS, *SINK_DISTRIBUTIONS}


def test_each_closure_entry_is_a_declared_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {
        dep.split("=")[0].split(">")[0].split("<")[0].strip() for dep in project["dependencies"]
    }
    assert {*DISTRIBUTIONS, *SINK_DISTRIBUTIONS} <= declared


def test_a_node_installs_ten_packages_and_the_sinks_client_only_for_a_sink() -> None:
    """Issue 30's goal: ≤ 10 packages on a node; a pool with a sink adds obstore (its one
    requirement, typing-extensions, pydantic brings already): 11 (docs/sink.md)."""
    plain, with_sink = agent_closure(), agent_closure(sink=True)
    assert len(plain) <= 10 and not any(p.startswith("obstore==") for p in plain)
    assert set(with_sink) - set(plain) == {f"obstore=={metadata.version('obstore')}"}
    boot = Bootstrap(run_id="r1", ticket="t", orchestrator_id="o", token="tok")
    assert "obstore==" not in onstart_command(boot, None)
    assert "obstore==" in onstart_command(dataclasses.replace(boot, sink=True), None)
    assert "obstore==" in onstart_command(dataclasses.replace(boot, sink=True), "swjob==0.1")


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
    for pin in agent_closure(sink=True):
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
    } - {*DISTRIBUTIONS, *SINK_DISTRIBUTIONS}  # without obstore: the test below
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


def test_without_obstore_a_node_runs_and_a_sink_says_why_it_cannot_be_used() -> None:
    """A node that has no obstore (a pool without a sink never installs it) imports every
    module it runs; a sink it is given anyway is one line, and no upload."""
    code = textwrap.dedent("""
        import asyncio, sys
        from pathlib import Path
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "obstore":
                    raise ImportError("not on this node")
        sys.meta_path.insert(0, Block())
        import agent.main, agent.node, agent.warm
        from agent.protocol import SinkTarget, SinkWork
        from agent.sinkhand import SinkHand
        said, work = [], []
        async def main():
            hand = SinkHand(Path("."), said.append, lambda c: work.append(asyncio.ensure_future(c)))
            target = SinkTarget(bucket="b", prefix="p", access_key_id="k", secret_access_key="s")
            hand.use(target, lambda: False)
            hand.work(SinkWork(id=1, op="upload"))
            await work[0]
            print(said[0].error)
            print(await hand.save_before_leaving())
        asyncio.run(main())
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [NO_CLIENT, f"outputs not saved to the sink: {NO_CLIENT}"]
    assert NO_CLIENT in done.stderr  # the agent's log
    assert "obstore is not installed on this node" in NO_CLIENT
