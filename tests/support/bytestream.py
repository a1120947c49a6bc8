"""A receive stream over bytes that are all there already (a fast link): what a transfer's
frame reader reads, for tests of the landing side without a network."""

from __future__ import annotations

__all__ = ["BytesStream"]


class BytesStream:
    def __init__(self, data: bytes) -> None:
        self._data = data

    async def read(self, size_limit: int) -> bytes:
        piece, self._data = self._data[:size_limit], self._data[size_limit:]
        return piece

    async def read_exact(self, size: int) -> bytes:
        return await self.read(size)
