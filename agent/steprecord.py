"""The record an agent keeps of its running step, for whoever cleans up after it dies.

While a step runs the agent keeps `state/step.pgid`, one JSON line:
`{"pgid": 4242, "marker": "SWJOB_STEP_ID=<16 hex>", "started": 1764810000.12}`.
A group id alone proves nothing once the agent is dead: with pid_max at 32768, pids (and
so process-group ids) come round again within minutes, and nobody holds the step's leader
any more to keep its number from being reused. The marker (in the environment of
everything the step started) and the leader's start time are what let a later reader
tell what is left of the step from an unrelated group that got the same number
(agent/procgroup.py `kill_recorded_step_now`).

The job runs as the same user and may put anything at that path: another format, a
FIFO, a directory, a link to /dev/zero. `read` returns None for whatever is not exactly
a record this module wrote, without blocking and without reading more than a line;
`write` follows no link the job planted (at the path or as its directory): it never
writes through one into a file the job chose.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from agent.fdio import write_all

STEP_ENV = "SWJOB_STEP_ID"  # a fresh value per step, inherited by everything it starts
MAX_BYTES = 256  # a record is under 100 bytes
_MARKER = re.compile(rf"{STEP_ENV}=[0-9a-f]{{16}}")
_PGID_LIMIT = 2**31  # pid_t: a larger number is no process group (and overflows killpg)


def new_marker() -> str:
    """A fresh `STEP_ENV=<value>` for one step: 64 random bits, carried by nothing else.

    Only this shape is accepted back from a record, so a hostile record cannot name a
    marker that unrelated processes carry (`HOME=/root`, say)."""
    return f"{STEP_ENV}={secrets.token_hex(8)}"


@dataclass(frozen=True)
class StepRecord:
    pgid: int  # the step's process group: its leader's pid (it runs in its own session)
    marker: str  # STEP_ENV=<value>, as it appears in /proc/<pid>/environ
    started: float  # the leader's start (procgroup.started_at); 0.0 when it was unknown

    def line(self) -> str:
        return json.dumps(asdict(self)) + "\n"


def write(path: Path, record: StepRecord) -> None:
    """Put `record` at `path`, mode 0600, following no link: a fresh file (O_EXCL, under a
    random name) in `path`'s directory, opened without following that directory if it is
    a link, is renamed over `path` — which replaces whatever is there, a planted link
    included, and leaves its target untouched. A reader sees the old record or the new
    one, never half of one. Raises OSError (nothing is left behind then)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    folder = os.open(path.parent, flags)
    try:
        temp = f".{path.name}.{secrets.token_hex(8)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600, dir_fd=folder)
        try:
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                write_all(fd, record.line().encode())
            finally:
                os.close(fd)
            os.replace(temp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def read(path: Path) -> StepRecord | None:
    """The record at `path`, or None: missing, not a regular file, too long, or not a
    record of the shape `StepRecord.line` writes (the old bare-pgid format included)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would block a plain read
            return None
        raw = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse(raw) if len(raw) <= MAX_BYTES else None


def parse(raw: bytes) -> StepRecord | None:
    """`raw` as a record if it is exactly one, else None."""
    try:
        data = json.loads(raw)
    except ValueError:  # not UTF-8, not JSON
        return None
    if not isinstance(data, dict) or data.keys() != {"pgid", "marker", "started"}:
        return None
    pgid, marker, started = data["pgid"], data["marker"], data["started"]
    if type(pgid) is not int or not 1 < pgid < _PGID_LIMIT:  # 1 is init; bool is no pgid
        return None
    if not isinstance(marker, str) or _MARKER.fullmatch(marker) is None:
        return None
    if type(started) not in (int, float) or not math.isfinite(started) or started < 0:
        return None
    return StepRecord(pgid, marker, float(started))
