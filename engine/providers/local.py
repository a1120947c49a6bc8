"""The built-in `local` pool: a node is a `swjob-agent` subprocess on this machine.

Each node gets a fresh directory under the user's cache dir; teardown ends the agent
(SIGTERM, which makes it stop its job; then SIGKILL after a grace period), kills the
job's process group if the agent died without doing so, and removes the directory.
The pool's `max_nodes` bounds how many nodes exist at once; further runs wait in
PENDING until a slot frees.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import sys
from pathlib import Path

from engine.paths import cache_dir
from engine.providers.base import TOKEN_ENV, Bootstrap, NodeHandle, ProvisionError

AGENT_EXIT_GRACE_S = 15.0


class _LocalNode:
    def __init__(self, process: asyncio.subprocess.Process, root: Path) -> None:
        self.process = process
        self.root = root


class LocalProvider:
    name = "local"

    def __init__(self, max_nodes: int, *, stop_grace_s: float = 10.0) -> None:
        self._slots = asyncio.Semaphore(max_nodes)
        self._nodes: dict[str, _LocalNode] = {}
        self._stop_grace_s = stop_grace_s

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        await self._slots.acquire()
        try:
            return await self._start(bootstrap)
        except BaseException:
            self._slots.release()
            raise

    async def _start(self, bootstrap: Bootstrap) -> NodeHandle:
        node_id = f"local-{bootstrap.run_id}-{secrets.token_hex(2)}"
        root = cache_dir() / "nodes" / node_id
        root.mkdir(parents=True)
        env = {**os.environ, TOKEN_ENV: bootstrap.token}
        args = [*bootstrap.agent_args(), "--root", str(root), "--grace", f"{self._stop_grace_s:g}"]
        try:
            with (root / "agent.log").open("ab") as agent_log:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "agent", *args,
                    env=env, stdin=asyncio.subprocess.DEVNULL,
                    stdout=agent_log, stderr=agent_log,
                )  # fmt: skip
        except OSError as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise ProvisionError(f"could not start swjob-agent: {exc.strerror}") from None
        self._nodes[node_id] = _LocalNode(process, root)
        return NodeHandle(provider=self.name, node_id=node_id, offer={"pid": process.pid})

    async def node_exited(self, handle: NodeHandle) -> str:
        node = self._nodes.get(handle.node_id)
        if node is None:
            return "node is gone"
        code = await node.process.wait()
        return f"agent process exited with code {code}"

    async def teardown(self, handle: NodeHandle) -> None:
        node = self._nodes.pop(handle.node_id, None)
        if node is None:
            return
        try:
            await _end_process(node.process, self._stop_grace_s + AGENT_EXIT_GRACE_S)
            _kill_orphan_group(node.root)
            shutil.rmtree(node.root, ignore_errors=True)
        finally:
            self._slots.release()


async def _end_process(process: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL; always reaps the process."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    await process.wait()


def _kill_orphan_group(root: Path) -> None:
    """If the agent died without stopping its job, the job's process group is still there."""
    pgid_file = root / "state" / "step.pgid"
    try:
        pgid = int(pgid_file.read_text().strip())
    except (OSError, ValueError):
        return
    if pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
