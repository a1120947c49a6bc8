"""A shell on the node is an open session from its fork on (agent/shell.py).

A step's end sweeps every child of the agent that `session_pids()` does not name
(agent/subreaper.py). The shell was started through asyncio, which awaits between the
fork and its return: a step ending in that gap — a shell opened during a short setup, on
a busy machine — swept the operator's shell as setup's leftover (seen once in a stress
round of two suites at once)."""

from __future__ import annotations

import asyncio

import psutil

from agent import shell
from agent.livewire import Reader, ShellOpen


class _Silent:
    """The operator's side: sends nothing until the test is done."""

    def __init__(self) -> None:
        self.done = asyncio.Event()

    async def read(self, size_limit: int) -> bytes:
        await self.done.wait()
        return b""


class _Sink:
    async def write_all(self, buf: bytes) -> None:
        return None

    async def finish(self) -> None:
        return None


async def test_a_shell_is_an_open_session_before_the_loop_turns_again(tmp_path) -> None:
    me = psutil.Process()
    before = {child.pid for child in me.children()}
    operator = _Silent()
    opened = asyncio.create_task(shell.run_shell(ShellOpen(), Reader(operator), _Sink(), tmp_path))
    try:
        seen: set[int] = set()
        for _ in range(200):  # every turn a step's sweep could take
            await asyncio.sleep(0)
            new = {child.pid for child in me.children()} - before
            assert new <= shell.session_pids(), "a forked shell not yet an open session"
            seen |= new
            if seen:
                break
        assert seen, "no shell was started"
    finally:
        operator.done.set()
        await asyncio.wait_for(opened, 30)
    assert not shell.session_pids()
