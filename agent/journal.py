"""The agent's event journal: numbers every event and keeps it until the orchestrator has it.

The job keeps running while the orchestrator is away, so every event goes to
`state/events.jsonl` first (one JSON line, flushed) and only then to the wire. On
re-join the orchestrator says which seq it stored last and the agent replays the
rest from here. Memory stays bounded: only the newest events, up to a byte budget,
are kept, encoded (so the budget is what they really cost); older ones are read
back from the file through an offset index (8 bytes per event), and whatever the
orchestrator acknowledged is dropped.
"""

from __future__ import annotations

import os
from array import array
from collections import deque
from collections.abc import Callable
from itertools import islice
from pathlib import Path

from agent.protocol import AgentEvent, ProtocolError, decode

DEFAULT_MEMORY_BUDGET = 8 * 1024 * 1024


class Journal:
    """Append-only, seq-numbered store of AgentEvents; the single queue the sender drains."""

    def __init__(self, path: Path, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        self._path = path
        self._budget = memory_budget
        self._offsets = array("q")  # file offset of seq i+1 at index i
        self._recent: deque[tuple[int, bytes]] = deque()  # (seq, encoded line), newest last
        self._recent_bytes = 0
        self._listeners: list[Callable[[], None]] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._recover()
        self._file = path.open("ab")

    @property
    def last_seq(self) -> int:
        return len(self._offsets)

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
        self._offsets.append(self._file.tell())
        self._file.write(line)
        self._file.flush()
        self._recent.append((numbered.seq, line))
        self._recent_bytes += len(line)
        while self._recent_bytes > self._budget and len(self._recent) > 1:
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
        self._file.close()

    def _drop_oldest(self) -> None:
        _, line = self._recent.popleft()
        self._recent_bytes -= len(line)

    def _read_file(self, seq: int, count: int) -> list[AgentEvent]:
        with self._path.open("rb") as f:
            f.seek(self._offsets[seq])
            return [decode(f.readline()) for _ in range(count)]

    def _recover(self) -> None:
        """Index an existing journal (an agent restarted on the same root) and continue its seq.

        A torn final line (the agent died mid-write) is cut off so the file stays valid.
        """
        if not self._path.exists():
            return
        good_end = 0
        with self._path.open("rb") as f:
            for line in iter(f.readline, b""):
                if not line.endswith(b"\n") or not self._valid(line, self.last_seq + 1):
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
