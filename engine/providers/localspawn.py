"""Starting a local node's agent process: forked by the fork server, or started afresh.

A local node is as bare as a rented one: the agent (and so the job) gets a minimal
environment — never the operator's, which holds API keys — the usual umask 022, its own
session (Ctrl-C and a closed terminal reach the operator, which decides), its node
directory as its working directory and its output in that directory's agent.log.

Most of an agent's start is its imports, so a node's agent is normally forked by the
operator's fork server (engine/providers/forkserver.py), which did them once; `warm`
starts that server ahead of the first node, so its imports overlap the caller's own.
An agent is started afresh only where a fork cannot do: behind a launcher (`ip netns
exec`), or when the server is not running. This module imports little on purpose: it
is imported before the engine.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from engine.providers import forkserver
from engine.state.paths import cache_dir

log = logging.getLogger("swjob.local")

BASE_ENV = ("PATH", "HOME", "LANG", "TERM", "USER")
"""What a local node keeps of the operator's environment (plus the SWJOB_* knobs)."""
NODE_UMASK = 0o022


def node_base_env(operator_env: Mapping[str, str]) -> dict[str, str]:
    """The minimal base a rented node gives, taken from the operator's environment:
    PATH, HOME, LANG, TERM, USER and swjob's own SWJOB_* settings — nothing else. (Only
    the kept names' values are looked up: `os.environ` decodes each one it hands out,
    and this runs twice per local node — half the time with forty variables.)"""
    keep = [name for name in operator_env if name in BASE_ENV or name.startswith("SWJOB_")]
    return {name: operator_env[name] for name in keep}


def node_root(node_id: str) -> Path:
    return cache_dir() / "nodes" / node_id


def fork_server() -> forkserver.ForkServer:
    """This process's fork server, started now (with a node's bare environment) if none
    is running. Raises OSError when it cannot be started, ForkServerGone where there is
    to be none (off Linux, or after a refusal)."""
    return forkserver.shared(node_base_env(os.environ), NODE_UMASK)


def warm() -> None:
    """Start the fork server ahead of the first local node, if it can be (that node
    starts its agent afresh otherwise, and its failure, if any, says why)."""
    try:
        fork_server()
    except (OSError, forkserver.ForkServerGone) as exc:
        log.info("no fork server: %s", exc)


async def spawn_agent(
    args: Sequence[str], *, root: Path, env: Mapping[str, str], launcher: Sequence[str] = ()
) -> asyncio.subprocess.Process:
    """`swjob-agent ARGS`, started afresh as a local node in `root` (which exists)."""
    with (root / "agent.log").open("ab") as agent_log:
        return await asyncio.create_subprocess_exec(
            *launcher, sys.executable, "-m", "agent", *args,
            env=dict(env), cwd=root, stdin=asyncio.subprocess.DEVNULL, stdout=agent_log,
            stderr=agent_log, start_new_session=True, umask=NODE_UMASK,
        )  # fmt: skip
