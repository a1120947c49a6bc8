"""Replace secret values with `***` wherever text leaves a process.

The job's `env` values are secrets: the agent redacts its log lines before storing
or sending them, and the engine redacts again before anything is shown or written,
so one missed path on either side does not leak. Very short values (under 4
characters) are not redacted: replacing every "1" in a log would destroy it while
protecting nothing worth protecting.

A value of several lines (a PEM key) is printed line by line, and output is split
into lines before it is redacted: so each line of it (of at least 4 characters) is a
secret of its own, besides the whole. Values may overlap (one's end is another's
start, or one is a prefix of another): every character inside any occurrence of any
value is masked, so the union of overlapping occurrences becomes one mask. Text cut
into pieces (a very long line) must be redacted before the cut, keeping `overlap`
characters back (see agent/lines.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
MIN_SECRET_LEN = 4
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def secret_pieces(secrets: Iterable[str]) -> set[str]:
    """Every value, and each line of a multi-line value, long enough to be redacted."""
    pieces = set()
    for value in secrets:
        pieces.add(value)
        pieces.update(_LINE_BREAK.split(value))
    return {p for p in pieces if len(p) >= MIN_SECRET_LEN}


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted(secret_pieces(secrets), key=len, reverse=True)
        alternatives = "|".join(map(re.escape, values))
        self._pattern = re.compile(alternatives) if values else None
        # a lookahead finds an occurrence at every position, overlapping ones included;
        # slower, so it only scans text the plain pattern found a secret in
        self._every = re.compile(f"(?=({alternatives}))") if values else None
        self.overlap = max((len(v) for v in values), default=1) - 1
        """How many characters a secret can reach past any cut: text about to be cut
        is redacted with at least this much kept back after the cut point."""

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        first = self._pattern.search(text) if self._pattern is not None else None
        if first is None:
            return text
        assert self._every is not None
        shown: list[str] = []
        masked_to = 0
        for found in self._every.finditer(text, first.start()):
            start, end = found.span(1)
            if start >= masked_to:  # past the current mask: a new one starts here
                shown += [text[masked_to:start], MASK]
            masked_to = max(masked_to, end)
        shown.append(text[masked_to:])
        return "".join(shown)
