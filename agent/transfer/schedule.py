"""Which records go on which stream: the plan both push and pull execute.

Small things (directories, links, files up to `LARGE_MIN`) travel in walk order, in
runs of about `BATCH_TARGET` bytes that become batches; large files are cut into
`CHUNK`-sized pieces. Runs and chunks alike are dealt round-robin over all streams, so
one big file uses several streams at once and a tree of small files is read,
compressed and landed by one worker per stream, not one for the whole tree. What the
receiver already verified (resume) is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from agent.transfer.walk import Entry

CHUNK = 4 * 1024 * 1024
BATCH_TARGET = 4 * 1024 * 1024  # file bytes in one run of small things (one batch)
LARGE_MIN = 8 * 1024 * 1024
STREAMS = 4

Item = list  # ["dir", path] | ["link", path] | ["file", path] | ["chunk", path, index]


def chunk_count(size: int) -> int:
    return max(1, -(-size // CHUNK))


def is_large(entry: Entry) -> bool:
    return entry.kind == "file" and entry.size > LARGE_MIN


@dataclass
class Schedule:
    streams: list[list[Item]]
    bytes_skipped: int = 0
    files_skipped: int = 0
    chunks: dict[str, int] = field(default_factory=dict)  # chunks still to send, per file


def schedule(
    entries: list[Entry],
    done_files: Set[str] = frozenset(),
    done_chunks: Mapping[str, Set[int]] | None = None,
    streams: int = STREAMS,
) -> Schedule:
    """Deal `entries` over `streams` streams, leaving out verified files and chunks."""
    plan = Schedule([[] for _ in range(streams)])
    done_chunks = done_chunks or {}
    turn, run, run_bytes = 0, plan.streams[0], 0
    for entry in entries:
        if entry.path in done_files:
            plan.bytes_skipped += entry.size
            plan.files_skipped += entry.kind == "file"
            continue
        if not is_large(entry):
            run.append([entry.kind, entry.path])
            run_bytes += entry.size
            if run_bytes >= BATCH_TARGET:  # this run is full: the next goes on the next stream
                turn = (turn + 1) % streams
                run, run_bytes = plan.streams[turn], 0
            continue
        have = done_chunks.get(entry.path, frozenset())
        for index in range(chunk_count(entry.size)):
            if index in have:
                plan.bytes_skipped += min(CHUNK, entry.size - index * CHUNK)
                continue
            turn = (turn + 1) % streams
            plan.streams[turn].append(["chunk", entry.path, index])
            plan.chunks[entry.path] = plan.chunks.get(entry.path, 0) + 1
    return plan
