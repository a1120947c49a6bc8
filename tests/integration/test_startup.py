"""Start-up stays light: a user without rented pools never pays for importing the Vast.ai SDK
(over a second), and the engine starts and closes cleanly in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import asyncio, sys
from engine.engine import Engine, EngineConfig
from engine.jobs.pools import load_pools

async def main():
    engine = Engine(EngineConfig(pools=load_pools(None)))
    await engine.start()
    await asyncio.sleep(0.2)  # let the start-up orphan check run
    await engine.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "vastai"))
"""


def test_engine_with_local_pools_never_imports_the_vast_sdk() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
