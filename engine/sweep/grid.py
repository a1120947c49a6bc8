"""A sweep's variants: the cartesian product of `--grid NAME=V1,V2` options, or a list of
parameter sets from a file. Pure: parsed and checked before anything is rented."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import SwjobError
from engine.jobs.fileerror import shown

MAX_VARIANTS = 10_000


class GridError(SwjobError, ValueError):
    """A grid option or parameter file that cannot be used; one line naming it."""


@dataclass(frozen=True)
class Variant:
    """One run's parameters, in the order the user gave their names."""

    params: Mapping[str, str]

    def label(self, job_name: str) -> str:
        """The run's name: `train[LR=0.1,SEED=1]`."""
        inside = ",".join(f"{name}={value}" for name, value in self.params.items())
        return f"{job_name}[{inside}]"


def parse_grid(options: Sequence[str]) -> dict[str, list[str]]:
    """`["LR=0.1,0.01", "SEED=1,2"]` → `{"LR": ["0.1", "0.01"], "SEED": ["1", "2"]}`."""
    grid: dict[str, list[str]] = {}
    for option in options:
        name, sep, values = option.partition("=")
        name = name.strip()
        if not sep or not name:
            raise GridError(f"--grid {shown(option)!r}: expected NAME=V1,V2,…")
        if name in grid:
            raise GridError(f"--grid {shown(name)!r}: the name is given twice")
        parts = [v.strip() for v in values.split(",")]
        if not all(parts):
            raise GridError(f"--grid {shown(option)!r}: an empty value")
        if len(set(parts)) != len(parts):
            raise GridError(f"--grid {shown(option)!r}: a value is listed twice")
        grid[name] = parts
    return grid


def expand(grid: Mapping[str, Sequence[str]]) -> list[Variant]:
    """Every combination, the last name varying fastest (as nested loops would)."""
    names = list(grid)
    count = 1
    for values in grid.values():
        count *= len(values)
    if count > MAX_VARIANTS:
        raise GridError(f"the grid makes {count} runs; at most {MAX_VARIANTS} per sweep")
    return [
        Variant(dict(zip(names, combo, strict=True))) for combo in itertools.product(*grid.values())
    ]


def load_params(path: Path) -> list[Variant]:
    """A parameter file: a JSON list of objects, one run each (`[{"LR": 0.1}, …]`); numbers
    and booleans become the text a shell would see."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GridError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GridError(f"{path}: not JSON: {shown(str(exc))}") from None
    if not isinstance(data, list) or not data:
        raise GridError(f"{path}: expected a non-empty JSON list of objects")
    if len(data) > MAX_VARIANTS:
        raise GridError(f"{path}: {len(data)} runs; at most {MAX_VARIANTS} per sweep")
    return [Variant(_param_set(path, i, item)) for i, item in enumerate(data)]


def _param_set(path: Path, index: int, item: object) -> dict[str, str]:
    if not isinstance(item, dict) or not item:
        raise GridError(f"{path}: item {index}: expected an object of NAME: value")
    params = {}
    for name, value in item.items():
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, int | float):
            value = repr(value)
        elif not isinstance(value, str):
            raise GridError(f"{path}: item {index}: {shown(name)}: expected text or a number")
        params[name] = value
    return params
