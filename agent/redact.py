"""Replace secret values with `***` wherever text leaves a process.

The job's `env` values are secrets: the agent redacts its log lines before storing
or sending them, and the engine redacts again before anything is shown or written,
so one missed path on either side does not leak. Very short values (under 4
characters) are not redacted: replacing every "1" in a log would destroy it while
protecting nothing worth protecting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
MIN_SECRET_LEN = 4


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)
