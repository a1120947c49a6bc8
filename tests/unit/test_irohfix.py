"""The send-path fix is installed, and refuses a binding whose write is not the byte loop
it was written for (checked on the compiled code, not the source)."""

from __future__ import annotations

import pytest
from iroh import iroh_ffi

from agent import irohfix

BUILDER = iroh_ffi._UniffiRustBufferBuilder


def test_the_fast_write_is_installed() -> None:
    assert BUILDER.write is irohfix._fast_write


def _a_changed_write(self, value):  # the same job, written another way
    with self._reserve(len(value)):
        self.rbuf.data[self.rbuf.len : self.rbuf.len + len(value)] = value


def _the_loop(self, value):  # what iroh 1.2 ships
    with self._reserve(len(value)):
        for i, byte in enumerate(value):
            self.rbuf.data[self.rbuf.len + i] = byte


@pytest.mark.parametrize(
    ("write", "refused"), [(_a_changed_write, True), (_the_loop, False)], ids=["changed", "same"]
)
def test_only_the_known_byte_loop_is_replaced(monkeypatch, write, refused) -> None:
    monkeypatch.setattr(BUILDER, "write", write)
    if refused:
        with pytest.raises(RuntimeError, match="iroh binding changed"):
            irohfix.apply()
        assert BUILDER.write is write
    else:
        irohfix.apply()
        assert BUILDER.write is irohfix._fast_write
