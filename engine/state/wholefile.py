"""A file replaced whole or not at all: what a reader (another swjob process, the user)
finds is the old text or the new one, never half of it.

The new text goes to a fresh temp file beside it — never one left there, whose mode would
stay or whose link would be followed — readable by this user only, then renamed over the
file. A failed write (a full disk) leaves no temp file behind, and raises.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def replace_whole(path: Path, text: str, temp: Path | None = None) -> Path:
    """Write `text` as `path` (0600), through `temp` (default: `.<name>.tmp` beside it)."""
    temp = temp or path.with_name(f".{path.name}.tmp")
    try:
        temp.unlink(missing_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    return path
