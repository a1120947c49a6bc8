"""Strict checking of parsed TOML against a declared shape: tables, arrays, string maps, strings.

`swjob validate` should answer in about a tenth of a second, and importing pydantic alone
takes longer than that, so the job file's shape is declared with these few node types
instead of a pydantic model. The behaviour is pydantic's strict mode, which the pools
file still uses, so both report a problem alike: every problem is collected with its
location, and the first one that is not a missing field is the one reported (a typo
gives "unknown field" and "missing" together; the unknown one says more).

A check is a plain function that returns its (possibly normalised) value or raises
ValueError with a message that quotes no secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.jobs.tomlload import toml_type

Loc = tuple[str | int, ...]
Check = Callable[[Any], Any]
_INVALID: Any = object()  # what a node returns when it recorded a problem


@dataclass(frozen=True)
class Problem:
    """One thing wrong at `loc`; `value` is what was found there (to find its line)."""

    loc: Loc
    text: str
    value: object = None
    missing: bool = False


def first_problem(problems: list[Problem]) -> Problem:
    return next((p for p in problems if not p.missing), problems[0])


class _Node:
    def check(
        self, value: object, loc: Loc, ctx: Mapping[str, Any], problems: list[Problem]
    ) -> Any:
        raise NotImplementedError


def _run_checks(
    checks: tuple[Check, ...], value: Any, loc: Loc, problems: list[Problem], raw: object
) -> Any:
    try:
        for check in checks:
            value = check(value)
    except ValueError as exc:
        problems.append(Problem(loc, str(exc), raw))
        return _INVALID
    return value


def _wrong_type(expected: str, value: object, loc: Loc, problems: list[Problem]) -> Any:
    problems.append(Problem(loc, f"expected {expected}, got {toml_type(value)}", value))
    return _INVALID


@dataclass(frozen=True)
class Text(_Node):
    """A TOML string, then `checks` in order."""

    checks: tuple[Check, ...] = ()

    def check(self, value: object, loc: Loc, ctx: Mapping[str, Any], problems: list[Problem]):
        if not isinstance(value, str):
            return _wrong_type("a string", value, loc, problems)
        return _run_checks(self.checks, value, loc, problems, value)


@dataclass(frozen=True)
class Before(_Node):
    """Any TOML value handed to `convert(value, ctx)`, which checks its type itself
    (a path resolved against the job file's folder needs the context)."""

    convert: Callable[[object, Mapping[str, Any]], Any]

    def check(self, value: object, loc: Loc, ctx: Mapping[str, Any], problems: list[Problem]):
        try:
            return self.convert(value, ctx)
        except ValueError as exc:
            problems.append(Problem(loc, str(exc), value))
            return _INVALID


def too_many(count: int | None, limit: int) -> str:
    """The words for an array or table over its limit (`count` when known)."""
    return f"too many entries ({f'{count}, ' if count else ''}limit {limit})"


@dataclass(frozen=True)
class Array(_Node):
    """A TOML array of `item`, at most `max_length` long, then `checks` on the whole list."""

    item: _Node
    max_length: int
    checks: tuple[Check, ...] = ()

    def check(self, value: object, loc: Loc, ctx: Mapping[str, Any], problems: list[Problem]):
        if not isinstance(value, list):
            return _wrong_type("an array", value, loc, problems)
        if len(value) > self.max_length:
            problems.append(Problem(loc, too_many(len(value), self.max_length), value))
            return _INVALID
        before = len(problems)
        items = [self.item.check(v, (*loc, i), ctx, problems) for i, v in enumerate(value)]
        if len(problems) > before:
            return _INVALID
        return _run_checks(self.checks, items, loc, problems, value)


@dataclass(frozen=True)
class StrMap(_Node):
    """A TOML table of string keys to string values; the count is checked while reading,
    so a huge table stops at its limit."""

    key: Text
    value: Text
    max_length: int
    checks: tuple[Check, ...] = ()

    def check(self, value: object, loc: Loc, ctx: Mapping[str, Any], problems: list[Problem]):
        if not isinstance(value, dict):
            return _wrong_type("a table", value, loc, problems)
        before, out = len(problems), {}
        for count, (k, v) in enumerate(value.items(), start=1):
            if count > self.max_length:
                problems.append(Problem(loc, too_many(None, self.max_length), value))
                return _INVALID
            key = self.key.check(k, (*loc, k), ctx, problems)
            out[key] = self.value.check(v, (*loc, k), ctx, problems)
        if len(problems) > before:
            return _INVALID
        return _run_checks(self.checks, out, loc, problems, value)


@dataclass(frozen=True)
class Field:
    """A table's field; an optional one that is absent is left to `Table.build`'s default."""

    node: _Node
    required: bool = True


@dataclass(frozen=True)
class Table(_Node):
    """A TOML table with exactly `fields` (others are refused by name), built with `build`."""

    fields: dict[str, Field]
    build: Callable[..., Any] = dict

    def check(self, value: object, loc: Loc, ctx: Mapping[str, Any], problems: list[Problem]):
        if not isinstance(value, dict):
            return _wrong_type("a table", value, loc, problems)
        before, out = len(problems), {}
        for name, field in self.fields.items():
            if name in value:
                out[name] = field.node.check(value[name], (*loc, name), ctx, problems)
            elif field.required:
                problems.append(Problem((*loc, name), _missing(field.node), value, True))
        unknown = f"unknown field (allowed: {', '.join(self.fields)})"
        problems += [Problem((*loc, k), unknown, value[k]) for k in value if k not in self.fields]
        return _INVALID if len(problems) > before else self.build(**out)


def _missing(node: _Node) -> str:
    return "table is missing" if isinstance(node, Table | StrMap) else "required field is missing"


def check(root: _Node, data: object, ctx: Mapping[str, Any]) -> tuple[Any, list[Problem]]:
    """`data` checked against `root`: (the built value, []) or (None, every problem)."""
    problems: list[Problem] = []
    value = root.check(data, (), ctx, problems)
    return (None, problems) if problems else (value, [])
