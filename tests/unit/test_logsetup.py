"""Where the engine's warnings go (engine/logsetup.py): the console's private, bounded file,
never its terminal; the headless CLI's stderr, one inert `swjob:` line each, once."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from engine import logsetup
from engine.state.paths import state_dir

log = logging.getLogger("swjob.engine")


@pytest.fixture(autouse=True)
def root_handlers() -> Iterator[None]:
    """The root logger as the test found it: a set-up lasts as long as its program."""
    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
        handler.close()


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The shell's usual umask: the file's mode must not depend on the engine's 077."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_console_log_is_a_private_file_and_nothing_reaches_the_terminal(
    umask_022: None, capfd: pytest.CaptureFixture[str]
) -> None:
    warnings = logsetup.log_to_file("swjob-tui.log")
    assert warnings.summary() is None  # nothing logged: nothing to say after the app
    log.info("not a warning")
    log.warning("run %s not adopted: %s", "r1", "disk full")
    log.warning("run %s not adopted: %s", "r1", "disk full")  # the next scan's, again
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    path = state_dir() / "swjob-tui.log"
    assert warnings.path == path and path.stat().st_mode & 0o777 == 0o600
    lines = path.read_text().splitlines()
    assert [line.partition(": ")[2] for line in lines] == [
        "run r1 not adopted: disk full",
        "Task exception was never retrieved",
    ]
    assert f" pid {os.getpid()} WARNING swjob.engine: " in lines[0]
    assert capfd.readouterr() == ("", "")
    assert warnings.summary() == f"2 warnings this session, logged in {path}"


def test_an_older_log_readable_by_others_is_tightened_and_appended_to(umask_022: None) -> None:
    path = state_dir() / "swjob-tui.log"
    path.write_text("earlier session\n")
    path.chmod(0o644)
    logsetup.log_to_file("swjob-tui.log")
    log.warning("now")
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().startswith("earlier session\n")


def test_the_log_is_bounded_and_every_rotated_copy_stays_private(
    umask_022: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logsetup, "MAX_BYTES", 1000)
    logsetup.log_to_file("swjob-tui.log")
    for n in range(200):
        log.warning("warning %d %s", n, "x" * 50)
    files = sorted(state_dir().glob("swjob-tui.log*"))
    assert [f.name for f in files] == ["swjob-tui.log", "swjob-tui.log.1", "swjob-tui.log.2"]
    assert all(f.stat().st_size <= 1000 and f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert "warning 199 " in files[0].read_text()


def test_a_log_that_cannot_be_opened_is_an_unusable_dir_naming_it() -> None:
    (state_dir() / "swjob-tui.log").mkdir()
    with pytest.raises(logsetup.UnusableDirError, match=r"swjob-tui\.log: cannot keep"):
        logsetup.log_to_file("swjob-tui.log")


def test_the_cli_says_each_warning_once_as_one_inert_prefixed_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logsetup.log_to_stderr("swjob")
    log.info("not a warning")
    log.warning("%s: unreadable, left as it is", "kept.json")
    log.warning("%s: unreadable, left as it is", "kept.json")  # a second index open
    log.warning("refused peer %s", "\x1b[2Jpeer\nline")
    try:
        raise OSError(28, "No space left on device")
    except OSError:
        log.exception("record keeping on the writer thread failed")
    assert capsys.readouterr().err.splitlines() == [
        "swjob: kept.json: unreadable, left as it is",
        "swjob: refused peer ^[[2Jpeer^Jline",
        "swjob: record keeping on the writer thread failed: "
        "OSError: [Errno 28] No space left on device",
    ]
