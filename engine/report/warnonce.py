"""A warning said once per key.

A disk that fails one write (full, its directory gone) fails every write after it; the
run goes on regardless, and one line per file tells the user all there is to know.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable


class WarnOnce:
    """`warn(key, msg, *args)` logs the first time a key is seen, never again."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._said: set[Hashable] = set()

    def warn(self, key: Hashable, msg: str, *args: object) -> None:
        if key not in self._said:
            self._said.add(key)
            self._log.warning(msg, *args)
