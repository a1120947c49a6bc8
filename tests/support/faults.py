"""The fault table the reliability and red-team tests print at the end of a run: for every
fault a test injected, how long detection took, the outcome, and what (if anything) was lost.

Rows travel on the test's report (`user_properties`), so a run split over pytest-xdist
workers still prints one table in the process that prints the summary."""

from __future__ import annotations

from collections.abc import Callable

import pytest

__all__ = ["pytest_runtest_logreport", "pytest_terminal_summary", "record_fault"]

FAULT = "swjob fault"
_FAULTS: list[tuple[str, ...]] = []


@pytest.fixture
def record_fault(request: pytest.FixtureRequest) -> Callable[[str, float | None, str, str], None]:
    """Add one row to the closing table: fault → detected after N s → outcome → lost."""

    def record(fault: str, detected_s: float | None, outcome: str, lost: str = "nothing") -> None:
        after = "—" if detected_s is None else f"{detected_s:.2f} s"
        request.node.user_properties.append((FAULT, (fault, after, outcome, lost)))

    return record


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":  # its report carries every row the test recorded
        _FAULTS.extend(tuple(row) for name, row in report.user_properties if name == FAULT)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FAULTS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("faults injected")
    write("| fault injected | detected after | outcome | anything lost |")
    write("|---|---|---|---|")
    for row in _FAULTS:
        write("| " + " | ".join(row) + " |")
