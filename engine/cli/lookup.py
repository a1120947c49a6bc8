"""A run named on the command line (`swjob logs|attach|shell|forward RUN`): by id, a
unique start of it, or the short id the console shows, read from a store opened only for
the lookup, and the one message every such command gives when nothing matches."""

from __future__ import annotations

from engine.report.views import RunView
from engine.state.store import Store


def find_run(run_ref: str) -> RunView | None:
    store = Store()
    try:
        return store.find(run_ref) or store.kept_view(run_ref)
    finally:
        store.close()


def no_such_run(run_ref: str) -> str:
    return f"no run {run_ref!r} (or more than one run matches it)"
