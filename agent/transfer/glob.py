"""Output globs matched without backtracking, so a hostile pattern cannot stall the node.

A regex built from `*a*a*a*a*a*a*a*a*a*a*a*a*a*ab` backtracks exponentially on a long name
(and `re` holds the GIL, so the agent stopped heartbeating). Globs need no regex: with only
`*` as the variable-length atom, matching the fixed pieces between stars at their LEFTMOST
place is always right — the first piece at the start, the last at the end, each middle piece
at the first place after the one before. Each piece is found once, so a segment costs at
most len(name) × len(pattern) single-character checks (plain pieces use `str.find`).
The same idea one level up handles `**`: groups of path segments between `**`s are placed
leftmost over the path's segments.

Syntax: `*` any run within a segment, `?` one character, `[abc]` / `[a-z]` / `[!a-z]` one
character of (not of) a set, `**` as a whole segment any number of directories (at the end:
anything below). Anything else matches itself; an unclosed `[` is a literal.
"""

from __future__ import annotations

from dataclasses import dataclass

GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class _Class:
    """`[...]`: one character in (or, negated, not in) the listed characters and ranges."""

    negated: bool
    chars: frozenset[str]
    ranges: tuple[tuple[str, str], ...]

    def __contains__(self, ch: str) -> bool:
        inside = ch in self.chars or any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negated


_ANY = None  # `?`
Atom = str | _Class | None  # a literal character, a class, or `?`
Piece = tuple[Atom, ...]  # the fixed-width text between two stars


def _parse_class(body: str) -> _Class:
    negated = body.startswith("!")
    body = body[1:] if negated else body
    chars, ranges, i = set(), [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((body[i], body[i + 2]))
            i += 3
        else:
            chars.add(body[i])
            i += 1
    return _Class(negated, frozenset(chars), tuple(ranges))


def _pieces(segment: str) -> tuple[Piece, ...]:
    """The segment's pattern split at its stars (consecutive stars are one)."""
    pieces: list[Piece] = []
    atoms: list[Atom] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            pieces.append(tuple(atoms))
            atoms = []
            while i < len(segment) and segment[i] == "*":
                i += 1
            continue
        if ch == "?":
            atoms.append(_ANY)
        elif ch == "[" and (end := segment.find("]", i + 2)) != -1:
            atoms.append(_parse_class(segment[i + 1 : end]))
            i = end
        else:
            atoms.append(ch)
        i += 1
    pieces.append(tuple(atoms))
    return tuple(pieces)


def _literal(piece: Piece) -> str | None:
    """The piece as plain text when it has no `?` or class (then C-speed string calls do)."""
    return "".join(piece) if all(isinstance(a, str) for a in piece) else None  # type: ignore[arg-type]


def _at(piece: Piece, text: str | None, name: str, pos: int) -> bool:
    """`piece` (plain `text` if it is literal) matches `name` exactly at `pos`; the caller
    checked that it fits."""
    if text is not None:
        return name.startswith(text, pos)
    for offset, atom in enumerate(piece):
        ch = name[pos + offset]
        if atom is _ANY:
            continue
        if ch not in atom if isinstance(atom, _Class) else ch != atom:
            return False
    return True


def _find(piece: Piece, text: str | None, name: str, start: int, end: int) -> int:
    """The leftmost place ≥ start where `piece` fits before `end`, or -1."""
    if text is not None:
        return name.find(text, start, end)
    for pos in range(start, end - len(piece) + 1):
        if _at(piece, None, name, pos):
            return pos
    return -1


class _Segment:
    def __init__(self, pieces: tuple[Piece, ...]) -> None:
        self.pieces = tuple((piece, _literal(piece)) for piece in pieces)

    def match(self, name: str) -> bool:
        (first, first_text), (last, last_text) = self.pieces[0], self.pieces[-1]
        if len(self.pieces) == 1:
            return len(name) == len(first) and _at(first, first_text, name, 0)
        end = len(name) - len(last)
        if end < len(first) or not _at(last, last_text, name, end):
            return False
        if not _at(first, first_text, name, 0):
            return False
        pos = len(first)
        for piece, text in self.pieces[1:-1]:
            found = _find(piece, text, name, pos, end)
            if found < 0:
                return False
            pos = found + len(piece)
        return True


Group = tuple[_Segment, ...]  # consecutive segments between two `**`


def _group_at(group: Group, names: list[str], pos: int) -> bool:
    return all(seg.match(names[pos + k]) for k, seg in enumerate(group))


class Glob:
    """One compiled output pattern; `match(rel)` for a '/'-separated relative path."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        groups: list[list[_Segment]] = [[]]
        for segment in pattern.split("/"):
            if segment == "**":
                groups.append([])
            else:
                groups[-1].append(_Segment(_pieces(segment)))
        self._groups: tuple[Group, ...] = tuple(tuple(g) for g in groups)
        self._open_end = pattern.split("/")[-1] == "**"  # `x/**` is everything below x

    def match(self, rel: str) -> bool:
        names = rel.split("/")
        groups = self._groups
        first, last = groups[0], groups[-1]
        if len(groups) == 1:
            return len(names) == len(first) and _group_at(first, names, 0)
        end = len(names) - len(last) - (1 if self._open_end else 0)
        if end < len(first) or not _group_at(first, names, 0):
            return False
        if not _group_at(last, names, len(names) - len(last)):
            return False
        pos = len(first)
        for group in groups[1:-1]:
            found = next(
                (p for p in range(pos, end - len(group) + 1) if _group_at(group, names, p)), -1
            )
            if found < 0:
                return False
            pos = found + len(group)
        return True


def is_glob(pattern: str) -> bool:
    return any(ch in GLOB_CHARS for ch in pattern)
