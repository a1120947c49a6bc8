"""How a transferring process holds its memory: what the peak-RSS bench cannot pin alone.

Each check runs in a fresh interpreter, since glibc's arenas are made as a process's
threads first allocate and last as long as it does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="glibc's arenas")

ARENAS = """
import asyncio, ctypes, os, tempfile, threading
from agent import endpoint

def heaps():
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    with tempfile.NamedTemporaryFile() as out:
        fp = libc.fopen(out.name.encode(), b"w")
        libc.malloc_info(0, ctypes.c_void_p(fp))
        libc.fclose(ctypes.c_void_p(fp))
        return out.read().count(b"<heap nr=")

async def main():
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


def test_a_bound_process_keeps_one_malloc_arena_for_all_its_threads() -> None:
    """The binding's runtime threads and the packing threads started after `bind` all
    allocate from the one arena: each arena of its own kept up to 8 MiB of free heap."""
    out = subprocess.run(
        [sys.executable, "-c", ARENAS], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["heaps", "1"], out.stdout + out.stderr
