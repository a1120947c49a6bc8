"""What the console remembers between sessions: which of the board's panes the user
collapsed (`P` the pools, `v` the preview), so a small terminal stays dense each time.
A small JSON file in swjob's state dir; a missing or broken one means the defaults."""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, fields

from engine.api import state_dir

FILE = "console.json"


@dataclass
class Prefs:
    pools: bool = True  # the pools panel shown
    preview: bool = True  # the selected run's preview shown


def load() -> Prefs:
    with contextlib.suppress(OSError, ValueError, TypeError):
        saved = json.loads((state_dir() / FILE).read_text(encoding="utf-8"))
        known = {f.name for f in fields(Prefs)}
        return Prefs(**{k: bool(v) for k, v in saved.items() if k in known})
    return Prefs()


def save(prefs: Prefs) -> None:
    """Best effort: a state dir that cannot be written only forgets the choice."""
    with contextlib.suppress(OSError):
        (state_dir() / FILE).write_text(json.dumps(asdict(prefs)), encoding="utf-8")
