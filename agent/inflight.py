"""In-flight names: what a file or directory is called while it lands, never an output.

Kept apart from agent/transfer (whose package imports the whole transfer machinery) so
that listing runs (`swjob runs`, the console) can tell outputs from a cut pull's leftovers
without importing it.
"""

from __future__ import annotations

from pathlib import Path

IN_FLIGHT_SUFFIXES = {"tmp": ".swjob-tmp", "part": ".swjob-part"}
"""A file being landed is written under a hidden name ending in one of these (by its kind:
"tmp" written whole, "part" chunk by chunk), and renamed to its own name only once whole
and verified."""


def in_flight_name(parent: str, name: str, kind: str) -> str:
    """The hidden name `name` is written under while it lands."""
    hidden = f".{name}{IN_FLIGHT_SUFFIXES[kind]}"
    return f"{parent}/{hidden}" if parent else hidden


def is_in_flight(name: str) -> bool:
    """Whether a file name is one still being landed (not an output yet: a viewer hides it)."""
    return name.startswith(".") and name.endswith(tuple(IN_FLIGHT_SUFFIXES.values()))


IN_FLIGHT_EXCLUDES = [f".*{suffix}" for suffix in IN_FLIGHT_SUFFIXES.values()]
"""Exclude rules (gitignore-style, any depth) that leave out every in-flight name: a landing
dir pushed on (a next attempt's carried outputs) never takes a killed pull's leftovers."""


def holds_outputs(landing: Path) -> bool:
    """Whether a landing dir holds anything but in-flight names: a killed pull's staging
    directory or temporary files are not outputs."""
    try:
        return any(not is_in_flight(entry.name) for entry in landing.iterdir())
    except OSError:  # absent, or not a directory
        return False
