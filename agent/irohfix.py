"""Four fixes to the iroh Python binding's costs, applied on import.

Errors: iroh's errors carry a backtrace when RUST_BACKTRACE is set, and the binding formats
each one it hands to Python in full; resolving the backtrace parses the library's debug
info, ~75 ms of CPU per error. An agent dialling its side services as its run ends leaves
a handshake or two aborted per run: with RUST_BACKTRACE=1 (a Rust user's shell) that was
most of the operator's CPU at 100 runs. RUST_LIB_BACKTRACE=0 drops errors' backtraces
only (a panic keeps its own), unless the user chose otherwise.

The send path: the uniffi-generated `_UniffiRustBufferBuilder.write` copies bytes into Rust one
byte at a time, which caps a stream near 8 MiB/s. We replace it with a single
`ctypes.memmove`. The patch is applied once at import; if the binding's shape
changes (another iroh version), `apply()` raises instead of silently running slow
or corrupting data. The loop is recognised by its compiled code (its variables and
the names it calls), not its source text: reading and tokenizing the binding's
source took 9-20 ms of every operator's and agent's start.

Wake-ups: each poll of a Rust future hands the binding a continuation callback, which
resolves the awaiting Python future with `call_soon_threadsafe` — a write to the loop's
self-pipe and one more turn of epoll to read it back. When the future is ready at once
the callback runs inside the poll, on the loop's own thread (most reads and writes of a
short frame): a future that is ready is then resolved there and then, so the binding's
`await` on it returns without giving up the loop at all — no wake-up, no scheduled
call, no turn of the loop and of the task per poll (at 100 runs at once, ~40 polls a
run). Resolving a future is what any code on the loop may do: whoever awaits it is
woken by the loop as usual. A "poll again" still waits a turn of the loop (a future that
wakes itself would otherwise keep the loop polling it). Callbacks from iroh's runtime
threads still wake the loop as before.

Calls: every call into Rust — a method, each poll, each buffer's alloc and free, about
two hundred a run at 100 runs at once — goes through `_uniffi_rust_call_with_error`,
which builds its status struct with two keyword constructors and checks it in a
function of its own. `_lean_call_with_error` zeroes a bare struct (the same bytes) and
checks the success inline, leaving the rest to the binding's own check.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
from typing import Any

from iroh import iroh_ffi

BACKTRACE_ENV = "RUST_LIB_BACKTRACE"

_EXPECTED_FIELDS = ["capacity", "len", "data"]
_LOOP_VARIABLES = ("self", "value", "i", "byte")  # `for i, byte in enumerate(value):`
_LOOP_CALLS = ("_reserve", "len", "enumerate", "rbuf", "data")


def _fast_write(self: object, value: bytes) -> None:
    """Append `value` to the Rust buffer with one memmove instead of a Python loop."""
    data = bytes(value)
    size = len(data)
    with self._reserve(size):  # type: ignore[attr-defined]
        rbuf = self.rbuf  # type: ignore[attr-defined]
        ctypes.memmove(ctypes.addressof(rbuf.data.contents) + rbuf.len, data, size)


def apply() -> None:
    """Install the fast write; idempotent, and loud when the binding is not the one we know."""
    builder = iroh_ffi._UniffiRustBufferBuilder
    if builder.write is _fast_write:
        return
    fields = [name for name, _ in iroh_ffi._UniffiRustBuffer._fields_]
    code = builder.write.__code__
    if (
        fields != _EXPECTED_FIELDS
        or code.co_varnames != _LOOP_VARIABLES
        or code.co_names != _LOOP_CALLS
    ):
        raise RuntimeError(
            "iroh binding changed: _UniffiRustBufferBuilder.write is not the byte loop "
            "agent/irohfix.py was written for; re-check the send-path fix"
        )
    builder.write = _fast_write


READY_IN_A_ROW = 8
"""Ready polls resolved on the spot before one goes through a loop turn: a task whose
reads are always ready (a forward flooding a busy machine) must still let heartbeats,
deadlines and the console run between them."""
_ready_in_a_row = 0


def _continue(handle: int, poll_code: int) -> None:
    """The binding's continuation callback, waking the loop only from another thread."""
    global _ready_in_a_row
    loop, future = iroh_ffi._UniffiContinuationHandleMap.remove(handle)
    if asyncio._get_running_loop() is not loop:
        loop.call_soon_threadsafe(iroh_ffi._uniffi_set_future_result, future, poll_code)
    elif poll_code == iroh_ffi._UNIFFI_RUST_FUTURE_POLL_READY and _ready_in_a_row < READY_IN_A_ROW:
        _ready_in_a_row += 1
        iroh_ffi._uniffi_set_future_result(future, poll_code)  # the poll loop ends: no spin
    else:  # "poll again", or the Nth ready in a row: after a turn of the loop, so neither
        _ready_in_a_row = 0  # a self-waking future nor an always-ready reader holds it
        loop.call_soon(iroh_ffi._uniffi_set_future_result, future, poll_code)


_CONTINUE: Any = iroh_ffi._UNIFFI_RUST_FUTURE_CONTINUATION_CALLBACK(_continue)
"""Kept referenced here for as long as Rust may call it (the module lives as long)."""


def apply_continuation() -> None:
    """Install `_continue`; idempotent, and loud when the binding does not poll the way
    it was written for (its async call must look the callback up as a module global)."""
    if iroh_ffi._uniffi_continuation_callback is _CONTINUE:
        return
    names = iroh_ffi._uniffi_rust_call_async.__code__.co_names
    if (
        "_uniffi_continuation_callback" not in names
        or "_UniffiContinuationHandleMap" not in names
        or not callable(getattr(iroh_ffi, "_uniffi_set_future_result", None))
        or getattr(iroh_ffi, "_UNIFFI_RUST_FUTURE_POLL_READY", None) != 0
    ):
        raise RuntimeError(
            "iroh binding changed: _uniffi_rust_call_async is not the poll loop "
            "agent/irohfix.py was written for; re-check the continuation fix"
        )
    iroh_ffi._uniffi_continuation_callback = _CONTINUE


_STATUS_FIELDS = ["code", "error_buf"]
_CALL_NAMES = ("_UniffiRustCallStatus", "default", "ctypes", "byref", "_uniffi_check_call_status")


def _lean_call_with_error(error_ffi_converter: Any, fn: Any, *args: Any) -> Any:
    """The binding's `_uniffi_rust_call_with_error`: a zeroed status is its `default()`."""
    status = _Status()
    result = fn(*args, ctypes.byref(status))
    if status.code:  # not CALL_SUCCESS: the binding's own check raises what it should
        iroh_ffi._uniffi_check_call_status(error_ffi_converter, status)
    return result


def _lean_call(fn: Any, *args: Any) -> Any:
    """The binding's `_uniffi_rust_call` (no error type), one call shorter."""
    return _lean_call_with_error(None, fn, *args)


_Status = iroh_ffi._UniffiRustCallStatus


def apply_lean_calls() -> None:
    """Install the lean calls; idempotent, and loud when the binding's call is not the
    one they stand for."""
    if iroh_ffi._uniffi_rust_call_with_error is _lean_call_with_error:
        return
    fields = [name for name, _ in _Status._fields_]
    if (
        fields != _STATUS_FIELDS
        or _Status.CALL_SUCCESS != 0
        or iroh_ffi._uniffi_rust_call_with_error.__code__.co_names != _CALL_NAMES
        or iroh_ffi._uniffi_rust_call.__code__.co_names != ("_uniffi_rust_call_with_error",)
    ):
        raise RuntimeError(
            "iroh binding changed: _uniffi_rust_call_with_error is not the call "
            "agent/irohfix.py was written for; re-check the lean-call fix"
        )
    iroh_ffi._uniffi_rust_call_with_error = _lean_call_with_error
    iroh_ffi._uniffi_rust_call = _lean_call


apply()
apply_continuation()
apply_lean_calls()
os.environ.setdefault(BACKTRACE_ENV, "0")  # read by Rust at its first error, not before
