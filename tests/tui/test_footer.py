"""The key bar: built afresh on every change of the bindings, so its keys must cost one
styling each, not two (see tui/widgets/footer.py)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen
from textual.widgets._footer import FooterKey

from tests.tui.conftest import until
from tui.widgets.footer import COMPACT_BELOW, Footer


class KeysScreen(Screen[None]):
    BINDINGS = [Binding(key, f"bell_{key}", f"Key {key}") for key in "abcdefgh"]

    def compose(self) -> ComposeResult:
        yield Footer()

    def action_bell_a(self) -> None:  # one action that exists: the rest show disabled
        self.app.bell()


class KeysApp(App[None]):
    def on_mount(self) -> None:
        self.push_screen(KeysScreen())


@pytest.mark.parametrize("width", [80, COMPACT_BELOW + 20])
async def test_footer_keys_are_styled_once_when_the_bindings_change(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = KeysApp()
    async with app.run_test(size=(width, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, KeysScreen))
        footer = app.screen.query_one(Footer)
        await until(pilot, lambda: set("abcdefgh") <= {key.key for key in footer.query(FooterKey)})
        assert footer.compact == (width < COMPACT_BELOW)
        restyled: list[DOMNode] = []
        real = app.update_styles

        def counted(node: DOMNode, *args: Any, **kwargs: Any) -> None:
            if isinstance(node, FooterKey):
                restyled.append(node)
            real(node, *args, **kwargs)

        monkeypatch.setattr(app, "update_styles", counted)
        before = set(footer.query(FooterKey))
        footer.screen.refresh_bindings()  # as a change of focus, screen or run does

        def rebuilt() -> bool:
            keys = set(footer.query(FooterKey))
            return before.isdisjoint(keys) and set("abcdefgh") <= {key.key for key in keys}

        await until(pilot, rebuilt)
        await pilot.pause()
        keys = list(footer.query(FooterKey))
        bound = [key for key in keys if key.key in "abcdefgh"]
        assert all(key.has_class("-compact") == footer.compact for key in bound)
        assert [key for key in restyled if key in bound] == []
