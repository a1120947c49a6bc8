"""The red-team cases share the fault table of the reliability suite."""

from __future__ import annotations

from tests.reliability.conftest import pytest_terminal_summary, record_fault  # noqa: F401
