"""The command palette's provider: every action the current screen's keys can do, plus
"open run …" for each run — generated from the live bindings, like the help screen."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from textual.app import App
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen

if TYPE_CHECKING:
    from tui.app import SwjobApp

Command = tuple[str, str, Callable[[], Any]]


def ours(node: object, action: str) -> bool:
    """Console actions only: a widget's inherited plumbing (cursor moves, page up…) stays
    on its keys and out of the palette."""
    if isinstance(node, App | Screen):
        return True
    method = getattr(type(node), f"action_{action.split('(')[0]}", None)
    return method is not None and method.__module__.startswith("tui.")


class ActionCommands(Provider):
    def _commands(self) -> list[Command]:
        app = cast("SwjobApp", self.app)
        found: dict[str, Command] = {}
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if not ours(active.node, binding.action) or not active.enabled:
                continue
            if not binding.description or binding.description in found:
                continue
            run = partial(app.run_action, binding.action, active.node)
            found[binding.description] = (
                binding.description,
                f"key: {app.get_key_display(binding) or key}",
                run,
            )
        commands = list(found.values())
        for run in app.engine.runs()[:100]:
            title = f"Open run {run.job_name} {run.run_id}"
            commands.append((title, f"{run.state} · {run.pool}", partial(app.open_run, run.run_id)))
        return commands

    async def discover(self) -> Hits:
        for title, help_text, command in self._commands():
            yield DiscoveryHit(title, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, command in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), command, text=title, help=help_text)
