"""The key bar: built afresh on every change of the bindings, so its keys must cost one
styling each, not two; and left as it is when a change leaves its keys as they were
(see tui/widgets/footer.py)."""

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

    b_enabled = False  # `b` shown disabled until a test flips it: a change of the keys

    def action_bell_a(self) -> None:  # one action that exists: the rest show disabled
        self.app.bell()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "bell_b":
            return True if self.b_enabled else None  # None: shown, disabled
        return super().check_action(action, parameters)


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
        screen = footer.screen
        assert isinstance(screen, KeysScreen)
        screen.b_enabled = True  # `b` shows enabled now
        screen.refresh_bindings()  # as a change of focus, screen or run does

        def rebuilt() -> bool:
            keys = set(footer.query(FooterKey))
            return before.isdisjoint(keys) and set("abcdefgh") <= {key.key for key in keys}

        await until(pilot, rebuilt)
        await pilot.pause()
        keys = list(footer.query(FooterKey))
        bound = [key for key in keys if key.key in "abcdefgh"]
        assert all(key.has_class("-compact") == footer.compact for key in bound)
        assert [key for key in restyled if key in bound] == []
        assert not next(key for key in bound if key.key == "b").disabled


async def test_a_change_that_leaves_the_keys_as_they_were_keeps_them_mounted() -> None:
    """Most changes of focus or run under the cursor leave the keys as they were: nothing
    is removed and built again then. (Positive control: a change of the keys rebuilds.)"""
    app = KeysApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, KeysScreen))
        screen = app.screen
        assert isinstance(screen, KeysScreen)
        footer = screen.query_one(Footer)
        await until(pilot, lambda: set("abcdefgh") <= {key.key for key in footer.query(FooterKey)})
        before = list(footer.query(FooterKey))
        screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert list(footer.query(FooterKey)) == before

        screen.b_enabled = True
        screen.refresh_bindings()
        await until(pilot, lambda: set(footer.query(FooterKey)).isdisjoint(before))
        assert not next(key for key in footer.query(FooterKey) if key.key == "b").disabled
