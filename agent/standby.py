"""An agent started before its run exists: it imports, then waits for the run's bootstrap.

Most of a local node's start is the agent's imports (pydantic, iroh, asyncio and ours),
and most of `swjob run`'s own start is the operator's. Run one after the other they
added up; an agent started in standby (`swjob-agent --standby DIR`) does its imports
while the operator does its own, then reads one JSON line on its stdin — the command
line it would have been started with, and the run's secrets (only those agent/main.py
takes from its environment) — and goes on as if started so. This module imports next
to nothing: the operator imports it before anything else.

End of file instead of a line means the operator needed no node after all, or died:
the standby removes DIR (its own directory, which held only its log) and exits 0. So
a standby never outlives the operator that started it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TextIO

FLAG = "--standby"


def await_bootstrap(
    directory: Path, stream: TextIO = sys.stdin
) -> tuple[list[str], dict[str, str]] | None:
    """Block until the bootstrap line arrives: its argv and its secrets (environment
    names and values). None, with `directory` removed, at end of file."""
    line = stream.readline()
    if not line:
        shutil.rmtree(directory, ignore_errors=True)
        return None
    bootstrap = json.loads(line)
    argv = [str(arg) for arg in bootstrap["argv"]]
    return argv, {str(name): str(value) for name, value in bootstrap["env"].items()}


def bootstrap_line(argv: list[str], env: dict[str, str]) -> bytes:
    """What the operator writes to a standby agent: the inverse of `await_bootstrap`."""
    return json.dumps({"argv": argv, "env": env}).encode() + b"\n"
