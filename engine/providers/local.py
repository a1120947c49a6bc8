"""The built-in `local` pool: a node is a `swjob-agent` subprocess on this machine.

Each node gets a fresh directory under the user's cache dir (an agent orphaned for the
pool's `orphan_timeout_s` stops its job and removes it itself); teardown ends the agent
(SIGTERM, which makes it stop its job; then SIGKILL after a grace period), kills the
job's process group if the agent died without doing so, and removes the directory.
The pool's `max_nodes` bounds how many nodes exist at once; further runs wait in
PENDING until a slot frees.

A local node is as bare as a rented one: the agent (and so the job) gets a minimal
environment — never the operator's, which holds API keys — and the usual umask 022,
inside a node directory only the operator can enter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from agent.procgroup import kill_group_now
from engine.providers.base import Bootstrap, NodeHandle, Preempted, ProvisionError
from engine.report import scope
from engine.report.events import BootPhase
from engine.state.paths import cache_dir

AGENT_EXIT_GRACE_S = 15.0
BASE_ENV = ("PATH", "HOME", "LANG", "TERM", "USER")
"""What a local node keeps of the operator's environment (plus the SWJOB_* knobs)."""
NODE_UMASK = 0o022


class _LocalNode:
    """An agent process: our child, or (after an engine restart) adopted by pid."""

    def __init__(self, pid: int, root: Path, process: asyncio.subprocess.Process | None) -> None:
        self.pid = pid
        self.root = root
        self.process = process

    @property
    def adopted(self) -> bool:
        return self.process is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    async def wait(self) -> int | None:
        """The exit code (None for an adopted process: only its parent could reap it)."""
        if self.process is not None:
            return await self.process.wait()
        while _alive(self.pid):
            await asyncio.sleep(0.2)
        return None


class LocalProvider:
    name = "local"

    def __init__(
        self,
        max_nodes: int,
        *,
        stop_grace_s: float = 10.0,
        launcher: Sequence[str] = (),
        agent_env: Mapping[str, str] | None = None,
    ) -> None:
        """`launcher` prefixes the agent's command line (it must exec in place, so the pid
        stays the agent's — e.g. `ip netns exec NS` puts nodes behind their own link);
        `agent_env` adds to the agent's environment."""
        self._slots = asyncio.Semaphore(max_nodes)
        self._nodes: dict[str, _LocalNode] = {}
        self._stop_grace_s = stop_grace_s
        self._launcher = list(launcher)
        self._agent_env = dict(agent_env or {})

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        await self._slots.acquire()
        try:
            scope.boot_reached(BootPhase.SLOT_TAKEN)  # queueing ends, booting begins
            return await self._start(bootstrap)
        except BaseException:
            self._slots.release()
            raise

    async def _start(self, bootstrap: Bootstrap) -> NodeHandle:
        node_id = f"local-{bootstrap.run_id}-{secrets.token_hex(2)}"
        root = _node_root(node_id)
        root.mkdir(mode=0o700, parents=True)
        env = {**node_base_env(os.environ), **self._agent_env, **bootstrap.agent_env()}
        args = [
            *replace(bootstrap, on_orphan=("--on-orphan", "remove-root")).agent_args(),
            *("--root", str(root), "--grace", f"{self._stop_grace_s:g}"),
        ]
        # Its own session: Ctrl-C and a closed terminal reach the operator, which decides
        # (stop and tear down, or leave the node running) — never the node directly.
        try:
            with (root / "agent.log").open("ab") as agent_log:
                process = await asyncio.create_subprocess_exec(
                    *self._launcher, sys.executable, "-m", "agent", *args,
                    env=env, stdin=asyncio.subprocess.DEVNULL,
                    stdout=agent_log, stderr=agent_log,
                    start_new_session=True, umask=NODE_UMASK,
                )  # fmt: skip
        except OSError as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise ProvisionError(f"could not start swjob-agent: {exc.strerror}") from None
        self._nodes[node_id] = _LocalNode(process.pid, root, process)
        # the one boot step a local node has before it joins: no offer, image or install
        scope.boot_reached(BootPhase.INSTANCE_CREATED, f"swjob-agent process {process.pid}")
        return NodeHandle(
            provider=self.name, node_id=node_id, offer={"pid": process.pid}, created_at=time.time()
        )

    def adopt(self, handle: NodeHandle) -> None:
        """Take back a node an earlier engine process started (crash recovery). It does not
        count against max_nodes: refusing to own a running node would be worse."""
        pid = handle.offer.get("pid")
        if isinstance(pid, int):
            self._nodes[handle.node_id] = _LocalNode(pid, _node_root(handle.node_id), None)

    async def find_node(self, run_id: str) -> NodeHandle | None:
        """Local nodes are recorded before the engine awaits anything: none can be unknown."""
        return None

    async def node_exited(self, handle: NodeHandle) -> str:
        node = self._nodes.get(handle.node_id)
        if node is None:
            return "node is gone"
        code = await node.wait()
        return "agent process exited" + (f" with code {code}" if code is not None else "")

    async def preemption(self, handle: NodeHandle) -> Preempted | None:
        """This machine never takes a node back."""
        return None

    async def teardown(self, handle: NodeHandle) -> None:
        node = self._nodes.pop(handle.node_id, None)
        if node is None:
            return
        try:
            await _end_process(node, self._stop_grace_s + AGENT_EXIT_GRACE_S)
            _kill_orphan_group(node.root)
            shutil.rmtree(node.root, ignore_errors=True)
        finally:
            if not node.adopted:
                self._slots.release()


def node_base_env(operator_env: Mapping[str, str]) -> dict[str, str]:
    """The minimal base a rented node gives, taken from the operator's environment:
    PATH, HOME, LANG, TERM, USER and swjob's own SWJOB_* settings — nothing else."""
    return {
        name: value
        for name, value in operator_env.items()
        if name in BASE_ENV or name.startswith("SWJOB_")
    }


def _node_root(node_id: str) -> Path:
    return cache_dir() / "nodes" / node_id


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _end_process(node: _LocalNode, grace_s: float) -> None:
    """SIGTERM (and SIGCONT, so a frozen agent can act on it), wait up to `grace_s`, then
    SIGKILL; reaps our own child."""
    node.signal(signal.SIGTERM)
    node.signal(signal.SIGCONT)
    try:
        async with asyncio.timeout(grace_s):
            await node.wait()
    except TimeoutError:
        node.signal(signal.SIGKILL)
        await node.wait()


def _kill_orphan_group(root: Path) -> None:
    """If the agent died without stopping its job, the job's process group is still there."""
    pgid_file = root / "state" / "step.pgid"
    try:
        pgid = int(pgid_file.read_text().strip())
    except (OSError, ValueError):
        return
    if pgid > 1:
        kill_group_now(pgid)
