"""Secrets in every shape: each line of a multi-line value is masked on its
own, and a secret straddling the 64 KiB line cut is masked whole, whatever the sizes of
the pieces the pipe delivers."""

from __future__ import annotations

import pytest

from agent.lines import LineSplitter
from agent.redact import MASK, Redactor
from engine.report.printable import visible

PEM = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIB\n-----END KEY-----"
SECRET = "Zq7xW-4f0c9e41b7a2-kP3vY"  # no 6-character piece of it is a word


def test_each_line_of_a_multiline_value_is_a_secret() -> None:
    redact = Redactor([PEM, "ab\ncd"])  # "ab", "cd": under 4 characters, left alone
    for line in PEM.splitlines():
        assert redact(f"key: {line}") == f"key: {MASK}"
    assert redact(PEM) == MASK
    assert redact("ab cd") == "ab cd"


def pieces(secret: str, text: str, least: int = 6) -> list[str]:
    """Substrings of `secret` of `least` or more characters that occur in `text`."""
    return [
        secret[i : i + least]
        for i in range(len(secret) - least + 1)
        if secret[i : i + least] in text
    ]


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
