"""The send-path fix is installed, and refuses a binding whose write is not the byte loop
it was written for (checked on the compiled code, not the source); iroh's errors carry no
backtrace to resolve unless the user asked for library backtraces."""

from __future__ import annotations

import os
import subprocess
import sys

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


@pytest.mark.parametrize(("chosen", "seen"), [(None, "0"), ("1", "1")], ids=["unset", "chosen"])
def test_errors_carry_no_backtrace_unless_the_user_chose_one(chosen, seen) -> None:
    env = {k: v for k, v in os.environ.items() if k != irohfix.BACKTRACE_ENV}
    env["RUST_BACKTRACE"] = "1"  # a Rust user's shell: panics keep their backtraces
    if chosen is not None:
        env[irohfix.BACKTRACE_ENV] = chosen
    code = "import os, agent.endpoint; print(os.environ['RUST_LIB_BACKTRACE'])"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == seen, out.stderr
