"""The agent's event journal: numbers every event and keeps it until the orchestrator has it.

The job keeps running while the orchestrator is away, so every event goes to
`state/events.jsonl` first (one JSON line, flushed) and only then to the wire. On
re-join the orchestrator says which seq it stored last and the agent replays the
rest from here. Memory stays bounded: only the newest events, up to a byte budget,
are kept, encoded (so the budget is what they really cost); older ones are read
back from the file through an offset index (8 bytes per event), and whatever the
orchestrator acknowledged is dropped.

A full disk (the job may fill it) must not stop the events: once a write fails,
the file is cut back to its last whole line and the journal goes on in memory
only. Events that never reached the file are kept until acknowledged, whatever
the budget says; what is lost is only replay across an agent restart.

The job runs next to this file and may delete, replace or shadow it. So the file is
opened once and always read back through that descriptor, never by name: whatever
is at the name later, the journal reads its own bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from array import array
from collections import deque
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import BinaryIO

from agent.lines import write_all
from agent.protocol import AgentEvent, ProtocolError, decode

log = logging.getLogger("swjob.agent")

DEFAULT_MEMORY_BUDGET = 8 * 1024 * 1024


class Journal:
    """Append-only, seq-numbered store of AgentEvents; the single queue the sender drains."""

    def __init__(self, path: Path, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        self._path = path
        self._budget = memory_budget
        self._offsets = array("q")  # file offset of seq i+1 at index i, for what is in the file
        self._last_seq = 0
        self._recent: deque[tuple[int, bytes]] = deque()  # (seq, encoded line), newest last
        self._recent_bytes = 0
        self._listeners: list[Callable[[], None]] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._recover()
        self._last_seq = len(self._offsets)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._file: BinaryIO | None = open(self._fd, "ab", buffering=0, closefd=False)  # noqa: SIM115

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def memory_bytes(self) -> int:
        """Encoded size of the events held in memory (what the budget bounds)."""
        return self._recent_bytes

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every append (the sender uses it to wake up)."""
        self._listeners.append(listener)

    def append(self, event: AgentEvent) -> AgentEvent:
        """Give `event` the next seq, persist it, and return the numbered copy."""
        numbered = event.model_copy(update={"seq": self.last_seq + 1})
        line = numbered.model_dump_json().encode() + b"\n"
        self._last_seq = numbered.seq
        self._persist(line)
        self._recent.append((numbered.seq, line))
        self._recent_bytes += len(line)
        while self._recent_bytes > self._budget and self._droppable():
            self._drop_oldest()
        for listener in self._listeners:
            listener()
        return numbered

    def ack(self, last_seq: int) -> None:
        """The orchestrator stored everything up to `last_seq`: drop those in-memory copies."""
        while self._recent and self._recent[0][0] <= last_seq:
            self._drop_oldest()

    def events_after(self, seq: int, limit: int = 256) -> list[AgentEvent]:
        """Up to `limit` events with seq > `seq`, in order: older ones from the file."""
        first_in_memory = self._recent[0][0] if self._recent else self.last_seq + 1
        out: list[AgentEvent] = []
        if seq + 1 < first_in_memory:
            out = self._read_file(seq, min(limit, first_in_memory - 1 - seq))
            seq += len(out)
        start = max(seq + 1 - first_in_memory, 0)
        window = islice(self._recent, start, start + limit - len(out))
        out.extend(decode(line) for _, line in window)
        return out

    def close(self) -> None:
        self._stop_writing()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _stop_writing(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _persist(self, line: bytes) -> None:
        """Append `line` to the file while it can be written; on failure go memory-only."""
        if self._file is None:
            return
        end = self._file.tell()
        try:
            write_all(self._file, line)
        except OSError as exc:
            log.warning("journal write failed (%s): keeping events in memory", exc.strerror)
            with contextlib.suppress(OSError):
                os.ftruncate(self._file.fileno(), end)  # no torn line for a restart to read
            self._stop_writing()
        else:
            self._offsets.append(end)

    def _droppable(self) -> bool:
        """The oldest in-memory event may go: another is kept and it can be read back."""
        return len(self._recent) > 1 and self._recent[0][0] <= len(self._offsets)

    def _drop_oldest(self) -> None:
        _, line = self._recent.popleft()
        self._recent_bytes -= len(line)

    def _read_file(self, seq: int, count: int) -> list[AgentEvent]:
        """Events seq+1 .. seq+count, read through the journal's own descriptor."""
        start = self._offsets[seq]
        last = seq + count
        end = self._offsets[last] if last < len(self._offsets) else os.fstat(self._fd).st_size
        body = os.pread(self._fd, end - start, start)
        return [decode(line) for line in body.split(b"\n")[:count]]

    def _recover(self) -> None:
        """Index an existing journal (an agent restarted on the same root) and continue its seq.

        A torn final line (the agent died mid-write) is cut off so the file stays valid.
        """
        if not self._path.exists():
            return
        good_end = 0
        with self._path.open("rb") as f:
            for line in iter(f.readline, b""):
                if not line.endswith(b"\n") or not self._valid(line, len(self._offsets) + 1):
                    break
                self._offsets.append(good_end)
                good_end += len(line)
        if good_end != self._path.stat().st_size:
            os.truncate(self._path, good_end)

    @staticmethod
    def _valid(line: bytes, expected_seq: int) -> bool:
        try:
            return getattr(decode(line), "seq", None) == expected_seq
        except ProtocolError:
            return False
