"""A failing test under threads stays one failure (tests/support/astguard.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Threads parse while the test fails, and the failure leaves garbage whose finalizers run
# Python code: what the suite's engines, iroh objects and writer threads do under load.
FAILING = """
import ast, threading
import pytest

class Finalized:
    def __init__(self):
        self.me = self
    def __del__(self):
        sum(range(2000))

def parse_forever():
    while True:
        ast.parse("x = 1\\n" * 50)

threading.Thread(target=parse_forever, daemon=True).start()

@pytest.mark.parametrize("n", range(2))
def test_fails(n):
    garbage = [Finalized() for _ in range(500)]
    del garbage
    assert n < 0
"""


def run_pytest(tmp_path: Path, *plugin: str) -> str:
    """pytest on a file whose tests all fail, the statements after them long (pytest
    parses the whole module to draw a failure: the longer, the likelier a collection)."""
    test = tmp_path / "test_failing.py"
    test.write_text(FAILING + "\n".join(f"v{i} = {i}" for i in range(2000)) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin]
    argv += ["--rootdir", str(tmp_path), "-c", os.devnull, str(test)]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    return done.stdout + done.stderr


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 keeps the count per thread")
def test_without_the_guard_pytest_itself_breaks(tmp_path: Path) -> None:
    """The guard's reason: without it the same file is an INTERNALERROR, not 2 failures."""
    assert "AST constructor recursion depth mismatch" in run_pytest(tmp_path)


def test_with_the_guard_each_failure_is_reported(tmp_path: Path) -> None:
    out = run_pytest(tmp_path, "-p", "tests.support.astguard")
    assert "2 failed" in out and "INTERNALERROR" not in out, out[-2000:]
