"""Job text is drawn, never obeyed: every escape sequence out, controls visible."""

from __future__ import annotations

import pytest

from engine.report.printable import printable

CASES = [
    ("\x1b[2J\x1b[Hcleared?", "cleared?"),  # clear screen, cursor home
    ("\x1b[31mred\x1b[0m plain", "red plain"),  # SGR colours (kept in the log files)
    ("\x1b[38;2;255;0;0mtruecolor\x1b[m", "truecolor"),
    ("\x1b]52;c;ZXZpbA==\x07after", "after"),  # OSC 52 clipboard write, BEL-terminated
    ("\x1b]0;title\x1b\\after", "after"),  # OSC title, ST-terminated
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # hyperlink
    ("\x9b2Jc1", "c1"),  # 8-bit CSI
    ("\x9d0;t\x9cc1-osc", "c1-osc"),  # 8-bit OSC and ST
    ("\x1bPdcs-body\x1b\\q", "q"),  # DCS
    ("\x1b_apc\x1b\\q", "q"),  # APC
    ("\x1b(Bcharset", "charset"),  # nF escape
    ("\x1b7save\x1b8", "save"),  # DECSC/DECRC
    ("\x1b[?1049halt screen", "alt screen"),
    ("\x1b[?25l", ""),  # hide cursor
    ("unterminated \x1b]0;forever", "unterminated "),
    ("tail\x1b", "tail"),
    ("bell\x07 bs\x08 del\x7f", "bell\ufffd bs\ufffd del\ufffd"),
    ("a\tb", "a       b"),
    ("wide 漢字 é ✓", "wide 漢字 é ✓"),
]


@pytest.mark.parametrize(("raw", "drawn"), CASES)
def test_escape_sequences_are_removed_and_controls_shown(raw: str, drawn: str) -> None:
    assert printable(raw) == drawn


def test_no_escape_or_control_survives_any_of_them() -> None:
    for raw, _ in CASES:
        out = printable(raw)
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in out), repr(out)


def test_newlines_stay_only_when_asked() -> None:
    assert printable("a\nb\x1b[2Jc") == "a\ufffdbc"
    assert printable("a\nb\x1b[2Jc", lines=True) == "a\nbc"


def test_plain_text_is_returned_as_is() -> None:
    text = "epoch 3 loss=0.25"
    assert printable(text) is text
