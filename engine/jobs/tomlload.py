"""Read a small TOML config file (a job or a pools file) and turn every failure into one line.

Job and pool files are written by hand and sometimes by accident (a binary, a
directory, a 10 MB paste), so loading is defensive: the size is capped before
reading, the bytes must be UTF-8, the amount of structure is bounded before
parsing, and every problem becomes `<file>:<line>: <field>: <problem>` — never a
traceback, never a hang, and never a secret value.

We parse with the standard library's `tomllib`, and only a file it rejects is parsed
again with `tomlkit` (the project's TOML library), which words more syntax errors
the way a person would fix them (a duplicate key by name, at its second line):
importing tomlkit cost every start more than parsing a valid file does. tomlkit is
slow on huge inputs — 3-10 s for a 1 MiB file of many small items — so the structure
is bounded before parsing (MAX_ITEMS), which keeps the worst case under a second.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from engine.jobs.fileerror import PROBLEM_CHARS, SHOWN_CHARS, ConfigFileError, shown

MAX_FILE_BYTES = 1 << 20
"""A config file is a few hundred bytes; anything over 1 MiB is a mistake."""
MAX_ITEMS = 20_000
"""Newlines + commas: bounds the parser's work (~1 µs/byte is fine, ~10 µs/item is not)."""

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""Job and pool names: safe as a directory name, a label, a log prefix."""
SAFE_NAME_RULE = "1-64 letters, digits, '_', '.', '-', starting with a letter or digit"

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_AT_POSITION = re.compile(r"\s*at line \d+ col \d+$")
_KEY_EXISTS = re.compile(r'^Key "(.*)" already exists\.$')
_STDLIB_AT = re.compile(r"\s*\((?:at line (?P<line>\d+), column \d+|at end of document)\)$")


def _second_definition(text: str, key: str) -> int | None:
    """The line where `key` is defined for the second time (a key or a table header):
    tomlkit reports a duplicate table at the line after it, and a duplicate key of a
    dotted or inline table at no line at all."""
    k = rf"[\"']?{re.escape(key)}[\"']?"
    pattern = re.compile(rf"(?:^|[{{,])\s*(?:[\w.\"'-]*\.)?{k}\s*=|^\s*\[+\s*{k}\s*\]", re.M)
    matches = list(pattern.finditer(text))
    return text.count("\n", 0, matches[1].start()) + 1 if len(matches) > 1 else None


def _syntax_error(
    text: str, source: Path, error: type[ConfigFileError], stdlib: tomllib.TOMLDecodeError
) -> ConfigFileError:
    """The one line for a file `tomllib` rejected: tomlkit's wording when it rejects the
    file too, else the standard library's."""
    import tomlkit
    from tomlkit.exceptions import KeyAlreadyPresent, ParseError

    try:
        tomlkit.parse(text)
    except (KeyAlreadyPresent, ParseError) as exc:
        return _worded(text, source, error, exc)
    except RecursionError:
        return error(source, "TOML syntax: values nested too deeply")
    message, line = _stdlib_said(text, stdlib)
    return error(source, f"TOML syntax: {shown(message, PROBLEM_CHARS)}", line=line)


def _worded(
    text: str, source: Path, error: type[ConfigFileError], exc: Exception
) -> ConfigFileError:
    message = _AT_POSITION.sub("", str(exc))
    line = getattr(exc, "line", None)
    if message.startswith("Unexpected character"):
        message, line = _what_was_expected(text) or (message, line)
    duplicate = _KEY_EXISTS.match(message)
    if duplicate:
        line = _second_definition(text, duplicate[1]) or line
        message = f"duplicate key {shown(duplicate[1])!r} (each key may be set once)"
    return error(source, f"TOML syntax: {shown(message, PROBLEM_CHARS)}", line=line)


def _what_was_expected(text: str) -> tuple[str, int] | None:
    """tomlkit names only the character it tripped on ('\\x00' for the end of the file, at
    line 1); the standard library's parser says what it expected there, and where."""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return _stdlib_said(text, exc)
    return None


def _stdlib_said(text: str, exc: tomllib.TOMLDecodeError) -> tuple[str, int]:
    """The standard library's message, without its position, and the line it names."""
    at = _STDLIB_AT.search(str(exc))
    line = int(at["line"]) if at and at["line"] else text.rstrip("\n").count("\n") + 1
    return _STDLIB_AT.sub("", str(exc)), line


def field_path(loc: tuple[str | int, ...]) -> str:
    """`("job", "workspace", "exclude", 2)` → `job.workspace.exclude[2]` (odd keys quoted)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if _BARE_KEY.fullmatch(part) else json.dumps(part[:SHOWN_CHARS])
            out += f".{shown(key)}" if out else shown(key)
    return out


def read_toml(path: Path, error: type[ConfigFileError]) -> tuple[str, dict[str, Any]]:
    """Read and parse `path`; return its text (for locating lines later) and its data."""
    text = _read_text(Path(path), error)
    return text, parse_toml(text, path, error)


def _read_text(path: Path, error: type[ConfigFileError]) -> str:
    try:
        data = _read_bytes(path, error)
    except OSError as exc:  # permissions, a name too long, an I/O error...
        raise error(path, f"cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_FILE_BYTES:
        raise error(path, f"file too big (over {MAX_FILE_BYTES // 1024} KiB)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(path, "not UTF-8 text", line=line) from None


def _read_bytes(path: Path, error: type[ConfigFileError]) -> bytes:
    """At most one byte over the cap, and only from a regular file (a FIFO would block)."""
    if not path.exists():
        raise error(path, "broken symlink" if path.is_symlink() else "file not found")
    if path.is_dir():
        raise error(path, "is a directory, not a file")
    if not path.is_file():
        raise error(path, "not a regular file")
    with path.open("rb") as fh:
        return fh.read(MAX_FILE_BYTES + 1)


def parse_toml(text: str, source: Path, error: type[ConfigFileError]) -> dict[str, Any]:
    """Parse TOML text with the guards above; every failure is one `error` line."""
    if not text.strip():
        raise error(source, "empty file")
    items = text.count("\n") + text.count(",")
    if items > MAX_ITEMS:
        raise error(source, f"too many lines or items ({items}, limit {MAX_ITEMS})")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(text, source, error, exc) from None
    except RecursionError:
        raise error(source, "TOML syntax: values nested too deeply") from None


def find_line(text: str, loc: tuple[str | int, ...], value: object = None) -> int | None:
    """Best-effort line of the key at `loc` (or of the deepest part of it that is found).

    Each key is searched after the previous one, so `job.workspace.exclude` finds the
    `exclude` of the workspace, whether written as a table, dotted key or inline table.
    `value` (a list element that failed) is searched after its key when given.
    """
    pos, found = 0, False
    for part in loc:
        if not isinstance(part, str):
            continue
        if len(part) > SHOWN_CHARS * 4:  # a regex of a huge key takes seconds to compile
            break
        key = "|".join(re.escape(k) for k in (part, json.dumps(part), f"'{part}'"))
        match = re.compile(rf"(?:^|[\[{{,.\s])\s*(?P<k>{key})\s*[=.\]]", re.M).search(text, pos)
        if match is None:
            break
        pos, found = match.end("k"), True
    if found and isinstance(loc[-1], int) and isinstance(value, str):
        hits = (text.find(json.dumps(value), pos), text.find(f"'{value}'", pos))
        pos = min((i for i in hits if i >= 0), default=pos)
    return text.count("\n", 0, pos) + 1 if found else None


_TOML_TYPES = {str: "a string", int: "an integer", float: "a float", bool: "a boolean"}
_TOML_TYPES |= {list: "an array", dict: "a table"}


def toml_type(value: object) -> str:
    """What a TOML author calls the type of `value` ("an integer"), never the value itself."""
    return _TOML_TYPES.get(type(value), f"a {type(value).__name__}")


def located_error(
    error: type[ConfigFileError],
    text: str,
    source: Path,
    loc: tuple[str | int, ...],
    problem: str,
    value: object = None,
) -> ConfigFileError:
    """The one line for `problem` at `loc`, with the line it is on (`value`, what was found
    there, points at the right element of an array)."""
    line = find_line(text, loc, value)
    return error(source, problem, line=line, field=field_path(loc) or None)
