"""The tests' terminal shows frames as a terminal with synchronized output does: a frame
once it ends, text outside frames at once, the rest when the program is gone; and it
answers the program's query for the mode even when the query came in two reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.smoke.terminal import SYNC_END, SYNC_QUERY, SYNC_START, Terminal


@pytest.fixture
def replies() -> list[bytes]:
    """What the terminal answered the program."""
    return []


@pytest.fixture
def term(tmp_path: Path, replies: list[bytes]):
    terminal = Terminal(["sleep", "30"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    terminal.child.send = replies.append  # type: ignore[method-assign]
    yield terminal
    terminal.kill()


def feed(term: Terminal, *chunks: bytes) -> None:
    for chunk in chunks:
        term.transcript += chunk
        term.show(chunk)


def test_a_frame_is_shown_once_it_ends(term: Terminal) -> None:
    feed(term, SYNC_START + b"new top", b"\r\nnew bottom")
    assert "new" not in term.text()  # half a frame: not drawn
    feed(term, SYNC_END[:4], SYNC_END[4:])  # its end mark, split over two reads
    assert "new top" in term.text() and "new bottom" in term.text()


def test_text_outside_frames_is_shown_at_once_but_a_mark_begun_waits(term: Terminal) -> None:
    feed(term, b"plain \x1b[1mbold")
    assert "plain bold" in term.text()  # an escape that begins no mark is not held
    feed(term, b" more" + SYNC_START[:3])
    assert "more" in term.text()
    feed(term, SYNC_START[3:] + b"framed")
    assert "framed" not in term.text()


def test_a_frame_never_ended_is_shown_when_the_program_is_gone(term: Terminal) -> None:
    feed(term, SYNC_START + b"Traceback (most recent call last)")
    term.show_rest()
    assert "Traceback" in term.text()


def test_the_mode_query_is_answered_once_even_split_over_two_reads(
    term: Terminal, replies: list[bytes]
) -> None:
    feed(term, b"x" + SYNC_QUERY[:4], SYNC_QUERY[4:] + b"y", b"z")
    assert replies == [b"\x1b[?2026;2$y"]
