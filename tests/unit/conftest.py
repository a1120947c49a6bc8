"""Fixtures shared by the unit tests."""

from __future__ import annotations

from tests.support.disks import small_disk  # noqa: F401  (fixture)
