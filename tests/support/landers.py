"""Which batches went to a landing process (agent/transfer/landproc.py) while a test ran.

Counted at `landproc.submit`, the one door to the landers, and passed on to the real
ones: asking `landproc.pids()` instead would be answered by an earlier test's landers,
idle in the pool for a while after it ended.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from agent.transfer import landproc


@contextlib.contextmanager
def handed_to_landers() -> Iterator[list[landproc.Where]]:
    """The batches handed to a lander meanwhile, each as its `Where`."""
    handed: list[landproc.Where] = []
    submit = landproc.submit
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(landproc, "submit", lambda *a: handed.append(a[0]) or submit(*a))
        yield handed
