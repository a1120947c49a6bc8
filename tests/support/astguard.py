"""No garbage collection while pytest draws a failure, so a failing test stays one failure.

CPython 3.11 counts the AST constructor's depth in state shared by every thread. pytest
parses a failing test's source to draw its traceback; a collection in the middle of that
runs finalizers (Python code), another thread parses meanwhile (the 3.11 traceback module
parses each frame's line to place its carets), and the count comes back wrong:
`SystemError: AST constructor recursion depth mismatch`. That error is pytest's own, so
the xdist worker died with every test it still held, and the one real failure's report
was lost (seen under load, where a failure is likeliest). Finalizers run only from a
collection or a last reference dropped, and no reference of the test's is dropped there.
"""

from __future__ import annotations

import gc
from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator:
    enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        if enabled:
            gc.enable()
