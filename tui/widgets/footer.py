"""The key bar at the bottom of every screen, compact on a narrow terminal.

At 80 columns Textual's roomy footer ran out before its last keys: the board lost
`? Help` and `q Quit`, the detail and the outputs browser showed `q` without its word.
The compact style keeps every key and its word, with one space less around each.

The footer builds its keys afresh on every change of the bindings (the focus, the
screen, the run under the cursor). Each key mounted roomy or compact and was then switched
to the footer's style, one to two more stylings of ~3 ms each: 30-50 ms of the console's
loop per change. So each key gets its style before it mounts.

Most of those changes leave the keys as they were (the cursor moved to another run of the
same state, the focus went to a pane with the same keys): then the keys are left mounted
rather than removed and built again identical, a restyling and a relayout of the footer
spared for nothing on screen changing. When only whether a key applies changed (the first
run appeared under the cursor: `enter`, `s`, `o` apply now), the keys mounted are dimmed or
lit where they are: building them again relaid out the whole screen, 10-25 ms of the
loop's CPU a time while 12 runs started at once.

On a terminal too narrow for every key (40 columns), Textual lets the keys run under
the command palette's key, docked right: a key cut in two showed beside it, and the
column of margin it kept on its right showed the hidden keys through ("▏^p palettep").
The palette key sits flush right here, and the keys that do not fit wholly beside it
are hidden, so the footer ends in whole keys.

A dialog's footer is the one place its keys are shown (they were also written in the
dialog, by hand, and so shown twice): with `alternatives` each key names every key bound
to its action (`y/enter Stop it`), where Textual shows the first binding's alone.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey

COMPACT_BELOW = 100  # columns: the detail's keys need 85 in the roomy style
FIT_TRIES = 20  # refreshes the fit waits for keys just mounted to be placed


class Footer(TextualFooter):
    DEFAULT_CSS = """
    Footer.-compact FooterKey.-command-palette {
        margin-right: 0;
    }
    """
    _composed_from: Any = None
    _fit_tries = 0

    def __init__(self, *, alternatives: bool = False) -> None:
        super().__init__()
        self.alternatives = alternatives

    def _key_displays(self) -> dict[str, str]:
        """Each action's keys here as shown, in the bindings' order: `y/enter`."""
        keys: dict[str, list[str]] = {}
        for _, binding, _, _ in self.screen.active_bindings.values():
            shown = keys.setdefault(binding.action, [])
            if (display := self.app.get_key_display(binding)) not in shown:
                shown.append(display)
        return {action: "/".join(shown) for action, shown in keys.items()}

    def _keys_from(self) -> Any:
        """Everything Textual's `compose` makes the keys from: the screen's bindings (each
        with whether it is enabled and its tooltip), and the footer's own settings."""
        if not (self._bindings_ready and self.is_attached):
            return None
        bindings = tuple(
            (key, binding, enabled, tooltip)
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
        )
        return (bindings, self.compact, self.show_command_palette)

    @staticmethod
    def _shape(keys: Any) -> Any:
        """The keys shown, without whether each applies nor its tooltip."""
        bindings, *rest = keys
        return (tuple((key, binding) for key, binding, _, _ in bindings), *rest)

    def _light(self) -> None:
        """Dim or light each key mounted as its binding applies now (and its tooltip), as
        Textual's `compose` would have built it."""
        first: dict[str, tuple[bool, str]] = {}
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show:  # as compose: a hidden binding of the same action is no key
                first.setdefault(binding.action, (enabled, tooltip))
        for key in self.query(FooterKey):
            if key.action not in first:
                continue
            enabled, tooltip = first[key.action]
            key._disabled = not enabled
            key.set_class(not enabled, "-disabled")
            if not key.has_class("-command-palette", "-grouped"):
                key.tooltip = tooltip or None

    def compose(self) -> ComposeResult:
        self._composed_from = self._keys_from()
        displays = self._key_displays() if self.alternatives and self._bindings_ready else {}
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                widget.key_display = displays.get(widget.action, widget.key_display)
                # the value Textual gives it once mounted: the footer's (the palette key
                # keeps its own), set before it mounts so that nothing changes after
                palette = widget.has_class("-command-palette")
                compact = widget.compact if palette else self.compact
                widget.set_reactive(FooterKey.compact, compact)
                widget.set_class(compact, "-compact", update=False)
            yield widget

    async def recompose(self) -> None:
        keys = self._keys_from()
        if keys is not None and keys == self._composed_from:
            return  # the keys shown are already these
        was = self._composed_from
        if keys is not None and was is not None and self._shape(keys) == self._shape(was):
            self._composed_from = keys
            self._light()  # the same keys: lit or dimmed in place, no layout
            return
        await super().recompose()
        self._fit_after_layout()

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW
        self._fit_after_layout()

    def _fit_after_layout(self) -> None:
        """Show every key, then, once they are laid out, hide those that do not fit."""
        for child in self.children:
            child.display = True
        self._fit_tries = FIT_TRIES
        self.call_after_refresh(self._hide_what_does_not_fit)

    def _hide_what_does_not_fit(self) -> None:
        """Hide, from the first that does not fit wholly left of the palette key (docked
        right), every key in order: the footer ends in whole keys.

        Keys just mounted may not be placed yet when the refresh after them comes (a busy
        loop): without their widths every key read as fitting, and the footer stayed cut
        under the palette key until the next resize. So the fit waits for their layout."""
        unplaced = any(c.display and not c.virtual_region.width for c in self.children)
        if unplaced and self._fit_tries > 0:
            self._fit_tries -= 1
            self.call_after_refresh(self._hide_what_does_not_fit)
            return
        palette = [child for child in self.children if child.has_class("-command-palette")]
        width = self.content_size.width
        room = width - sum(key.virtual_region_with_margin.width for key in palette)
        if room < 0:  # not even the palette key fits: the keys get the room
            room = width
            for key in palette:
                key.display = False
        cut = False
        for child in self.children:
            if child in palette:
                continue
            cut = cut or child.virtual_region.right > room  # its margin may go under
            child.display = not cut
