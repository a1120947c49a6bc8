"""`swjob stop RUN`: the operator's stop, from any terminal, for a run any swjob process of
this user drives — or one nobody drives any more (its swjob died): that one is taken over
here and stopped, so its node is torn down either way."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from engine.errors import one_line
from engine.jobs.pools import PoolSet
from engine.report.views import RunView
from engine.run.liveaccess import ask_stop, driven
from engine.run.liveops import LiveUnavailable
from engine.state.store import Store

WAIT_POLL_S = 0.2


class StopError(Exception):
    """Why a run could not be stopped, in one line."""


async def stop_run(view: RunView, pools: PoolSet, wait_s: float = 900.0) -> RunView:
    """Stop `view`'s run and return it once it has ended (its node torn down). A run already
    over is returned as it is. StopError when it cannot be stopped, or does not end within
    `wait_s` (a provider slow to confirm a teardown: the run still ends, later)."""
    if view.finished is not None:
        return view
    if driven(view.run_id):
        try:
            await ask_stop(view.run_id)
        except LiveUnavailable as exc:
            raise StopError(str(exc)) from None
        return await _ended(view.run_id, wait_s)
    return await _take_over_and_stop(view, pools, wait_s)


async def _take_over_and_stop(view: RunView, pools: PoolSet, wait_s: float) -> RunView:
    from engine.engine import Engine, EngineConfig, SubmitError

    engine = Engine(EngineConfig(runs_dir=Path(view.run_dir).parent.parent, pools=pools))
    await engine.start()
    try:
        try:
            taken = await engine.adopt(view.run_id)
        except SubmitError as exc:
            raise StopError(one_line(exc)) from None
        if not taken:  # a swjob process took it meanwhile: ask that one
            if driven(view.run_id):
                await ask_stop(view.run_id)
                return await _ended(view.run_id, wait_s)
            raise StopError(f"run {view.run_id} could not be taken over to stop it")
        await engine.stop(view.run_id)
        return await engine.wait(view.run_id)
    finally:
        await engine.close(stop_running=True)


async def _ended(run_id: str, wait_s: float) -> RunView:
    """The run as the index holds it once it has ended."""
    deadline = time.monotonic() + wait_s
    store = Store()
    try:
        while True:
            view = store.find(run_id)
            if view is not None and view.finished is not None:
                return view
            if time.monotonic() > deadline:
                raise StopError(f"run {run_id} was asked to stop but has not ended yet")
            await asyncio.sleep(WAIT_POLL_S)
    finally:
        store.close()
