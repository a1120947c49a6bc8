"""Dependencies point one way: tui → engine → agent. Checked in a fresh interpreter, so an
import done by another test cannot hide a violation (harlequin's approach)."""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = {
    "agent": ("engine", "tui", "textual"),
    "engine": ("tui", "textual"),
}

MODULES = {
    "agent": [
        "agent.protocol",
        "agent.endpoint",
        "agent.redact",
        "agent.supervisor",
        "agent.node",
        "agent.main",
        "agent.transfer",
    ],
    "engine": [
        "engine.engine",
        "engine.cli",
        "engine.fsm",
        "engine.orchestrator",
        "engine.providers.registry",
        "engine.providers.vastai",
        "engine.plan",
        "engine.gc",
    ],
}


@pytest.mark.parametrize("layer", sorted(MODULES))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES[layer]!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN[layer]!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "", f"{layer} pulled in: {out.stdout.strip()}"
