"""Test-wide isolation: no relays (loopback only) and throwaway state, cache and config dirs;
the fixtures every kind of test shares (from tests/support)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.astguard import pytest_runtest_makereport  # noqa: F401  (hook)
from tests.support.cli import clis  # noqa: F401  (fixture)
from tests.support.engines import engine, make_engine  # noqa: F401  (fixtures)
from tests.support.faults import (  # noqa: F401
    pytest_runtest_logreport,
    pytest_terminal_summary,
    record_fault,
)
from tests.support.jobs import make_job  # noqa: F401  (fixture)
from tests.support.receiver import receiver  # noqa: F401  (fixture)
from tests.support.s3 import s3, s3_server  # noqa: F401  (fixtures)

if TYPE_CHECKING:
    from tests.standin.server import StandIn

os.environ["SWJOB_IROH_RELAY"] = "disabled"
os.environ["SWJOB_IROH_BIND"] = "127.0.0.1:0"

_session_root = Path(tempfile.mkdtemp(prefix="swjob-tests-"))
for _name in ("STATE", "CACHE", "CONFIG", "RUNTIME"):
    os.environ[f"SWJOB_{_name}_DIR"] = str(_session_root / _name.lower())


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test gets its own state/cache/config dirs under its tmp_path, and fails if a
    process it started (an agent, a stand-in instance, a job) is still running after it."""
    for name in ("state", "cache", "config"):
        monkeypatch.setenv(f"SWJOB_{name.upper()}_DIR", str(tmp_path / f"swjob-{name}"))
    yield tmp_path
    from tests.support.leftovers import end_leftovers

    if killed := end_leftovers(tmp_path):
        pytest.fail("left running after the test (now killed):\n" + "\n".join(killed))


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    """A local stand-in of the Vast.ai REST API, driven through the real SDK (DESIGN §6);
    it fails the test that leaves an instance alive."""
    from tests.support.vast import standin

    yield from standin(tmp_path, monkeypatch)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import shutil

    shutil.rmtree(_session_root, ignore_errors=True)
