"""A big output in the sink: fixed-size part objects, each verified, listed by the manifest.

Why not one S3 multipart upload: obstore (the one store client, on both sides) runs a
multipart upload inside one call and keeps its upload id to itself; a node killed, or
cut off, mid-way loses it, and the next try sends the whole file again. So a big file
goes as part objects `parts/<path>/<index>` beside `outputs/`, each one request whose
MD5 ETag proves its bytes; the store's own listing then says which parts it holds,
whoever asks (the same agent retrying, a restarted one, the next live sync), and only
the parts it lacks, or holds with other bytes, are sent. The manifest's row for the file
names the part size; readers (agent/sink/download.py: the laptop's landing, `swjob
pull`, a next attempt's seed) fetch the parts, in parallel, and check the whole file's
SHA-256.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from agent.transfer.safety import check_relpath

PARTS = "parts"
MOST_PARTS = 100_000
"""A manifest naming more parts than this for one file is refused: a stranger's manifest
must not make a reader send a request per byte."""


def part_key(path: str, index: int) -> str:
    """Part `index` of output `path`, under the run's prefix, beside `outputs/`: no output
    path can name it."""
    return f"{PARTS}/{check_relpath(path)}/{index:06d}"


def part_count(size: int, part_size: int) -> int:
    return max(1, -(-size // part_size))


def parse_part_key(key: str) -> tuple[str, int] | None:
    """`parts/<path>/<index>` → (path, index); None for any other key."""
    path, _, index = key.removeprefix(f"{PARTS}/").rpartition("/")
    return (path, int(index)) if path and index.isdigit() else None


@contextlib.asynccontextmanager
async def at_once() -> AsyncIterator[asyncio.TaskGroup]:
    """A task group whose first failure cancels the rest and is raised as itself (not as
    an exception group): one part that will not go is the file's one reason."""
    try:
        async with asyncio.TaskGroup() as group:
            yield group
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
