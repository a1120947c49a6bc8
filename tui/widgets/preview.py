"""Preview of one landed file: text highlighted, JSON pretty, JSONL tail, binaries as facts.

Building a preview reads the file, so it runs in a thread worker (see the outputs
screen); these functions are pure and never touch Textual.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pygments.lexer import Lexer
from pygments.lexers import LEXERS
from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from engine.api import printable
from tui import format as fmt

Mask = Callable[[str], str]

MAX_TEXT = 256 * 1024
JSONL_TAIL = 40
MAX_LOST = 5  # outputs that did not land, listed by name in the browser's warning


def _read_manifest(run_dir: Path) -> Any:
    try:
        return json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def load_manifest(run_dir: Path) -> dict[str, dict[str, Any]]:
    """manifest.json's entries keyed by their path relative to outputs/ ({} if absent)."""
    data = _read_manifest(run_dir) or {}
    entries = data.get("entries", data.get("files", [])) if isinstance(data, dict) else data
    return {str(e["path"]): e for e in entries if isinstance(e, dict) and "path" in e}


def incomplete_pull(run_dir: Path) -> str | None:
    """The warning for outputs that did not all land: a pull that failed part-way (manifest
    `complete: false`), or files that could not be collected, each with its reason (they
    are not in the tree, so this is the only place the browser shows them)."""
    data = _read_manifest(run_dir)
    if not isinstance(data, dict):
        return None
    files = [e for e in data.get("files", []) if isinstance(e, dict)]
    if data.get("complete") is False:
        landed = sum(1 for e in files if e.get("verified"))
        return (
            f"⚠ the output pull did not finish: {landed} of {len(files)} files landed whole "
            "(✓ in the preview); the others are not here"
        )
    lost = [
        f"{printable(str(e.get('path')))} — {printable(str(e.get('reason') or 'did not land'))}"
        for e in files
        if not e.get("verified")
    ]
    refused = data.get("refused", [])
    lost += [printable(str(line)) for line in refused if isinstance(refused, list)]
    if not lost:
        return None
    shown = lost[:MAX_LOST] + (
        [f"… {len(lost) - MAX_LOST} more in manifest.json"] if len(lost) > MAX_LOST else []
    )
    head = f"⚠ outputs incomplete: {len(lost)} of {len(files) + len(refused)} files did not land"
    return "\n".join([head, *(f"  {line}" for line in shown)])


def facts(path: Path, entry: dict[str, Any] | None, mask: Mask = str) -> Text:
    """The header line: size, sha256 and verification as recorded in the manifest."""
    text = Text(f"{printable(mask(path.name))}  ", style="bold")
    text.append(fmt.size(entry["size"] if entry else path.stat().st_size))
    if entry is None:
        return text.append("  not in manifest", style="dim")
    text.append(f"  sha256 {entry.get('sha256', '?')}", style="dim")
    verified = entry.get("verified")
    text.append(
        "  ✓ verified" if verified else "  ✗ NOT verified", "green" if verified else "bold red"
    )
    return text


def _read_text(path: Path) -> str | None:
    with path.open("rb") as handle:
        head = handle.read(MAX_TEXT)
    if b"\0" in head:
        return None
    try:
        return printable(head.decode("utf-8"), lines=True)
    except UnicodeDecodeError:
        return None


def _tail_jsonl(path: Path) -> str:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - MAX_TEXT))
        lines = handle.read().decode("utf-8", "replace").splitlines()[-JSONL_TAIL:]
    return printable("\n".join(lines), lines=True)


def body(path: Path, mask: Mask = str) -> RenderableType:
    """What the file holds, rendered for its kind, with the job's secrets masked: an output
    that holds one (a config dump, a log) must not put it on the screen, where screenshots
    and shoulders see it. The file itself keeps it."""
    if path.suffix == ".jsonl":
        tail = mask(_tail_jsonl(path))
        return Group(Text(f"last {JSONL_TAIL} lines", style="dim"), Syntax(tail, "json"))
    text = _read_text(path)
    if text is None:
        return Text("binary file — no preview", style="dim italic")
    text = mask(text)
    if path.suffix == ".json":
        try:  # masked again once laid out: json.dumps may write a secret as it was not read
            pretty = json.dumps(json.loads(text), indent=2)
            return Syntax(mask(pretty), "json", line_numbers=True)
        except ValueError:
            pass
    return Syntax(text, lexer_for(path.name, text), line_numbers=True, word_wrap=False)


def lexer_for(name: str, text: str) -> str:
    """The Pygments lexer for a file named `name`: the lexers whose file patterns match
    the name (the text picks among several), else one named like its extension, else plain
    text. Only the lexers that match are imported. Rich's `Syntax.guess_lexer` imports all
    ~250 of Pygments' lexer modules the first time (0.44 s of CPU here, holding the
    interpreter in the console's process), and their ~46 k objects stayed for every later
    full garbage collection to walk. Only Pygments' own lexers are looked through: a
    plugin lexer (Mako's, installed with Optuna's Alembic) imports a dozen lexer modules of
    its own the moment `get_lexer_for_filename` looks at it."""
    filename, extension = Path(name).name, Path(name).suffix.lstrip(".").lower()
    matches = _builtin_lexers(lambda _aliases, patterns: _matches(filename, patterns))
    if not matches:
        matches = _builtin_lexers(lambda aliases, _patterns: extension in aliases)
    if not matches:
        return "text"
    return _alias(max(matches, key=lambda lexer: lexer.analyse_text(text)))


def _matches(filename: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(filename, pattern) for pattern in patterns)


def _builtin_lexers(wanted: Callable[[tuple[str, ...], tuple[str, ...]], bool]) -> list[Any]:
    """Pygments' own lexer classes that `wanted(aliases, file patterns)`, each imported
    only because it is wanted (the table is Pygments' `LEXERS` mapping)."""
    return [
        getattr(importlib.import_module(module), class_name)
        for class_name, (module, _name, aliases, patterns, _mimetypes) in LEXERS.items()
        if wanted(aliases, patterns)
    ]


def _alias(lexer: Lexer) -> str:
    return lexer.aliases[0] if lexer.aliases else lexer.name


def preview(path: Path, entry: dict[str, Any] | None, mask: Mask = str) -> RenderableType:
    """`mask` hides the job's secrets, in the name and in what the file holds."""
    if path.is_dir():
        return folder(path, mask)
    return Group(facts(path, entry, mask), Text(""), body(path, mask))


MAX_WALK = 100_000
"""Entries a folder's preview counts at most (it is read in a thread, but a huge tree
would keep that thread, and the next preview waiting on it, for long)."""
FOLDER_NAMES = 20


def folder(path: Path, mask: Mask = str) -> RenderableType:
    """A folder: how many files it holds and their size, and its first entries (its
    preview was its name alone, blank below)."""
    files = folders = size = 0
    for root, dirs, names in os.walk(path):
        folders += len(dirs)
        for name in names:
            files += 1
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(root, name)).st_size
        if files + folders >= MAX_WALK:
            break
    more = "more than " if files + folders >= MAX_WALK else ""
    head = Text(f"{printable(mask(path.name))}/  ", style="bold")
    head.append(f"{more}{files:,} file{'' if files == 1 else 's'}, {fmt.size(size)}")
    head.append(f" · {folders:,} folders" if folders else "", style="dim")
    try:
        children = sorted(os.listdir(path))
    except OSError:
        children = []
    listed = [printable(mask(name)) + ("/" if (path / name).is_dir() else "")
              for name in children[:FOLDER_NAMES]]  # fmt: skip
    if len(children) > FOLDER_NAMES:
        listed.append(f"… {len(children) - FOLDER_NAMES} more")
    return Group(head, Text(""), Text("\n".join(listed), style="dim"))
