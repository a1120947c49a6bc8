"""The send-path fix is installed, and refuses a binding whose write is not the byte loop
it was written for (checked on the compiled code, not the source); iroh's errors carry no
backtrace to resolve unless the user asked for library backtraces; a Rust future ready at
once resumes its awaiter without waking the loop through its self-pipe, one ready later
(from iroh's threads) still wakes it; the lean calls into Rust are installed, refuse
another binding's call and raise its errors as it did."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

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


def test_the_continuation_fix_is_installed_and_refuses_another_poll_loop(monkeypatch) -> None:
    assert iroh_ffi._uniffi_continuation_callback is irohfix._CONTINUE

    async def another_poll_loop(rust_future, *rest):  # looks the callback up elsewhere
        return rust_future

    monkeypatch.setattr(iroh_ffi, "_uniffi_continuation_callback", None)
    monkeypatch.setattr(iroh_ffi, "_uniffi_rust_call_async", another_poll_loop)
    with pytest.raises(RuntimeError, match="iroh binding changed"):
        irohfix.apply_continuation()


async def test_a_continuation_wakes_the_loop_only_from_another_thread(monkeypatch) -> None:
    loop = asyncio.get_running_loop()
    woken: list[str] = []
    monkeypatch.setattr(loop, "_write_to_self", lambda: woken.append("self-pipe"))
    monkeypatch.setattr(irohfix, "_ready_in_a_row", 0)
    handles = iroh_ffi._UniffiContinuationHandleMap
    here, again, there = loop.create_future(), loop.create_future(), loop.create_future()
    irohfix._continue(handles.insert((loop, here)), 0)  # ready, inside a poll, on the loop
    assert here.done(), "a future ready inside the poll is resolved there: no loop turn"
    irohfix._continue(handles.insert((loop, again)), 1)  # "poll again": after a turn
    assert not again.done()
    assert await here == 0 and await again == 1 and woken == []
    monkeypatch.undo()  # the other thread's wake-up must really wake the loop
    thread = threading.Thread(target=irohfix._continue, args=(handles.insert((loop, there)), 1))
    thread.start()
    assert await asyncio.wait_for(there, 10) == 1
    thread.join()


async def test_a_reader_whose_polls_are_always_ready_still_lets_the_loop_turn() -> None:
    """Ready polls resolve on the spot, but not forever: a forward flooding a busy node
    would otherwise hold the loop from its heartbeats for as long as bytes are buffered."""
    loop = asyncio.get_running_loop()
    handles = iroh_ffi._UniffiContinuationHandleMap
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    began = turns
    for _ in range(10 * irohfix.READY_IN_A_ROW):  # a read loop whose every poll is ready
        future = loop.create_future()
        irohfix._continue(handles.insert((loop, future)), iroh_ffi._UNIFFI_RUST_FUTURE_POLL_READY)
        await future
    ticking.cancel()
    assert turns - began >= 9, "the ticker never ran while the reads were ready"


def test_the_lean_calls_are_installed_and_raise_the_bindings_errors(monkeypatch) -> None:
    assert iroh_ffi._uniffi_rust_call_with_error is irohfix._lean_call_with_error
    assert iroh_ffi._uniffi_rust_call is irohfix._lean_call
    with pytest.raises(iroh_ffi.IrohError):  # a Rust error through the lean call
        iroh_ffi.EndpointTicket.from_string("not a ticket")

    def another_call(error_ffi_converter, fn, *args):  # the same job, written another way
        return fn(*args)

    def bindings_call(fn, *args):  # the binding's own shape: only the other call differs
        return _uniffi_rust_call_with_error(None, fn, *args)  # noqa: F821

    monkeypatch.setattr(iroh_ffi, "_uniffi_rust_call_with_error", another_call)
    monkeypatch.setattr(iroh_ffi, "_uniffi_rust_call", bindings_call)
    with pytest.raises(RuntimeError, match="iroh binding changed"):
        irohfix.apply_lean_calls()
