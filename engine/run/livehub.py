"""The engine's live operations on running nodes: shells, forwarded ports, local access.

One hub per engine. It decides whether a run may be reached (driven here, not over,
its node joined), adds what only the engine knows (the job's env for a shell), keeps
the console's forwarded ports, and announces each live run to other processes of
the same user through the local access point (engine/run/liveaccess.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.livewire import Duplex, ForwardOpen, ShellOpen
from engine.run.forward import Forward
from engine.run.fsm import OperatorStop
from engine.run.liveaccess import LiveAccess, stream_duplex
from engine.run.liveops import LiveRequest, LiveStream, LiveUnavailable

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver

__all__ = ["Forward", "LiveHub", "LiveUnavailable"]


class LiveHub:
    def __init__(self, driver_of: Callable[[str], RunDriver | None]) -> None:
        self._driver_of = driver_of
        self.access = LiveAccess(self.open, self.stop)
        self._forwards: list[Forward] = []

    async def start(self) -> None:
        await self.access.start()

    def run_started(self, run_id: str) -> None:
        self.access.publish(run_id)

    async def run_ended(self, run_id: str) -> None:
        """The node is gone: its access file goes, and so do its forwarded ports."""
        self.access.withdraw(run_id)
        for forward in [f for f in self._forwards if f.run_id == run_id]:
            await self.stop_forward(forward)

    async def close(self) -> None:
        for forward in tuple(self._forwards):
            await self.stop_forward(forward)
        await self.access.close()

    def _live_driver(self, run_id: str) -> RunDriver:
        driver = self._driver_of(run_id)
        if driver is None:
            raise LiveUnavailable(f"run {run_id} is not driven by this swjob process")
        if driver.view.terminal:
            raise LiveUnavailable(f"run {run_id} is over ({driver.view.state}): no node to reach")
        if not driver.session.joined.is_set():
            raise LiveUnavailable(f"run {run_id} has no node yet ({driver.view.phase})")
        return driver

    def stop(self, run_id: str) -> None:
        """The operator's stop asked from another process (`swjob stop`): as the driving
        process's own Ctrl-C or the console's `s` would."""
        driver = self._driver_of(run_id)
        if driver is None:
            raise LiveUnavailable(f"run {run_id} is not driven by this swjob process")
        if not driver.view.stoppable:
            raise LiveUnavailable(f"run {run_id} is past stopping ({driver.view.state})")
        driver.post(OperatorStop())

    async def open(self, run_id: str, request: LiveRequest) -> LiveStream:
        """A stream to the run's node for `request` (a shell gets the job's env)."""
        driver = self._live_driver(run_id)
        if isinstance(request, ShellOpen):
            request = request.model_copy(update={"env": dict(driver.job.env)})
        return await driver.session.live.open(request)

    async def forward(self, run_id: str, remote_port: int, local_port: int = 0) -> Forward:
        """Listen on 127.0.0.1:`local_port` (0: any free port) and pipe every connection to
        `remote_port` on the node. OSError when the local port is taken."""
        self._live_driver(run_id)
        if not 1 <= remote_port <= 65535:
            raise LiveUnavailable(f"port {remote_port} is not a TCP port (1-65535)")
        if not 0 <= local_port <= 65535:
            raise LiveUnavailable(f"local port {local_port} is not a TCP port (1-65535)")
        request = ForwardOpen(port=remote_port)
        forward = Forward(run_id=run_id, remote_port=remote_port, local_port=local_port)

        async def connect() -> Duplex:
            return stream_duplex(await self.open(run_id, request))

        await forward.start(connect)
        self._forwards.append(forward)
        return forward

    def forwards(self, run_id: str | None = None) -> list[Forward]:
        return [f for f in self._forwards if run_id is None or f.run_id == run_id]

    async def stop_forward(self, forward: Forward) -> None:
        if forward in self._forwards:
            self._forwards.remove(forward)
        await forward.close()
