"""Who drives a run: one live owner at most, visible to every process on the machine.

The model
---------
A run is driven by exactly one engine process at a time — its *owner* — or by none.
Ownership is a lease: an exclusive `fcntl.flock` on the run's lock file in the state
dir (`leases/<run id>.lock`), taken when the engine starts driving the run and held
until the run is over. The kernel drops the lock when the owner dies, however it dies
(kill -9 included), so "the owner is gone" needs no heartbeat, pid file or clock: a
lock that can be taken has no owner.

- `swjob run` owns the run it submits, and only that one. It never adopts, stops or
  even looks at another run, so two operators (or two terminals) never touch each
  other's runs, and `swjob run` ends when its run ends.
- `swjob-tui` and `swjob attach RUN` *adopt*: they take the lease of an unfinished
  run whose owner is gone (all such runs, or the one named) and carry it to its end.
  Adoption does not depend on who the dead owner was — its iroh identity, or the pool
  name it used (the run keeps its pool definition in the store): the node is
  re-pointed at the adopter with the run's re-attach credential (agent/reattach.py).
- A run with a live owner is followed read-only (its events.jsonl) and never touched:
  not adopted, not stopped, not collected by `swjob gc`.
- `swjob gc` treats an unfinished run without a live owner as abandoned: it lists its
  node (hint: `swjob attach RUN`) and, when told to, holds the lease while it destroys
  the node and marks the run FAILED, so no adopter races it. A run the index does not
  hold yet (its row kept beside it, engine/state/spill.py, or not written: the index
  held by another process) is never collected: its owner is live (`live_runs`), or an
  adopter carries it on from its kept row.
- A node whose run nobody adopts stops by itself after its orphan timeout.

The lease is taken before the store is read for the run's state, and an adopter
checks the run is still unfinished after taking it, so a run that ended between the
two is left alone. The lock file of a finished run is removed by its last owner.

A lock file can be deleted under its owner (a careless `rm -rf` of the leases, a job on
the local pool running as the operator): the owner still holds its lock, on a file no
one can open, and the next `acquire` takes a fresh one — the run read as abandoned, and
gc destroyed a live run's node. So the owner also stamps the run's row in the run index
with its pid and that process's start time (`me`); a run whose stamp names a live
process (`alive`: the same pid *and* start, so a recycled pid is no owner) is owned
whatever the leases folder holds, and neither adopted nor collected.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from agent.procgroup import started_at
from engine.state import spill
from engine.state.paths import state_dir
from engine.state.planted import Planted, own_subdir

if TYPE_CHECKING:
    from engine.report.views import RunView


def _lease_path(run_id: str) -> Path:
    return own_subdir(state_dir() / "leases") / f"{run_id}.lock"


class Lease:
    """A held lease on one run; `release` (or the process's death) gives it up."""

    def __init__(self, run_id: str, handle: IO[bytes]) -> None:
        self.run_id = run_id
        self._handle = handle

    def release(self, *, finished: bool = False) -> None:
        """Give the run up; `finished` also removes the lock file (nobody will adopt it)."""
        if self._handle.closed:
            return
        if finished:
            with contextlib.suppress(OSError):
                _lease_path(self.run_id).unlink()
        with contextlib.suppress(OSError):
            fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()


def acquire(run_id: str) -> Lease | None:
    """Take the run's lease, or None when a live process holds it (this one included)."""
    fd = os.open(_lease_path(run_id), os.O_RDWR | os.O_CREAT, 0o600)
    handle = os.fdopen(fd, "r+b")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return Lease(run_id, handle)


def has_live_owner(run_id: str) -> bool:
    """True when some live process (this one included) holds the run's lease."""
    lease = acquire(run_id)
    if lease is None:
        return True
    lease.release()
    return False


def live_runs() -> set[str]:
    """Every run some live process holds the lease of, whether the index holds its row or
    not: a run's row may not be in yet (another process holding the index's lock since
    before it started, or it was adopted from its kept row), and gc counted only indexed
    runs as owned, destroying such a run's node under its owner's feet."""
    try:
        names = os.listdir(state_dir() / "leases")
    except OSError:
        return set()
    owned = set()
    for run_id in (n.removesuffix(".lock") for n in names if n.endswith(".lock")):
        try:
            if has_live_owner(run_id):
                owned.add(run_id)
        except Planted:  # the leases folder itself is not ours (a link): it may be held
            owned.add(run_id)
        except OSError:  # not a lock file of ours (a directory): no owner
            pass
    return owned


def owned(index: Path, recorded: Iterable[tuple[RunView, dict[str, Any]]] = ()) -> set[str]:
    """The runs gc must never treat as abandoned: those some live process drives (its
    lease held, whether or not the index holds their row, or its owner's stamp in the
    `recorded` rows naming another live process), and those whose row is kept beside `index`
    (engine/state/spill.py: to be written in, then adopted)."""
    stamped = {view.run_id for view, saved in recorded if elsewhere(saved.get(OWNER))}
    return live_runs() | stamped | set(spill.kept(index))


OWNER = "owner"  # the key of the owner's stamp in a run's recovery facts


def me() -> dict[str, float]:
    """This process as a run's owner: its pid and start time (see the module's end)."""
    pid = os.getpid()
    return {"pid": pid, "started": _started(pid)}


@functools.cache
def _started(pid: int) -> float:
    """This process's start time, read once (by pid: a fork is another process). Every
    run's start asked it, on the loop, and each time psutil read two files of /proc."""
    return started_at(pid)


def alive(stamp: object) -> bool:
    """The process a stamp names still runs: the same pid, started at the same time."""
    if not isinstance(stamp, dict):
        return False
    pid, started = stamp.get("pid"), stamp.get("started")
    if type(pid) is not int or pid <= 0 or not isinstance(started, int | float):
        return False
    now = started_at(pid)
    return now != 0.0 and (started == 0.0 or abs(now - started) < STARTED_SLACK_S)


STARTED_SLACK_S = 0.01


def elsewhere(stamp: object) -> bool:
    """The stamp names a live process other than this one: the run's owner, whose lock
    file is gone. (This process's own engines hold their leases by their open files.)"""
    return alive(stamp) and isinstance(stamp, dict) and stamp.get("pid") != os.getpid()
