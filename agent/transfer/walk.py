"""Walking a tree into the entries a transfer moves, shared by push, pull and the preview.

Push walks the workspace with gitignore-style excludes (`pathspec.GitIgnoreSpec`:
`/artifacts` is anchored at the root, `__pycache__` matches anywhere, `!x` re-includes);
`.git` is not excluded unless the user says so. An excluded directory is not descended
into. Pull resolves declared outputs (files, directories, globs: agent/transfer/glob.py,
which cannot backtrack) on the node.
Links are never followed; links that leave the root and special files are refused
and reported, not silently dropped.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

from agent.transfer.errors import UnsafePath
from agent.transfer.glob import Glob
from agent.transfer.safety import (
    check_link_resolves,
    check_link_target,
    check_parents,
    check_relpath,
    special_kind,
)
from agent.transfer.wire import PAGE

_GLOB_CHARS = re.compile(r"[*?\[]")


# No __dict__: one object a file, not two. Not frozen: a frozen dataclass sets each field
# through object.__setattr__, 5x the cost of a plain one, and a tree may hold 100,000.
@dataclass(slots=True, unsafe_hash=True)
class Entry:
    """One thing in a tree: a regular file, a directory or a symlink (with its target).
    Never changed once made (hashable as it was when frozen)."""

    path: str
    kind: str  # "file" | "dir" | "link"
    size: int = 0
    mode: int = 0o644
    mtime_ns: int = 0
    target: str | None = None

    def row(self) -> list[object]:
        """The entry as a listing row (`Entry(*row)` makes it again); `dataclasses.astuple`
        deep-copies each field, 40x slower, and a listing has one row a file."""
        return [self.path, self.kind, self.size, self.mode, self.mtime_ns, self.target]


@dataclass
class Walk:
    entries: list[Entry] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # one line each, naming the path
    excluded: list[tuple[str, int]] = field(default_factory=list)  # (path, index of the rule)
    on_page: Callable[[list[Entry]], None] | None = None  # gets each PAGE entries as found
    paged: int = 0  # entries handed to `on_page` so far

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)
        if self.on_page is not None and len(self.entries) - self.paged >= PAGE:
            self.flush()

    def flush(self) -> None:
        """Hand the entries found since the last page to `on_page`."""
        if self.on_page is not None and len(self.entries) > self.paged:
            self.on_page(self.entries[self.paged :])
            self.paged = len(self.entries)


def compile_excludes(exclude: list[str]) -> GitIgnoreSpec:
    return GitIgnoreSpec.from_lines(exclude)


def _entry(root: Path, rel: str, st: os.stat_result) -> Entry:
    """Describe one lstat'ed path; raises UnsafePath for unsafe names (NUL, line breaks),
    escaping links and special files, so the walk refuses that one path, not the transfer."""
    check_relpath(rel)
    if stat.S_ISDIR(st.st_mode):
        return Entry(rel, "dir", 0, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    if stat.S_ISLNK(st.st_mode):
        target = check_link_target(rel, os.readlink(root / rel))
        check_link_resolves(root, rel, target)
        return Entry(rel, "link", 0, 0o777, st.st_mtime_ns, target)
    if stat.S_ISREG(st.st_mode):
        return Entry(rel, "file", st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    raise UnsafePath(f"refused {rel!r}: {special_kind(st.st_mode)}")


def _scan(
    root: Path, start: str, pruned: set[str] | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """Yield (relative path, lstat) below `start` (exclusive), depth first, sorted, no links.

    A directory the consumer adds to `pruned` right after it is yielded is not entered.
    """
    stack = [start]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(root / rel_dir if rel_dir else root) as it:
            found = sorted(it, key=lambda d: d.name, reverse=True)
        for d in found:
            rel = f"{rel_dir}/{d.name}" if rel_dir else d.name
            st = d.stat(follow_symlinks=False)
            yield rel, st
            if stat.S_ISDIR(st.st_mode) and (pruned is None or rel not in pruned):
                stack.append(rel)


def walk_tree(root: Path, exclude: list[str]) -> Walk:
    """Everything under `root` that a push sends, plus what was excluded or refused."""
    spec = compile_excludes(exclude)
    walk, pruned = Walk(), set()
    for rel, st in _scan(root, "", pruned):
        is_dir = stat.S_ISDIR(st.st_mode)
        check = spec.check_file(rel + "/" if is_dir else rel) if exclude else None
        if check is not None and check.include:
            walk.excluded.append((rel, check.index))
            pruned.add(rel)
            continue
        _add(walk, root, rel, st)
    return walk


def _add(walk: Walk, root: Path, rel: str, st: os.stat_result) -> None:
    try:
        walk.add(_entry(root, rel, st))
    except UnsafePath as exc:
        walk.refused.append(str(exc))


def resolve_outputs(
    root: Path, patterns: list[str], on_page: Callable[[list[Entry]], None] | None = None
) -> tuple[Walk, list[str]]:
    """Declared outputs (files, directories collected recursively, globs) and what matched nothing.

    A pattern that is unsafe (absolute, `..`) is refused, not missing. `on_page` gets the
    entries in pages while the walk goes on (the last one before this returns), so a
    listing of 100,000 outputs can be on its way while the rest of the tree is walked.
    """
    walk, missing, seen = Walk(on_page=on_page), [], set()
    for pattern in patterns:
        try:
            matched = _resolve_one(root, pattern.rstrip("/"), walk, seen)
        except UnsafePath as exc:
            walk.refused.append(str(exc))
            continue
        if not matched:  # not "added nothing": `ckpt/best.pt` after `ckpt` is there
            missing.append(pattern)
    walk.flush()
    return walk, missing


def _resolve_one(root: Path, pattern: str, walk: Walk, seen: set[str]) -> bool:
    """Add what `pattern` matches to `walk`; whether it matched anything (an earlier
    pattern may have listed it already)."""
    check_relpath(pattern)
    check_parents(root, pattern)
    if not _GLOB_CHARS.search(pattern):
        try:
            st = os.lstat(root / pattern)
        except FileNotFoundError:
            return False
        _collect(root, pattern, st, walk, seen)
        return True
    literal = pattern[: _GLOB_CHARS.search(pattern).start()]
    base = literal.rsplit("/", 1)[0] if "/" in literal else ""
    if base and not (root / base).is_dir():
        return False
    glob, pruned = Glob(pattern), set()
    for rel, st in _scan(root, base, pruned):
        if glob.match(rel):
            _collect(root, rel, st, walk, seen)
            pruned.add(rel)
    return bool(pruned)


def _collect(root: Path, rel: str, st: os.stat_result, walk: Walk, seen: set[str]) -> None:
    """Add one matched path, and everything below it when it is a directory."""
    if rel not in seen:
        seen.add(rel)
        _add(walk, root, rel, st)
    if stat.S_ISDIR(st.st_mode):
        for sub, sub_st in _scan(root, rel):
            if sub not in seen:
                seen.add(sub)
                _add(walk, root, sub, sub_st)
