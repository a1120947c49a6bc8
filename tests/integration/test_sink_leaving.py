"""A node kept warm after its run puts what its collection's upload left out of the sink
once it parked, so nothing is unsaved when it expires unclaimed (agent/warm.py): a real
agent, a minimal orchestrator, a real S3 server (SeaweedFS). The other ways a node ends
itself: its orphan timeout (reliability/test_sink_operator_gone.py), its cap
(test_node_cap.py); an idle-GPU stop is the operator's, through collection
(test_idle_stop.py). Each last upload is bounded: a store that hangs is given up on."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agent.protocol import Park, RunStep, SinkTarget, Step, StepExited, UseSink
from agent.reattach import new_key, public_of
from agent.sink.download import read_manifest
from agent.sink.store import open_store
from agent.sinkhand import SinkHand
from engine.run.warm import PARK_S
from tests.integration.agent_helpers import AgentProc, FakeOrchestrator, kill_leftover_group
from tests.support.s3 import Bucket

pytestmark = pytest.mark.timeout(90)
TOKEN = "join-token-warm-sink-41c0"
EXPIRED = 7  # agent/node.py ExitCode.EXPIRED
SLOW_S = 2.0


async def wrote_out_txt(orch: FakeOrchestrator, sink: SinkTarget) -> None:
    """The joined node, given `sink`, ran a step that wrote its one output, out.txt."""
    await orch.until(lambda: orch.channel is not None)
    await orch.send(UseSink(target=sink))
    await orch.send(RunStep(step=Step.RUN, command="echo 42 > out.txt"))
    await orch.until(lambda: bool(orch.of_type(StepExited)))


async def test_a_node_kept_warm_saves_to_the_sink_before_it_parks(
    tmp_path: Path, s3: Bucket
) -> None:
    orch = await FakeOrchestrator.start(TOKEN)
    root = tmp_path / "node"
    node = await AgentProc.start(orch, root)
    target = s3.target(prefix="results/job/run-1", patterns=["out.txt"])
    try:
        await wrote_out_txt(orch, target)
        # the laptop took the outputs from the node (no upload asked): the sink has none
        await orch.send(Park(keep_warm_s=0.5, warm_id=public_of(new_key())))
        assert await node.exit_code(60) == EXPIRED, node.stderr()
    finally:
        await node.kill()
        await orch.close()
        kill_leftover_group(root)
    assert "outputs saved to the sink before leaving: 1 files" in node.stderr()
    manifest = await read_manifest(open_store(target))
    assert manifest is not None and manifest.complete and set(manifest.files) == {"out.txt"}


async def test_a_slow_last_save_does_not_hold_up_the_park(tmp_path: Path, s3: Bucket) -> None:
    """The engine waits PARK_S for a parked node to end its session; the save before
    parking comes after that end (a store slow to answer, here each connection held
    SLOW_S before it is passed on, cannot make the engine give the park up and destroy the
    node mid-upload), and still completes before the node expires."""
    slow = await SlowProxy.start(s3.server.endpoint, SLOW_S)
    orch = await FakeOrchestrator.start(TOKEN)
    root = tmp_path / "node"
    node = await AgentProc.start(orch, root)
    target = s3.target(prefix="results/job/run-2", patterns=["out.txt"])
    try:
        await wrote_out_txt(orch, target.model_copy(update={"endpoint": slow.endpoint}))
        await orch.send(Park(keep_warm_s=0.5, warm_id=public_of(new_key())))
        async with asyncio.timeout(PARK_S):  # the engine's park completes
            await orch.conn.closed()
        assert await read_manifest(open_store(target)) is None  # the save comes after
        assert await node.exit_code(60) == EXPIRED, node.stderr()
    finally:
        await node.kill()
        await orch.close()
        await slow.close()
        kill_leftover_group(root)
    assert "outputs saved to the sink before leaving: 1 files" in node.stderr()
    manifest = await read_manifest(open_store(target))
    assert manifest is not None and manifest.complete and set(manifest.files) == {"out.txt"}


class SlowProxy:
    """A store slow to answer: each connection waits `delay_s` before it is passed on."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        address = urlsplit(upstream)
        self._upstream = (address.hostname or "127.0.0.1", address.port or 80)
        self._delay_s = delay_s
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    @classmethod
    async def start(cls, upstream: str, delay_s: float) -> SlowProxy:
        proxy = cls(upstream, delay_s)
        proxy._server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
        return proxy

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        await asyncio.sleep(self._delay_s)
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers.append(up_writer)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def close(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def test_a_store_that_hangs_cannot_keep_a_leaving_node(tmp_path: Path, s3: Bucket) -> None:
    """The last upload is bounded (the cap's in seconds): a store that takes the
    connection and never answers is given up on at the bound, said in one line."""
    held: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    target = s3.target(patterns=["out.txt"]).model_copy(
        update={"endpoint": f"http://127.0.0.1:{port}"}
    )
    (tmp_path / "out.txt").write_text("42\n")
    hand = SinkHand(tmp_path, lambda _event: None, lambda coro: coro.close())
    hand.use(target, lambda: False)
    started = time.monotonic()
    said = await hand.save_before_leaving(within=0.5)
    assert said == "outputs not all saved to the sink before leaving: not done in 0.5 s"
    assert time.monotonic() - started < 5 and not hand.whole
    for writer in held:
        writer.transport.abort()
    server.close()
