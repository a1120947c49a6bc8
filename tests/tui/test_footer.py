"""The key bar: built afresh on every change of the bindings, so its keys must cost one
styling each, not two; and left as it is when a change leaves its keys as they were
(see tui/widgets/footer.py)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen
from textual.widgets._footer import FooterKey

from tests.tui.conftest import booted, screen_rows, until
from tui.app import SwjobApp
from tui.widgets.footer import COMPACT_BELOW, Footer


class KeysScreen(Screen[None]):
    BINDINGS = [Binding(key, f"bell_{key}", f"Key {key}") for key in "abcdefgh"]

    def compose(self) -> ComposeResult:
        yield Footer()

    b_enabled = False  # `b` shown disabled until a test flips it: lit in place
    c_hidden = False  # `c` shown until a test hides it: a change of the keys

    def action_bell_a(self) -> None:  # one action that exists: the rest show disabled
        self.app.bell()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "bell_b":
            return True if self.b_enabled else None  # None: shown, disabled
        if action == "bell_c" and self.c_hidden:
            return False  # False: not shown
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
        screen.c_hidden = True  # `c` is not shown now
        screen.refresh_bindings()  # as a change of focus, screen or run does

        def rebuilt() -> bool:
            keys = set(footer.query(FooterKey))
            return before.isdisjoint(keys) and set("abdefgh") <= {key.key for key in keys}

        await until(pilot, rebuilt)
        await pilot.pause()
        keys = list(footer.query(FooterKey))
        bound = [key for key in keys if key.key in "abcdefgh"]
        assert "c" not in {key.key for key in bound}
        assert all(key.has_class("-compact") == footer.compact for key in bound)
        assert [key for key in restyled if key in bound] == []


async def test_a_change_that_leaves_the_keys_as_they_were_keeps_them_mounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Most changes of focus or run under the cursor leave the keys as they were: nothing
    is removed and built again then. A key that comes to apply (or stops) is lit (or
    dimmed) where it is, and the screen is not laid out again: each layout repainted the
    whole screen while 12 runs started. (Positive control: a change of the keys rebuilds.)"""
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

        layouts: list[Screen[Any]] = []
        real = Screen._refresh_layout

        def counted(self: Screen[Any], *args: Any, **kwargs: Any) -> None:
            if self._layout_required:
                layouts.append(self)
            real(self, *args, **kwargs)

        monkeypatch.setattr(Screen, "_refresh_layout", counted)
        b = next(key for key in before if key.key == "b")
        assert b.has_class("-disabled")
        screen.b_enabled = True
        screen.refresh_bindings()
        await until(pilot, lambda: not b.has_class("-disabled"))
        await pilot.pause()
        assert list(footer.query(FooterKey)) == before
        assert layouts == []
        assert "b Key b" in screen_rows(app)[-1]

        screen.c_hidden = True
        screen.refresh_bindings()
        await until(pilot, lambda: set(footer.query(FooterKey)).isdisjoint(before))
        assert "c" not in {key.key for key in footer.query(FooterKey)}


async def test_a_narrow_footer_ends_in_whole_keys_and_the_palette_key(engine, make_job) -> None:
    """At 40 columns the board's keys ran under the palette key, docked right: "Submit s"
    showed a key cut in two, and the palette key's margin showed a hidden key through it
    ("▏^p palettep"). Now the keys that do not fit wholly are hidden, and the palette key
    ends the footer."""
    app = SwjobApp(engine, jobs=[make_job(name="hello", run="echo hi")])
    async with app.run_test(size=(40, 10)) as pilot:
        await booted(pilot)
        footer = app.screen.query_one(Footer)
        shown = "l Logs / Filter n Submit"
        ending = "▏^p palette"

        def bottom() -> str:
            return screen_rows(app)[-1][: footer.size.width]

        # the footer shows its keys, then hides what does not fit once they are laid out:
        # a loaded machine may paint the frame between, so the settled footer is awaited
        settled = shown.ljust(footer.size.width - len(ending)) + ending
        await until(pilot, lambda: bottom() == settled)


@pytest.mark.parametrize("widths", [(12,), (30,), (45, 60), (60, 45), (30, 120, 30)])
async def test_every_key_shown_is_whole_at_any_narrow_width(widths: tuple[int, ...]) -> None:
    """Each key shown reads whole where it stands, none under the palette key; as many
    as fit are shown, also after the terminal is resized."""
    app = KeysApp()
    async with app.run_test(size=(widths[0], 5)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, KeysScreen))
        footer = app.screen.query_one(Footer)
        await until(pilot, lambda: "a" in {key.key for key in footer.query(FooterKey)})
        for width in widths:
            await pilot.resize_terminal(width, 5)
            await until(pilot, lambda width=width: footer.size.width == width)
            # the keys are fitted once laid out, a refresh after the resize: a loaded
            # machine may show the frame before it
            with contextlib.suppress(AssertionError):
                await until(pilot, lambda width=width: not misfits(app, footer, width), 10)
            assert misfits(app, footer, width) == []


def misfits(app: KeysApp, footer: Footer, width: int) -> list[str]:
    """What the footer shows wrongly at `width`: a key not whole where it stands, one under
    the palette key, or fewer (or more) keys than fit ("a Key a" and a space each)."""
    keys = [key for key in footer.query(FooterKey) if key.display]
    row = screen_rows(app)[-1]
    wrong = []
    for key in keys:
        label = f"{key.key_display} {key.description}"
        if (seen := row[key.region.x : key.region.right].strip(" ▏")) != label:
            wrong.append(f"{label!r} reads {seen!r} in {row!r}")
    palette = [key for key in keys if key.has_class("-command-palette")]
    edge = palette[0].region.x if palette else width
    shown = [key for key in keys if key not in palette]
    if not all(key.region.right <= edge for key in shown):
        wrong.append(f"a key under the palette key in {row!r}")
    if len(shown) != min(8, (edge + 1) // 8):
        wrong.append(f"{len(shown)} keys shown in {row!r}")
    return wrong
