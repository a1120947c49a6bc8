"""A real terminal for the real binaries: a pseudo-terminal (pexpect) whose output is
played into a VT100 screen (pyte), so a test reads what a person would see.

Pilot drives an app inside the test's own process, where stdout is never a terminal;
the failures only a terminal shows (an SDK reading `sys.stdout.encoding`, a job's escape
sequences moving the real cursor) need the binary in a pty. The process is ended by its
own pid, and every wait polls the screen until a deadline.

The terminal says it has synchronized output (mode 2026), as today's terminals do, so
the program brackets each frame and the screen shows frames whole. Without it a frame
the kernel split (a loaded machine descheduled the program mid-write) was read half
new, half old: a test saw "line 1" and "paused" in a frame whose lower half was the
last one's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte

SYNC_QUERY = b"\x1b[?2026$p"  # DECRQM: does the terminal have synchronized output?
SYNC_REPLY = b"\x1b[?2026;2$y"  # it does (and it is off now)
SYNC_START = b"\x1b[?2026h"
SYNC_END = b"\x1b[?2026l"


class Terminal:
    """One program in a `cols`×`rows` pty; `text()` is the screen as lines of text."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        cols: int = 120,
        rows: int = 40,
    ) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.child = pexpect.spawn(
            argv[0], argv[1:], cwd=str(cwd), env=env, dimensions=(rows, cols), echo=False
        )
        self.transcript = bytearray()
        self.pending = bytearray()  # written but not shown: a frame not ended yet
        self.in_frame = False

    def pump(self, seconds: float = 0.05) -> None:
        """Feed whatever the program wrote within `seconds` into the screen."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                chunk = self.child.read_nonblocking(
                    65536, timeout=max(0.0, deadline - time.monotonic())
                )
            except pexpect.TIMEOUT:
                return
            except pexpect.EOF:
                self.show_rest()
                return
            self.transcript += chunk
            self.show(chunk)
            if time.monotonic() >= deadline:
                return

    def show(self, chunk: bytes) -> None:
        """Put on the screen what the program wrote, a synchronized frame only once it
        ended (as a terminal does); answer its query for synchronized output."""
        # the query in this chunk, or begun in the last one (not one wholly in it: answered)
        if SYNC_QUERY in self.transcript[-len(chunk) - len(SYNC_QUERY) + 1 :]:
            self.child.send(SYNC_REPLY)
        self.pending += chunk
        while True:
            mark = SYNC_END if self.in_frame else SYNC_START
            at = self.pending.find(mark)
            if at < 0:
                break
            self.stream.feed(bytes(self.pending[: at + len(mark)]))
            del self.pending[: at + len(mark)]
            self.in_frame = not self.in_frame
        if not self.in_frame:  # outside a frame: shown as it comes, but for the start
            keep = self.pending.rfind(b"\x1b")  # of a mark that may go on in the next read
            if keep < 0 or not SYNC_START.startswith(bytes(self.pending[keep:])):
                keep = len(self.pending)
            self.stream.feed(bytes(self.pending[:keep]))
            del self.pending[:keep]

    def show_rest(self) -> None:
        """The program is gone: what it wrote last is shown, a frame it never ended too
        (its traceback may be in it), as a terminal gives up waiting for the end."""
        self.stream.feed(bytes(self.pending))
        self.pending.clear()
        self.in_frame = False

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, condition: str | Callable[[str], bool], timeout: float = 30) -> str:
        """Pump until the screen shows `condition` (a substring, or a test on the text)."""
        test = condition if callable(condition) else (lambda text: condition in text)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.1)
            text = self.text()
            if test(text):
                return text
            if not self.child.isalive():
                self.pump(0.2)
                break
        raise AssertionError(f"timed out waiting for {condition!r}; screen:\n{self.text()}")

    def resize(self, cols: int, rows: int) -> None:
        """Resize the terminal, as dragging its window does (the program gets SIGWINCH)."""
        self.screen.resize(rows, cols)
        self.child.setwinsize(rows, cols)
        self.pump(0.1)

    def press(self, *keys: str) -> None:
        for key in keys:
            self.child.send(key)
            self.pump(0.05)

    def wait_exit(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.child.isalive() and time.monotonic() < deadline:
            self.pump(0.1)
        if self.child.isalive():
            raise AssertionError(f"still running after {timeout}s; screen:\n{self.text()}")
        self.child.close()
        return (
            self.child.exitstatus if self.child.exitstatus is not None else -self.child.signalstatus
        )

    def hang_up(self, timeout: float = 30) -> int:
        """Close the terminal under the program, as closing its window does (the kernel
        sends it SIGHUP), and wait for it to exit; returns its exit status."""
        self.child.ptyproc.fileobj.close()
        deadline = time.monotonic() + timeout
        while self.child.isalive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.child.isalive():
            raise AssertionError(f"still running {timeout}s after its terminal closed")
        return self.child.exitstatus if self.child.exitstatus is not None else -1

    def kill(self) -> None:
        """End the program by its pid (TERM, then KILL), never by name."""
        if self.child.isalive():
            os.kill(self.child.pid, signal.SIGTERM)
            try:
                self.wait_exit(10)
            except AssertionError:
                os.kill(self.child.pid, signal.SIGKILL)
        self.child.close(force=True)
