"""A run named on the command line (`swjob logs|attach|shell|forward|stop RUN`): by id, a
unique start of it, or the short id the console shows, read from a store opened only for
the lookup, and the one message every such command gives when that names no single run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine.report.views import RunView
from engine.state.store import Store

if TYPE_CHECKING:
    from engine.jobs.pools import PoolSet

SHOWN_CANDIDATES = 10


def find_run(run_ref: str) -> RunView | None:
    store = Store()
    try:
        return store.find(run_ref) or store.kept_view(run_ref)
    finally:
        store.close()


def no_such_run(run_ref: str) -> str:
    """Why `run_ref` names no run: none matches it, or several do — then which, so the
    user can copy the one they meant."""
    store = Store()
    try:
        found = store.matching(run_ref)
    finally:
        store.close()
    if len(found) < 2:
        return f"no run {run_ref!r}"
    listed = ", ".join(f"{v.run_id} ({v.job_name}, {v.state})" for v in found[:SHOWN_CANDIDATES])
    more = f" and {len(found) - SHOWN_CANDIDATES} more" if len(found) > SHOWN_CANDIDATES else ""
    return f"{run_ref!r} matches {len(found)} runs: {listed}{more}; give more of the id"


def run_pools(path: Path | None) -> PoolSet:
    """The pools for carrying on a run named on the command line (`attach`, `stop`): the
    pools file's, or the builtins when it is broken — the run keeps its own pool's
    definition, and a broken file must leave no node behind."""
    from engine.jobs.pools import BUILTIN_LOCAL, PoolFileError, PoolSet, load_pools

    try:
        return load_pools(path)
    except PoolFileError as exc:
        print(f"warning: {exc}; the run goes on with the pool it keeps", file=sys.stderr)
        return PoolSet({"local": BUILTIN_LOCAL})
