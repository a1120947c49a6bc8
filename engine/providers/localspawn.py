"""Starting a local node's agent process: fresh for a run, or in standby ahead of one.

A local node is as bare as a rented one: the agent (and so the job) gets a minimal
environment — never the operator's, which holds API keys — the usual umask 022, its own
session (Ctrl-C and a closed terminal reach the operator, which decides), and its
output in the node directory's agent.log.

A standby agent (agent/standby.py) is started before the run exists, so its imports —
most of a local node's start — overlap the operator's own: `swjob run` starts one
first thing. This module imports little on purpose: it is imported before the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent.standby import FLAG, bootstrap_line
from engine.state.paths import cache_dir

log = logging.getLogger("swjob.local")

BASE_ENV = ("PATH", "HOME", "LANG", "TERM", "USER")
"""What a local node keeps of the operator's environment (plus the SWJOB_* knobs)."""
NODE_UMASK = 0o022


def node_base_env(operator_env: Mapping[str, str]) -> dict[str, str]:
    """The minimal base a rented node gives, taken from the operator's environment:
    PATH, HOME, LANG, TERM, USER and swjob's own SWJOB_* settings — nothing else."""
    return {
        name: value
        for name, value in operator_env.items()
        if name in BASE_ENV or name.startswith("SWJOB_")
    }


def node_root(node_id: str) -> Path:
    return cache_dir() / "nodes" / node_id


async def spawn_agent(
    args: Sequence[str],
    *,
    root: Path,
    env: Mapping[str, str],
    launcher: Sequence[str] = (),
    standby: bool = False,
) -> asyncio.subprocess.Process:
    """`swjob-agent ARGS` as a local node in `root` (which exists); a standby gets a pipe
    for its stdin, where its bootstrap will come."""
    stdin = asyncio.subprocess.PIPE if standby else asyncio.subprocess.DEVNULL
    with (root / "agent.log").open("ab") as agent_log:
        return await asyncio.create_subprocess_exec(
            *launcher, sys.executable, "-m", "agent", *args,
            env=dict(env), stdin=stdin, stdout=agent_log, stderr=agent_log,
            start_new_session=True, umask=NODE_UMASK,
        )  # fmt: skip


class StandbyAgent:
    """One agent process waiting for a run; the first local node provisioned takes it.

    Whoever starts it closes it: `close` ends it unless a run took it (then it is that
    node's agent, ended by the provider's teardown like any other)."""

    def __init__(self, process: asyncio.subprocess.Process, root: Path) -> None:
        self.process = process
        self._root = root
        self._taken = False

    @classmethod
    async def start(cls) -> StandbyAgent | None:
        """None when it cannot be started: the run then starts a fresh agent, and if that
        fails too, its failure says why, as the run's."""
        root: Path | None = None
        try:
            root = node_root(f"standby-{secrets.token_hex(4)}")
            root.mkdir(mode=0o700, parents=True)
            env = node_base_env(os.environ)
            process = await spawn_agent([FLAG, str(root)], root=root, env=env, standby=True)
        except OSError as exc:
            log.info("no standby agent: %s", exc)
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)
            return None
        return cls(process, root)

    async def take(
        self, root: Path, args: list[str], secrets_env: dict[str, str]
    ) -> asyncio.subprocess.Process | None:
        """Make it the agent of the node at `root` (which must not exist yet), started
        with `args` and `secrets_env`; None when it cannot be (taken already, or dead)."""
        if self._taken:
            return None
        self._taken = True
        self._root.rename(root)  # before the agent reads its --root: nothing is in it yet
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(bootstrap_line(args, secrets_env))
            await self.process.stdin.drain()
            self.process.stdin.close()
        except OSError:  # it died (the pipe is broken): no node of it
            await self._end(root)
            return None
        except BaseException:  # cancelled: no node of it either, and no leftover
            self._kill()
            shutil.rmtree(root, ignore_errors=True)
            raise
        return self.process

    async def close(self) -> None:
        """End it if no run took it: it has done nothing but import."""
        if not self._taken:
            self._taken = True
            await self._end(self._root)

    async def _end(self, root: Path) -> None:
        self._kill()
        await self.process.wait()
        shutil.rmtree(root, ignore_errors=True)

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
