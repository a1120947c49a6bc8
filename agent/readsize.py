"""How much to ask the iroh binding for on the next read of a stream.

The binding's `RecvStream.read(size_limit)` allocates and zeroes `size_limit` bytes
before it waits for data (iroh-ffi 1.2: `vec![0u8; size_limit]`), and holds them while
the read is pending. Asking for 1 MiB on every read cost the engine a 1 MiB allocation and
zeroing per heartbeat or event read (page faults in the iroh runtime's memset were 7 % of
its thread at a hundred runs), and a hundred nodes' pending reads held ~100 MiB of zeroed
buffers at once: most of the operator's peak RSS. So a stream is read in small pieces until
a read comes back full — data is waiting — and then in pieces four times larger, up to the
ceiling that keeps bulk reads cheap; a short read brings the size back down.
"""

from __future__ import annotations

FLOOR = 16 * 1024  # a heartbeat, an event, a log batch: one read, a cheap buffer
CEILING = 1 << 20  # bulk: few calls into the binding per byte


class ReadSize:
    """The size of a stream's next read, from what its last reads returned."""

    __slots__ = ("ceiling", "now")

    def __init__(self, ceiling: int = CEILING) -> None:
        self.ceiling = max(ceiling, 1)
        self.now = min(FLOOR, self.ceiling)

    def after(self, got: int) -> None:
        """Adjust to a read that returned `got` bytes of the `now` asked for."""
        if got >= self.now:
            self.now = min(self.now * 4, self.ceiling)
        else:
            self.now = min(max(FLOOR, got * 2), self.now)  # `now` is at most the ceiling
