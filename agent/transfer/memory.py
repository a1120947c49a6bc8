"""Large transfer buffers go back to the OS when freed, instead of lingering in malloc's arenas.

glibc serves an allocation above its mmap threshold with a mapping of its own and unmaps
it on free, but it raises that threshold to the size of each such block freed (up to
32 MiB). After the first few packets every batch body, compressed payload and joined
chunk is then carved from the arena of the worker thread that built it, and with a
packet builder per stream those arenas keep tens of MB each between packets (the
operator's peak RSS on a site-packages push: 212 MB; 164 MB with the threshold pinned).
Pinning it just above a chunk keeps the 1 MiB pieces in the heap, where they are reused
without page faults, and sends only the larger buffers to mmap (pinning it at 1 MiB
saves more memory but costs ~15 % more CPU in page faults). Elsewhere than glibc
(macOS, musl) there is nothing to pin.

Pinning the mmap threshold also freezes glibc's trim threshold at 128 KiB, so the heap
was handed back to the OS after nearly every chunk and faulted in again for the next:
on a VM whose host reclaims freed guest memory, each fresh page costs a host fault too.
Keeping up to `TRIM` (two chunks) of free heap cut the operator's CPU in a 1 GiB push
(tree a, loopback) from 4.1-4.25 to 3.7 s. More buys little and costs memory: each
packing thread's arena may keep that much, and at 32 MiB the operator's peak RSS on a
site-packages push (tree c) rose from ~155 to 191-206 MB; at 8 MiB, 166-176 MB.

glibc also gives each thread an arena of its own (up to eight a core), and each keeps
its freed blocks and up to `TRIM` of free heap: at the operator's peak in a tree c push,
51 MB of its 120 MB of arenas were free. The packing threads allocate under the GIL (a
file read's bytes, a compressed payload), so arenas of their own buy them nothing. With
one (`ARENAS`) the operator's peak RSS fell from 144 to 119 MB on tree a, from 167 to
154 MB on tree c (loopback) and from 187 to 170 MB over 100 Mbit, its CPU no higher
(medians of 3, taking turns). A thread that has its arena keeps it, so the cap is set
before the operator starts threads (`Engine.start`, ahead of the binding's runtime; set
after them, it saved nothing on tree a). The agent keeps glibc's arenas (`share_one_arena`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Awaitable, Callable, Iterator
from functools import cache, wraps
from typing import ParamSpec, TypeVar

from agent.transfer.schedule import CHUNK

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's mallopt numbers
THRESHOLD = CHUNK + 64 * 1024
TRIM = 2 * CHUNK
ARENAS = 1  # new threads share the existing arenas


@cache
def pin_malloc() -> None:
    """Pin glibc's mmap and trim thresholds for this process (once; a no-op without glibc)."""
    if (mallopt := _mallopt()) is not None:
        mallopt(M_MMAP_THRESHOLD, THRESHOLD)
        mallopt(M_TRIM_THRESHOLD, TRIM)


@cache
def share_one_arena() -> None:
    """Cap glibc's arenas for this process: the operator's, whose peak memory in a push is
    a goal. Not the agent's: its writer threads land bytes outside the GIL, where one
    arena would have them wait on each other's allocations on a many-core node (on these
    2 cores its CPU in a 1 GiB push was 5.2 s either way)."""
    if (mallopt := _mallopt()) is not None:
        mallopt(M_ARENA_MAX, ARENAS)


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's `mallopt`, or None elsewhere (macOS, musl: nothing to tune)."""
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


RELAXED_GEN0 = 50_000  # allocations between young collections while a transfer runs
_relaxed = {"depth": 0, "saved": (700, 10, 10)}
_relaxed_lock = threading.Lock()


@contextlib.contextmanager
def relaxed_gc() -> Iterator[None]:
    """Run the cyclic garbage collector rarely while a transfer of many files runs.

    A transfer of many small files allocates a few tracked objects a file (its entry,
    its record, its landed state) and keeps many: at CPython's default threshold (a young
    collection every 700 allocations, a full one every ~100 young ones while the heap
    grows) the collector walked every object the process holds over and over — 2.6 s of
    the operator's 9.3 s of CPU pulling 100,000 small outputs. Nothing a transfer makes is
    cyclic garbage, so collections are spaced out while one runs (nested and concurrent
    transfers share one setting; the last one out restores the process's thresholds)."""
    with _relaxed_lock:
        if _relaxed["depth"] == 0:
            _relaxed["saved"] = gc.get_threshold()
            gc.set_threshold(RELAXED_GEN0, *_relaxed["saved"][1:])
        _relaxed["depth"] += 1
    try:
        yield
    finally:
        with _relaxed_lock:
            _relaxed["depth"] -= 1
            if _relaxed["depth"] == 0:
                gc.set_threshold(*_relaxed["saved"])


P = ParamSpec("P")
T = TypeVar("T")


def relaxing_gc(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """`relaxed_gc` around a coroutine function (a push, a pull)."""

    @wraps(fn)
    async def relaxed(*args: P.args, **kwargs: P.kwargs) -> T:
        with relaxed_gc():
            return await fn(*args, **kwargs)

    return relaxed
