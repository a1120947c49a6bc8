"""A pydantic ValidationError of a config file (the pools file) as its one-line error.

The job file is checked without pydantic (engine/jobs/strict.py) and reports alike:
the first problem that is not a missing field, in the same words.
"""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from engine.jobs.fileerror import ConfigFileError
from engine.jobs.strict import too_many
from engine.jobs.tomlload import located_error, toml_type

_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def validation_error(
    exc: ValidationError,
    text: str,
    source: Path,
    root: type[BaseModel],
    error: type[ConfigFileError],
) -> ConfigFileError:
    """The first pydantic error as one line with its field path and line.

    Built only from the error's type, location and our own validator messages —
    never from pydantic's rendering, which quotes the input (it may be a secret).
    """
    errors = exc.errors(include_url=False)
    # A typo gives "unknown field" and "missing" together; the unknown one says more.
    first = min(errors, key=lambda e: e["type"] == "missing")
    loc = tuple(p for p in first["loc"] if p != "[key]")
    return located_error(error, text, source, loc, _problem(first, root, loc), first.get("input"))


def _problem(err: Any, root: type[BaseModel], loc: tuple[str | int, ...]) -> str:
    kind = err["type"]
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {toml_type(err['input'])}"
    if kind == "extra_forbidden":
        parent = _type_at(root, loc[:-1])
        allowed = ", ".join(parent.model_fields) if _is_model(parent) else ""
        return f"unknown field (allowed: {allowed})" if allowed else "unknown field"
    if kind == "missing":
        table = _type_at(root, loc)
        is_table = _is_model(table) or get_origin(table) is dict
        return "table is missing" if is_table else "required field is missing"
    if kind == "too_long":
        return too_many(err["ctx"].get("actual_length"), err["ctx"]["max_length"])
    if kind == "value_error":
        return str(err["ctx"]["error"])
    return str(err["msg"])


def _type_at(model: Any, loc: tuple[str | int, ...]) -> Any:
    """The declared type at `loc` (a model, `dict[...]`, `str`...), or None if unknown."""
    for part in loc:
        model = _unwrap(model)
        if _is_model(model) and isinstance(part, str) and part in model.model_fields:
            model = model.model_fields[part].annotation
        elif get_origin(model) in (dict, list):
            model = get_args(model)[-1]
        else:
            return None
    return _unwrap(model)


def _unwrap(tp: Any) -> Any:
    """`X | None` and `Annotated[X, ...]` → X."""
    while get_origin(tp) in (Annotated, Union, UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if get_origin(tp) is not Annotated and len(args) != 1:
            return tp
        tp = args[0]
    return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)
