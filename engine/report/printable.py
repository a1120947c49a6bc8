"""Text from a job is data: it is drawn, never obeyed by the operator's terminal.

A job's output, and the files it leaves, may hold escape sequences (pip, tqdm and rich
emit them; a hostile job may emit anything): cursor moves, screen clears, OSC 52
clipboard writes, title changes. Textual's `Log` only masks C0 codes up to U+0014, so
ESC passed straight to the terminal: a `\\033[2J` cleared the console's header and a
colour code shifted the log pane's border. Everything a job wrote goes through
`printable` before any widget sees it: every escape sequence (CSI, OSC, DCS, SOS, PM,
APC, and two-byte escapes, in their 7-bit and 8-bit forms) is removed, SGR colours
with them (the full-fidelity text stays in the run's log files), tabs become spaces,
and any other control character becomes U+FFFD so a person can see that one was there.

The headless CLI prints to whatever terminal the operator has, and what it prints is
also read by people and scripts as plain lines: there `visible` keeps every byte but
draws each control character in caret notation (`\x1b` as `^[`, BEL as `^G`, DEL as
`^?`, a newline as `^J`, C1 codes as `<9b>`), so a peer or a job can neither move the
cursor nor fake a status line, and the operator still sees what was sent.
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(
    r"""
      (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?        # CSI … final byte
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) .*? (?:\x07|\x1b\\|\x9c|$)
                                                                    # OSC/DCS/SOS/PM/APC … ST
    | \x1b [\x20-\x2f]* [\x30-\x7e]?                                # other escapes (nF, Fp, Fe, Fs)
    """,
    re.VERBOSE | re.DOTALL,
)
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROLS_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
TAB = 8


def printable(text: str, *, lines: bool = False) -> str:
    """`text` without escape sequences, tabs expanded, other controls shown as U+FFFD;
    with `lines`, newlines stay (a file's preview), else they are controls too."""
    if text.isprintable():  # the common case: plain output, nothing to do
        return text
    controls = _CONTROLS_BUT_NEWLINE if lines else _CONTROLS
    return controls.sub("\ufffd", _ESCAPES.sub("", text).expandtabs(TAB))


_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _caret(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20 or code == 0x7F:
        return "^" + chr(code ^ 0x40)
    return f"<{code:02x}>"


def visible(text: str) -> str:
    """`text` with every control character (newlines too) drawn in caret notation, tabs
    as spaces: one line, inert on any terminal, nothing of it hidden."""
    if text.isprintable():
        return text
    return _ANY_CONTROL.sub(_caret, text.expandtabs(TAB))
