"""A container restart is a recoverable event: the node comes back as the same node.

Vast restarts a container on its own (a host reboot, PID 1 killed for memory): its
processes die, its disk stays, and its on-start command runs again — a second agent with
the same run, join token and command line. Before, the operator refused it ("join token
already used": the token was good for one endpoint id, and a new process had a new one)
and the run failed a minute later, its node destroyed with the files on its disk.

So what proves the node is kept on the node's own disk, in its state dir: the agent's
iroh secret key (`endpoint.key`, 0600, made on the first start). A restarted agent binds
the same endpoint id, and the operator admits it as the node that joined — a rejoin, as
after a dropped connection. It dials the orchestrator it last obeyed (`target.json`: an
adopter that took the run over, not the one on its command line) and replays its journal.
A step that was running when the container went (its record, `step.pgid`, is still
there) is said in a NodeFault starting with `RESTARTED`: the operator pulls what the
node has and ends the run as a node failure, which a next attempt may cure.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from iroh import iroh_ffi

from agent import procgroup
from agent.reattach import Target

RESTARTED = "container restarted"
KEY_FILE, TARGET_FILE = "endpoint.key", "target.json"
KEY_BYTES = 32


def node_key(state_dir: Path) -> bytes:
    """The node's endpoint key: the one an earlier start of this node left, else a new one
    (kept for the next start)."""
    path = state_dir / KEY_FILE
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            key = handle.read(KEY_BYTES + 1)
        if len(key) == KEY_BYTES:
            return key
    key = iroh_ffi.SecretKey.generate().to_bytes()
    with contextlib.suppress(OSError):  # unkept, a restart is refused as before: no worse
        _write(path, key)
    return key


def saved_target(state_dir: Path, given: Target) -> Target:
    """The orchestrator this node last obeyed, else `given` (its command line's)."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        fd = os.open(state_dir / TARGET_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            said = json.loads(handle.read(64 * 1024))
        return Target(str(said["orchestrator_id"]), str(said["ticket"]))
    return given


def save_target(state_dir: Path, target: Target) -> None:
    """Remember an adopter for a restart; a failure only costs that (the run's resume)."""
    body = {"orchestrator_id": target.orchestrator_id, "ticket": target.ticket}
    with contextlib.suppress(OSError):
        _write(state_dir / TARGET_FILE, json.dumps(body).encode())


def interrupted(state_dir: Path, record_name: str) -> str | None:
    """When an earlier start of this agent left a step recorded as running, what is left of
    it is killed (only with proof it is the step's: procgroup) and the fault to report is
    returned; None on a first start or after a clean one."""
    record = state_dir / record_name
    if not record.exists():
        return None
    procgroup.kill_recorded_step_now(record)
    with contextlib.suppress(OSError):
        record.unlink()
    return f"{RESTARTED}: the step it ran was interrupted (its processes did not survive)"


def _write(path: Path, data: bytes) -> None:
    """`data` at `path`, 0600, in a fresh file: never through a link planted there. A
    file torn by a crash reads as none (a new key, the command line's target)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o600), "wb") as handle:
        handle.write(data)
