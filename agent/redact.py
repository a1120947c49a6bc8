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
into pieces (a very long line) is cut where no mask straddles the cut, with `overlap`
characters kept after it (see agent/lines.py).
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
        """How many characters a secret can reach past any cut: text is cut (see `cut`)
        only with at least this much after the cut point, so every secret that starts
        before it is whole."""

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        return _masked(text, self.spans(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where `text` is masked: every occurrence of a secret, overlapping ones merged."""
        first = self._pattern.search(text) if self._pattern is not None else None
        if first is None:
            return []
        assert self._every is not None
        spans: list[tuple[int, int]] = []
        for found in self._every.finditer(text, first.start()):
            start, end = found.span(1)
            if spans and start < spans[-1][1]:  # inside the current mask: it may grow
                spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            else:
                spans.append((start, end))
        return spans

    def cut(self, text: str, at: int) -> tuple[str, str]:
        """`text` cut near `at`: (the head, masked; the rest, as it is). No mask straddles
        the cut — it moves to the mask's start, or its end when the mask starts the text —
        because a cut through a secret, or through the overlap of two, would leave a
        piece of one in clear once the rest is masked on its own."""
        spans = self.spans(text)
        for start, end in spans:
            if start < at < end:
                at = start if start > 0 else end
                break
        return _masked(text[:at], [s for s in spans if s[1] <= at]), text[at:]


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    shown: list[str] = []
    kept_from = 0
    for start, end in spans:
        shown += [text[kept_from:start], MASK]
        kept_from = end
    shown.append(text[kept_from:])
    return "".join(shown)
