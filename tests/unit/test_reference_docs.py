"""The reference pages name everything the code accepts: a job field, pool key, CLI command or
flag, or console key added without its line in docs/ fails here, naming what is missing."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from pydantic import BaseModel

from engine.cli.main import _parser
from engine.jobs import jobspec, pools
from engine.jobs.strict import Table

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _named(page: str) -> set[str]:
    """Every `code span` of a reference page."""
    return set(re.findall(r"`([^`\n]+)`", (DOCS / page).read_text()))


def _table_fields(table: Table, prefix: str = "") -> list[str]:
    names = []
    for name, field in table.fields.items():
        names.append(prefix + name)
        if isinstance(field.node, Table):
            names += _table_fields(field.node, f"{prefix}{name}.")
    return names


def _model_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, info in model.model_fields.items():
        names.append(prefix + name)
        kind = info.annotation
        if inspect.isclass(kind) and issubclass(kind, BaseModel):
            names += _model_keys(kind, f"{prefix}{name}.")
    return names


def test_every_job_field_is_in_jobs_md() -> None:
    fields = _table_fields(jobspec._JOB_TABLE)
    assert {"name", "run", "workspace.workdir"} <= set(fields)
    assert [f for f in fields if f not in _named("jobs.md")] == []


def test_every_pool_key_is_in_pools_md() -> None:
    keys = _model_keys(pools._PoolTable)
    assert {"provider", "resources.gpu_count", "caps.max_dollars"} <= set(keys)
    assert [k for k in keys if k not in _named("pools.md")] == []


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_and_flag_is_in_cli_md() -> None:
    text = (DOCS / "cli.md").read_text()
    sections = dict(re.findall(r"^### `([^`]+)`\n(.*?)(?=^### |\Z)", text, re.S | re.M))
    missing = []
    for name, sub in _subcommands(_parser()).items():
        if name not in sections:
            missing.append(name)
            continue
        for action in sub._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help" and f"`{flag}" not in sections[name]:
                    missing.append(f"{name} {flag}")
    top = [f for a in _parser()._actions for f in a.option_strings if f.startswith("--")]
    missing += [f for f in top if f != "--help" and f"`{f}" not in text]
    assert missing == []


def _console_keys() -> dict[str, str]:
    """Each key a console binding answers, as the docs show it → the class that binds it."""
    from textual.binding import Binding

    import tui

    keys: dict[str, str] = {}
    for info in pkgutil.walk_packages(tui.__path__, "tui."):
        module = importlib.import_module(info.name)
        for owner in vars(module).values():
            if not (inspect.isclass(owner) and owner.__module__ == module.__name__):
                continue
            for binding in vars(owner).get("BINDINGS", []):
                assert isinstance(binding, Binding), binding
                for key in binding.key.split(","):
                    key = key.strip()
                    keys[_SHOWN.get(key, key)] = owner.__name__
    return keys


_SHOWN = {  # Textual's key names → as the page (and the console's footer) shows them
    "escape": "esc",
    "question_mark": "?",
    "exclamation_mark": "!",
    "slash": "/",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
}


def test_every_console_key_is_in_console_md() -> None:
    keys = _console_keys()
    assert {"n", "s", "esc", "enter", "!"} <= set(keys)
    named = _named("console.md")
    assert {k: owner for k, owner in keys.items() if k not in named} == {}
