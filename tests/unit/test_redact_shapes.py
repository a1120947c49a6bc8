"""Secrets in every shape: each line of a multi-line value is masked on its
own (whatever the line break), a secret straddling the 64 KiB line cut is masked whole
whatever the sizes of the pieces the pipe delivers, overlapping values are masked as
their union (across the cut too), a value that is a prefix of another leaves no tail,
regex characters are literal, and empty or short (under 4 characters) values redact
nothing."""

from __future__ import annotations

import pytest

from agent.lines import LineSplitter
from agent.redact import MASK, Redactor
from engine.report.printable import visible
from tests.support.hostile import PEM, SECRET, pieces


def test_each_line_of_a_multiline_value_is_a_secret() -> None:
    redact = Redactor([PEM, "ab\ncd"])  # "ab", "cd": under 4 characters, left alone
    for line in PEM.splitlines():
        assert redact(f"key: {line}") == f"key: {MASK}"
    assert redact(PEM) == MASK
    assert redact("ab cd") == "ab cd"


@pytest.mark.parametrize("offset", [-20, -5, -1, 0, 1, 7])
@pytest.mark.parametrize("chunk", [1, 4096, 1 << 20])
def test_a_secret_across_the_line_cut_is_masked_whole(offset: int, chunk: int) -> None:
    max_line = 1000
    data = ("a" * (max_line + offset) + SECRET + "b" * 3000 + "\n").encode()
    splitter = LineSplitter(max_line=max_line, redact=Redactor([SECRET]))
    lines = [
        line for i in range(0, len(data), chunk) for line in splitter.feed(data[i : i + chunk])
    ]
    lines += splitter.finish()
    assert all(len(line) <= max_line for line in lines)
    assert pieces(SECRET, "\n".join(lines)) == []
    assert MASK in "".join(lines)  # positive control: the secret was there, and masked
    unredacted = LineSplitter(max_line=max_line).feed(data)
    assert offset >= 0 or pieces(SECRET, "\n".join(unredacted)) != []  # what the cut leaks


def test_visible_draws_controls_in_caret_notation() -> None:
    assert visible("a\x1b[2Jb\x07c\x7fd\x9be\nf") == "a^[[2Jb^Gc^?d<9b>e^Jf"
    assert visible("x\ty") == "x       y" and visible("plain é 漢") == "plain é 漢"


FIRST, SECOND = "Kq9vR2xL7mWp", "7mWpZe4sT0bN"  # FIRST's end is SECOND's start
OVERLAPPING = f"{FIRST[:-4]}{SECOND}"  # both, printed as one run


def test_overlapping_secrets_are_masked_as_their_union() -> None:
    """Two values sharing a stretch, printed as one run: neither may leave a piece out."""
    first, second = FIRST, SECOND
    text = f"{OVERLAPPING}!"
    shown = Redactor([first, second])(text)
    assert shown == f"{MASK}!"
    assert pieces(first, shown, 4) == [] and pieces(second, shown, 4) == []


@pytest.mark.parametrize("offset", [-20, -12, -9, -6, -3, -1, 0])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_overlapping_secrets_across_the_line_cut_leave_no_piece(offset: int, chunk: int) -> None:
    """The cut falls in or near the overlap: cutting after masking only FIRST (SECOND not
    whole yet) would leave SECOND's tail in clear on the far side."""
    max_line = 1000
    data = ("a" * (max_line + offset) + OVERLAPPING + "b" * 3000 + "\n").encode()
    splitter = LineSplitter(max_line=max_line, redact=Redactor([FIRST, SECOND]))
    lines = [
        line for i in range(0, len(data), chunk) for line in splitter.feed(data[i : i + chunk])
    ]
    text = "\n".join(lines + splitter.finish())
    assert all(len(line) <= max_line for line in text.splitlines())
    assert pieces(FIRST, text, 4) == [] and pieces(SECOND, text, 4) == []
    assert MASK in text.replace("\n", "")  # positive control: the run was there, masked


def test_a_secret_that_is_the_prefix_of_another_leaves_no_tail() -> None:
    short, long = "pfx-4c1d", "pfx-4c1d-e9b07a"
    redact = Redactor([short, long])
    assert redact(f"a {long} b {short} c {short}-e9") == f"a {MASK} b {MASK} c {MASK}-e9"


@pytest.mark.parametrize("values", [[], [""], ["a", "ab", "abc"], ["\n\n", "a\nb"]])
def test_empty_and_short_values_redact_nothing(values: list[str]) -> None:
    redact = Redactor(values)
    text = "a ab abc ab\ncd 1 2 3"
    assert not redact and redact(text) == text and redact.overlap == 0


def test_four_characters_is_a_secret_and_regex_characters_are_literal() -> None:
    redact = Redactor(["abcd", "a.b*(c)?"])
    assert redact("xabcdx a.b*(c)? aXb(c)") == f"x{MASK}x {MASK} aXb(c)"
    assert redact.overlap == len("a.b*(c)?") - 1


@pytest.mark.parametrize("sep", ["\n", "\r\n", "\r"])
def test_every_line_break_splits_a_multiline_value(sep: str) -> None:
    value = sep.join(["first-line-1a", "second-line-2b", "xy"])
    redact = Redactor([value])
    assert redact(f"[{value}]") == f"[{MASK}]"
    assert redact("first-line-1a then second-line-2b, xy") == f"{MASK} then {MASK}, xy"


def test_a_secret_repeated_back_to_back_is_masked_every_time() -> None:
    redact = Redactor([SECRET])
    assert redact(SECRET * 3 + " " + SECRET) == f"{MASK * 3} {MASK}"
