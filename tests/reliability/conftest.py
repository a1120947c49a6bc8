"""Fixtures of the fault-injection suite, and the closing table it prints: for every fault a
test injected, how long detection took, the outcome, and what (if anything) was lost."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.reliability.swjob_procs import clis  # noqa: F401  (shared fixture)

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
