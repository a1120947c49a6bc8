"""How a transferring process holds its memory: what the peak-RSS bench cannot pin alone.

Each check runs in a fresh interpreter, since glibc's arenas are made as a process's
threads first allocate and last as long as it does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent.transfer.schedule import STREAMS
from agent.transfer.sender import PACKER
from engine.run.transfer import push_workspace
from tests.integration.transfer_harness import loopback_pair

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="glibc's arenas"),
    pytest.mark.timeout(60),
]

ARENAS = """
import asyncio, ctypes, os, sys, tempfile, threading
from agent import endpoint
from agent.transfer.memory import share_one_arena

def heaps():
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    with tempfile.NamedTemporaryFile() as out:
        fp = libc.fopen(out.name.encode(), b"w")
        libc.malloc_info(0, ctypes.c_void_p(fp))
        libc.fclose(ctypes.c_void_p(fp))
        return out.read().count(b"<heap nr=")

async def main():
    if sys.argv[1] == "operator":
        share_one_arena()  # as Engine.start does, before any thread
    ep = await endpoint.bind(accept=False)
    together = threading.Barrier(5)
    def allocate():  # each thread allocates while all are alive: its own arena if allowed
        held = [bytes(1000 + i) for i in range(100)]
        together.wait()
        del held
    threads = [threading.Thread(target=allocate) for _ in range(4)]
    for thread in threads:
        thread.start()
    together.wait()
    for thread in threads:
        thread.join()
    await asyncio.to_thread(lambda: [bytes(1000) for _ in range(100)])
    print("heaps", heaps())
    await ep.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("side", ["operator", "agent"])
def test_the_operator_keeps_one_malloc_arena_for_all_its_threads_the_agent_does_not(
    side: str,
) -> None:
    """The operator's threads — the binding's runtime, the packers — all allocate from one
    arena: each arena of its own kept up to 8 MiB of free heap. The agent's writer threads
    allocate outside the GIL: one arena would make them wait on each other."""
    out = subprocess.run(
        [sys.executable, "-c", ARENAS, side], capture_output=True, text=True, timeout=60, check=True
    )
    word, heaps = out.stdout.split()
    assert word == "heaps" and (int(heaps) == 1) == (side == "operator"), out.stdout + out.stderr


async def test_a_push_packs_in_one_thread_a_core_at_most_one_a_stream(tmp_path: Path) -> None:
    """Packets are built in the packers' threads, never more than cores or streams: each
    thread keeps its own zstd contexts (several MB at level 6)."""
    src, node = tmp_path / "src", tmp_path / "node"
    for d in range(4):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(48):  # ~24 MiB of text: several 4 MiB runs for every stream
            (src / f"d{d}" / f"f{i}.py").write_bytes(b"def f%d(x):\n    return x\n" % i * 5000)
    async with loopback_pair(node) as link:
        await push_workspace(link, src, [], lambda p: None)
    packers = [t for t in threading.enumerate() if t.name.startswith(PACKER)]
    assert 1 <= len(packers) <= min(STREAMS, len(os.sched_getaffinity(0)))
