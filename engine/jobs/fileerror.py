"""The one-line error every config file problem becomes, importable without the parsers.

`swjob validate` and friends catch it before they know which file they will read, so it
lives apart from tomlkit and pydantic: a command that fails fast also starts fast.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import SwjobError

SHOWN_CHARS = 80
"""Longest quoted user text (a key, a pattern, a path) echoed back in an error."""
PROBLEM_CHARS = 240


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """User text made safe for a one-line message: control characters escaped, length capped."""
    if len(text) > limit:
        text = text[:limit] + "…"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ConfigFileError(SwjobError):
    """A config file problem as ONE line: `<file>:<line>: <field>: <problem>`.

    Parts that are unknown are left out. The pieces stay available as attributes so
    a UI can point at the line.
    """

    def __init__(
        self,
        source: Path | str | None,
        problem: str,
        *,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.problem = shown(problem, PROBLEM_CHARS)
        super().__init__(self._render())

    def _render(self) -> str:
        where = [] if self.source is None else [shown(str(self.source), 4096)]
        if where and self.line is not None:
            where[0] += f":{self.line}"
        return ": ".join([*where, *([self.field] if self.field else []), self.problem])
