"""The fault table the reliability and red-team tests print at the end of a run: for every
fault a test injected, how long detection took, the outcome, and what (if anything) was lost."""

from __future__ import annotations

from collections.abc import Callable

import pytest

__all__ = ["pytest_terminal_summary", "record_fault"]

_FAULTS: list[tuple[str, str, str, str]] = []


@pytest.fixture
def record_fault() -> Callable[[str, float | None, str, str], None]:
    """Add one row to the closing table: fault → detected after N s → outcome → lost."""

    def record(fault: str, detected_s: float | None, outcome: str, lost: str = "nothing") -> None:
        after = "—" if detected_s is None else f"{detected_s:.2f} s"
        _FAULTS.append((fault, after, outcome, lost))

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FAULTS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("faults injected")
    write("| fault injected | detected after | outcome | anything lost |")
    write("|---|---|---|---|")
    for row in _FAULTS:
        write("| " + " | ".join(row) + " |")
