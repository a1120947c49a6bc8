"""Where the engine's warnings go: each swjob program says so once, before its engine starts.

Unset, every `log.warning` of the engine went through logging's last resort to whatever
`sys.stderr` was at that moment: under `swjob-tui` that was Textual's capture (lost) or
the terminal under the app's screen (raw text over it), and the note the console prints
at exit was said twice. So:

- `swjob` (headless): stderr, one inert line each, `swjob: <message>` — its user reads
  stderr, and a traceback or an escape sequence from a peer is not for their terminal.
- `swjob-tui`: a private file in the state dir (0600, appended, rotated at `MAX_BYTES`),
  never the screen; after the app, the console says where it is if anything went there.
  Two consoles share that file: each line is written, and the file rotated, only under
  an exclusive lock (flock on `.swjob-tui.log.lock` beside it), and a console whose file
  another rotated away reopens the new one before writing. Rotating on its own, each
  wrote on into the file the other had renamed, rotated it again (files past `MAX_BYTES`,
  a fresh one renamed away) and lost lines.

A message said again (every open of the run index reads the same unreadable kept row,
the adoption scan retries the same run) is written once a process. WARNING and above
only: what the engine logs there names runs, files, peers and errors, never a job's env
values (redacted in its events, and never logged).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import logging.handlers
import os
import threading
from pathlib import Path
from typing import IO, Any

from agent.fdio import write_all
from engine.errors import UnusableDirError, one_line
from engine.report.printable import visible
from engine.state.paths import state_dir

LEVEL = logging.WARNING
MAX_BYTES = 1 << 20
BACKUPS = 2
"""At most ~3 MiB of warnings kept: the file and two rotated copies."""
REMEMBERED = 1024
"""How many distinct messages a process remembers having written (the oldest forgotten)."""


def log_to_stderr(prog: str) -> None:
    """The headless CLI's warnings: `prog: <message>` on stderr, one line each."""
    _install(logging.StreamHandler(), _OneLine(prog))


def log_to_file(name: str) -> WarningsFile:
    """The console's warnings: appended to `name` in the state dir, never to the terminal.
    Raises UnusableDirError, naming the file, when it cannot be opened."""
    path = state_dir() / name
    try:
        handler = _PrivateFile(path)
    except OSError as exc:
        problem = f"cannot keep swjob's log here: {exc.strerror or exc}"
        raise UnusableDirError(f"{path}: {problem}") from None
    fields = "%(asctime)s pid %(process)d %(levelname)s %(name)s: %(message)s"
    _install(handler, _InertLines(fields))
    return WarningsFile(handler)


class WarningsFile:
    """The file a console's warnings go to, and how many went there this session."""

    def __init__(self, handler: _PrivateFile) -> None:
        self._handler = handler
        self.path = Path(handler.baseFilename)

    def summary(self) -> str | None:
        """One line for after the app (None when nothing was logged): where to look."""
        count = self._handler.written
        if not count:
            return None
        return f"{count} warning{'s' if count > 1 else ''} this session, logged in {self.path}"

    def close(self) -> None:
        """Stop logging there (for tests: a program's set-up lasts as long as it does)."""
        logging.getLogger().removeHandler(self._handler)
        self._handler.close()


def _install(handler: logging.Handler, formatter: logging.Formatter) -> None:
    handler.setLevel(LEVEL)
    handler.setFormatter(formatter)
    handler.addFilter(_Once())
    logging.getLogger().addHandler(handler)


class _PrivateFile(logging.handlers.RotatingFileHandler):
    """A rotated log file only the operator can read, whatever the umask: created 0600,
    and tightened when an older one is found with more bits. Shared by every console of
    the state dir: a line is written (one `write` of the whole line, O_APPEND) and the
    file rotated only under the lock file's flock, after following a rotation another
    process made. Counts what it wrote; a failed write is dropped quietly (logging's
    default prints a traceback to stderr, which is the app's screen)."""

    def __init__(self, path: Path) -> None:
        self.written = 0
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self._lock_fd = os.open(path.with_name(f".{path.name}.lock"), flags, 0o600)
        try:
            os.fchmod(self._lock_fd, 0o600)
            super().__init__(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _open(self) -> IO[Any]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.baseFilename, flags, 0o600)
        os.fchmod(fd, 0o600)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)

    def emit(self, record: logging.LogRecord) -> None:
        """Called under the handler's own lock (one thread at a time in this process);
        the flock keeps the other processes out."""
        self.written += 1
        try:
            data = (self.format(record) + self.terminator).encode("utf-8", "backslashreplace")
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._follow()
                size = os.fstat(self._fd()).st_size
                if self.maxBytes > 0 and size and size + len(data) > self.maxBytes:
                    self.doRollover()
                self._write(data)
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        except Exception:
            self.handleError(record)

    def _fd(self) -> int:
        if self.stream is None:
            self.stream = self._open()
        return self.stream.fileno()

    def _follow(self) -> None:
        """Reopen the file by its name when another process rotated ours away."""
        try:
            current = os.stat(self.baseFilename)
        except FileNotFoundError:
            current = None
        if self.stream is not None:
            held = os.fstat(self.stream.fileno())
            if current is not None and (held.st_dev, held.st_ino) == (
                current.st_dev,
                current.st_ino,
            ):
                return
            with contextlib.suppress(OSError):
                self.stream.close()
            self.stream = None
        self.stream = self._open()

    def _write(self, data: bytes) -> None:
        """The whole line, by the file descriptor (never half in a buffer)."""
        write_all(self._fd(), data)

    def close(self) -> None:
        """Closed once for good: a second close (logging's at exit) must not close a
        descriptor number reused since."""
        try:
            super().close()
        finally:
            lock_fd, self._lock_fd = self._lock_fd, -1
            if lock_fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(lock_fd)

    def handleError(self, record: logging.LogRecord) -> None:
        self.written -= 1


class _Once(logging.Filter):
    """Lets a message through the first time this process says it."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, None] = {}
        self._lock = threading.Lock()  # the index's writer thread logs too

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        with self._lock:
            if text in self._seen:
                return False
            self._seen[text] = None
            if len(self._seen) > REMEMBERED:
                del self._seen[next(iter(self._seen))]
        return True


class _OneLine(logging.Formatter):
    """`prog: <message>`, an exception as its one line (not a traceback), control
    characters drawn in caret notation: one inert line."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self._prog = prog

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text = f"{text}: {one_line(record.exc_info[1])}"
        return f"{self._prog}: {visible(text)}"


class _InertLines(logging.Formatter):
    """The file's lines: the message made inert (the file is read with `cat` or `less`
    on a terminal), a traceback kept below it."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return visible(super().formatMessage(record))
