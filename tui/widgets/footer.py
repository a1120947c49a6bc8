"""The key bar at the bottom of every screen, compact on a narrow terminal.

At 80 columns Textual's roomy footer ran out before its last keys: the board lost
`? Help` and `q Quit`, the detail and the outputs browser showed `q` without its word.
The compact style keeps every key and its word, with one space less around each.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Footer as TextualFooter

COMPACT_BELOW = 100  # columns: the detail's keys need 85 in the roomy style


class Footer(TextualFooter):
    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW
