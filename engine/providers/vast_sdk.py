"""The only place that imports the `vastai` SDK, so it imports the same way everywhere.

`vastai` 1.9.1 reads `sys.stdout.encoding` when it is imported (vastai/api/client.py,
to choose emoji). Inside a running Textual app `sys.stdout` is Textual's print capture,
which has no `encoding`: the import raised AttributeError and every Vast.ai pool in
`swjob-tui` silently did nothing. Here the import sees a stdout that has one: the
current stream (Textual's capture, or the terminal) wrapped with an `encoding`, so
anything the SDK prints still goes where the program sends its prints.

Importing takes a second or more (requests, the SDK's own modules): callers on an event
loop run `load()` in a thread.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any

_lock = threading.Lock()


class _EncodedStream:
    """`stream` as it is, plus the `encoding` attribute an SDK may read from sys.stdout."""

    encoding = "utf-8"

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()


def load() -> ModuleType:
    """Import the SDK (once) and return its top-level module."""
    if "vastai.api.client" in sys.modules:
        import vastai

        return vastai
    with _lock:
        current = sys.stdout
        needs_encoding = not isinstance(getattr(current, "encoding", None), str)
        wrapper = _EncodedStream(current) if needs_encoding else None
        if wrapper is not None:
            sys.stdout = wrapper
        try:
            import vastai
            import vastai.api.client
        finally:
            if wrapper is not None and sys.stdout is wrapper:
                sys.stdout = current  # only ours: the app may have restored its own meanwhile
        return vastai


def sdk_class() -> type[Any]:
    """The `VastAI` client class."""
    return load().VastAI


def parse_order(order: str) -> Any:
    """The SDK's parser of its order syntax ("dph_total", "score-", …)."""
    load()
    from vastai.api.query import parse_order as parse

    return parse(order)
