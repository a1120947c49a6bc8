"""The key bar at the bottom of every screen, compact on a narrow terminal.

At 80 columns Textual's roomy footer ran out before its last keys: the board lost
`? Help` and `q Quit`, the detail and the outputs browser showed `q` without its word.
The compact style keeps every key and its word, with one space less around each.

The footer builds its keys afresh on every change of the bindings (the focus, the
screen, the run under the cursor). Each key mounted roomy or compact and was then switched
to the footer's style, one to two more stylings of ~3 ms each: 30-50 ms of the console's
loop per change. So each key gets its style before it mounts.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey

COMPACT_BELOW = 100  # columns: the detail's keys need 85 in the roomy style


class Footer(TextualFooter):
    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                # the value Textual gives it once mounted: the footer's (the palette key
                # keeps its own), set before it mounts so that nothing changes after
                palette = widget.has_class("-command-palette")
                compact = widget.compact if palette else self.compact
                widget.set_reactive(FooterKey.compact, compact)
                widget.set_class(compact, "-compact", update=False)
            yield widget

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW
